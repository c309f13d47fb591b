"""The merge state of a stream over several partitions (held events, per-partition batch id and
watermark) is committed with the batch, the last batch of a group wins, it survives a reopening,
and a file of layout 2 gains the table empty."""

from __future__ import annotations

import time
from pathlib import Path

import duckdb
import pytest

from etl_dataflows import create_executor
from etl_dataflows.batch import BatchResult
from etl_dataflows.testing import WorkloadSpec, ledger_workload
from staging import BatchCommit, PartitionProgress, StagingStore, StreamProgress
from staging.exceptions import StagingCommitFailed
from staging.layout import DEAD_LETTER_INPUT_SCHEMA, LAYOUT_VERSION


def _commit(
    batch_id: int, result: BatchResult, partitions: dict[tuple[str, str, int], PartitionProgress]
) -> BatchCommit:
    return BatchCommit(
        batch_id=batch_id,
        result=result,
        dead_letters=DEAD_LETTER_INPUT_SCHEMA.empty_table(),
        offsets={("t.txns", p): batch_id * 10 + p for p in range(4)},
        streams={"txns": StreamProgress(batch_id, batch_id * 100, batch_id * 10, -1)},
        events=10,
        records=1,
        arrived_at=time.time(),
        executed_ms=1.0,
        partitions=partitions,
    )


def test_merge_state_commits_with_the_batch_and_the_last_of_a_group_wins(tmp_path: Path) -> None:
    work = ledger_workload(WorkloadSpec(keys=20, batch_size=50, batches=3))
    executor = create_executor("serial", work.flow)
    results = [executor.run_batch(b) for b in work.batches]
    path = tmp_path / "s.duckdb"

    def state(batch_id: int) -> dict[tuple[str, str, int], PartitionProgress]:
        return {
            ("txns", "t.txns", p): PartitionProgress(
                batch_id * 4 + p, batch_id * 1000 + p, b"held-%d-%d" % (batch_id, p) if p else None
            )
            for p in range(4)
        }

    with StagingStore(path, work.flow) as store:
        assert store.partitions() == {}
        store.commit([_commit(1, results[0], state(1))])
        assert store.partitions() == state(1)
        store.commit([_commit(2, results[1], state(2)), _commit(3, results[2], state(3))])
        assert store.partitions() == state(3)
        assert sorted(store.offsets()) == [("t.txns", p) for p in range(4)]
    with StagingStore(path, work.flow, read_only=True) as store:
        assert store.partitions() == state(3)


def test_a_failed_commit_leaves_the_merge_state_as_it_was(tmp_path: Path) -> None:
    work = ledger_workload(WorkloadSpec(keys=20, batch_size=50, batches=2))
    executor = create_executor("serial", work.flow)
    results = [executor.run_batch(b) for b in work.batches]
    before = {("txns", "t.txns", 0): PartitionProgress(1, 10, b"x")}
    after = {("txns", "t.txns", 0): PartitionProgress(2, 20, None)}
    with StagingStore(tmp_path / "s.duckdb", work.flow) as store:
        store.commit([_commit(1, results[0], before)])

        def fail(step: str) -> None:
            if step == "ledger":
                raise RuntimeError("injected")

        with pytest.raises(StagingCommitFailed):
            store.commit([_commit(2, results[1], after)], hook=fail)
        assert store.partitions() == before


def test_a_layout_2_file_gains_the_table(tmp_path: Path) -> None:
    work = ledger_workload(WorkloadSpec(keys=20, batch_size=50, batches=1))
    path = tmp_path / "s.duckdb"
    StagingStore(path, work.flow).close()
    con = duckdb.connect(str(path))
    con.execute("DROP TABLE streamdi.partitions")
    con.execute("UPDATE streamdi.meta SET value = '2' WHERE key = 'layout_version'")
    con.close()
    with StagingStore(path, work.flow, read_only=True) as store:
        assert store.partitions() == {}  # a read-only opening reads the old layout as it is
    with StagingStore(path, work.flow) as store:
        assert store.meta("layout_version") == str(LAYOUT_VERSION)
        assert store.partitions() == {}
