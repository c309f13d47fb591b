"""The staging store: commits apply a batch's state changes, outputs, dead letters and offsets in
one transaction; a reopened store gives back the engine's state; a failed or repeated commit leaves
nothing behind."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
import pytest

from etl_dataflows import Dataflow, create_executor
from etl_dataflows.batch import BatchResult
from etl_dataflows.testing import WorkloadSpec, ledger_workload, make_batch
from staging import BatchCommit, StagingStore, StreamProgress, open_snapshot
from staging.exceptions import BatchAlreadyCommitted, StagingCommitFailed, StagingMismatch
from staging.layout import DEAD_LETTER_INPUT_SCHEMA
from tests.unit.staging.helpers import customers_flow


def _commit(
    batch_id: int, result: BatchResult, offset: int, dead: pa.Table | None = None
) -> BatchCommit:
    return BatchCommit(
        batch_id=batch_id,
        result=result,
        dead_letters=dead if dead is not None else DEAD_LETTER_INPUT_SCHEMA.empty_table(),
        offsets={("t.txns", 0): offset},
        streams={
            "txns": StreamProgress(batch_id, batch_id * 100, batch_id * 10, batch_id * 10 - 1)
        },
        events=10,
        records=1,
        arrived_at=time.time(),
        executed_ms=1.0,
    )


def _workload(batches: int = 4):
    return ledger_workload(
        WorkloadSpec(
            keys=50, batch_size=300, batches=batches, error_ratio=0.02, insert_delete_ratio=0.1
        )
    )


def test_reopened_store_gives_back_the_engine_state(tmp_path: Path) -> None:
    work = _workload()
    path = tmp_path / "staging.duckdb"
    executor = create_executor("serial", work.flow)
    outputs = 0
    with StagingStore(path, work.flow) as store:
        for i, batch in enumerate(work.batches, start=1):
            result = executor.run_batch(batch)
            outputs += result.outputs["balances"].num_rows
            store.commit([_commit(i, result, offset=i * 7)])
        assert store.watermark == len(work.batches)
    with StagingStore(path, work.flow) as store:
        image = store.load_state()
        assert image.equals(executor.state_image())
        assert store.offsets() == {("t.txns", 0): len(work.batches) * 7}
        assert store.streams()["txns"] == StreamProgress(4, 400, 40, 39)
        staged = store.query('SELECT count(*) AS n FROM outputs."balances"').column("n")[0].as_py()
        assert staged == outputs
        dead = (
            store.query('SELECT count(*) AS n FROM streamdi."dead_letters"').column("n")[0].as_py()
        )
        assert dead == 0  # the engine's dead letters only land when the caller passes them


def test_group_commit_equals_one_by_one(tmp_path: Path) -> None:
    work = _workload(batches=5)
    executor = create_executor("serial", work.flow)
    results = [executor.run_batch(b) for b in work.batches]
    one = StagingStore(tmp_path / "one.duckdb", work.flow)
    group = StagingStore(tmp_path / "group.duckdb", work.flow)
    for i, r in enumerate(results, start=1):
        one.commit([_commit(i, r, i)])
    group.commit([_commit(i, r, i) for i, r in enumerate(results, start=1)])
    assert one.load_state().equals(group.load_state())
    assert one.load_state().equals(executor.state_image())
    for table in work.flow.build().tables:
        sql = f'SELECT * FROM delta_log."{table}" ORDER BY ALL'
        assert one.query(sql).equals(group.query(sql))
    one.close()
    group.close()


def test_history_table_versions_are_staged(tmp_path: Path) -> None:
    flow = customers_flow()
    executor = create_executor("serial", flow)
    day = 86_400_000_000
    b1 = make_batch(
        flow, 1, changes=[{"id": 1, "tier": 1, "_ts": day}, {"id": 2, "tier": 1, "_ts": day}]
    )
    b2 = make_batch(flow, 2, changes=[{"id": 1, "tier": 2, "_ts": 3 * day}])
    with StagingStore(tmp_path / "s.duckdb", flow) as store:
        store.commit([_commit(1, executor.run_batch(b1), 1)])
        store.commit([_commit(2, executor.run_batch(b2), 2)])
        image = store.load_state()
    rows = image.tables["customer"].to_pylist()
    assert [(r["id"], r["tier"], r["is_current"]) for r in rows] == [
        (1, 1, False),
        (2, 1, True),
        (1, 2, True),
    ]
    assert image.equals(executor.state_image())


def test_a_batch_is_never_applied_twice(tmp_path: Path) -> None:
    work = _workload(batches=2)
    executor = create_executor("serial", work.flow)
    r1 = executor.run_batch(work.batches[0])
    with StagingStore(tmp_path / "s.duckdb", work.flow) as store:
        store.commit([_commit(1, r1, 1)])
        with pytest.raises(BatchAlreadyCommitted):
            store.commit([_commit(1, r1, 1)])
    with StagingStore(tmp_path / "s.duckdb", work.flow) as store:
        with pytest.raises(BatchAlreadyCommitted):
            store.commit([_commit(1, r1, 1)])
        assert (
            store.query('SELECT count(*) AS n FROM streamdi."batches"').column("n")[0].as_py() == 1
        )


def test_a_failed_commit_leaves_nothing(tmp_path: Path) -> None:
    work = _workload(batches=2)
    executor = create_executor("serial", work.flow)
    r1, r2 = (executor.run_batch(b) for b in work.batches)
    with StagingStore(tmp_path / "s.duckdb", work.flow) as store:
        store.commit([_commit(1, r1, 1)])
        before = store.load_state()

        def fail(step: str) -> None:
            if step == "ledger":
                raise RuntimeError("injected")

        with pytest.raises(StagingCommitFailed):
            store.commit([_commit(2, r2, 2)], hook=fail)
        assert store.watermark == 1
        assert store.load_state().equals(before)
        assert store.offsets() == {("t.txns", 0): 1}
        n = store.query("SELECT count(*) AS n FROM delta_log.accounts WHERE batch_id = 2")
        assert n.column("n")[0].as_py() == 0
        store.commit([_commit(2, r2, 2)])
        assert store.load_state().equals(executor.state_image())


def test_dead_letters_get_ids_and_replay_marks(tmp_path: Path) -> None:
    work = _workload(batches=2)
    executor = create_executor("serial", work.flow)
    r1, r2 = (executor.run_batch(b) for b in work.batches)
    dead = pa.table(
        {
            "batch_id": [1, 1],
            "stream": ["txns", "txns"],
            "step": ["ingest", "ledger"],
            "topic": ["t.txns", "t.txns"],
            "partition": pa.array([0, 0], pa.int32()),
            "offset": [3, 4],
            "pos": [10, 11],
            "ts": [None, 5],
            "reason": ["bad", "worse"],
            "payload": ["x|y", "{}"],
        }
    )
    with StagingStore(tmp_path / "s.duckdb", work.flow) as store:
        store.commit([_commit(1, r1, 1, dead)])
        c2 = _commit(2, r2, 2)
        c2.replayed = [1]
        store.commit([c2])
        rows = store.dead_letters().to_pylist()
    assert [r["id"] for r in rows] == [1, 2]
    assert [r["replayed_in"] for r in rows] == [2, None]
    with StagingStore(tmp_path / "s.duckdb", work.flow) as store:
        assert store.dead_letters(pending_only=True).column("id").to_pylist() == [2]


def test_snapshot_reads_at_a_watermark(tmp_path: Path) -> None:
    work = _workload(batches=3)
    executor = create_executor("serial", work.flow)
    results = [executor.run_batch(b) for b in work.batches]
    with StagingStore(tmp_path / "s.duckdb", work.flow) as store:
        store.commit([_commit(1, results[0], 1)])
        with open_snapshot(store) as snap:
            store.commit([_commit(2, results[1], 2)])  # committed while the snapshot is open
            assert snap.watermark == 1
            assert snap.batches().num_rows == 1
            assert set(snap.outputs("balances").column("batch_id").to_pylist()) == {1}
        with open_snapshot(store) as snap:
            assert snap.watermark == 2
            changes = snap.changes("accounts", after=1)
            assert set(changes.column("batch_id").to_pylist()) == {2}
            ids = changes.column("id").to_pylist()
            assert len(ids) == len(set(ids))
            assert snap.table("accounts").num_rows == store.load_state().tables["accounts"].num_rows


def test_a_file_of_another_dataflow_is_refused(tmp_path: Path) -> None:
    work = _workload(batches=1)
    StagingStore(tmp_path / "s.duckdb", work.flow).close()
    other = Dataflow("ledger")
    other.table("accounts", key={"id": "int64"}, columns={"balance": "float64"})
    other.source("txns", schema={"id": "int64"})
    other.sink("out")
    with pytest.raises(StagingMismatch, match="changed"):
        StagingStore(tmp_path / "s.duckdb", other)
