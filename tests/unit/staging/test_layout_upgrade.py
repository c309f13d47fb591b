"""A staging file of layout 1 (dead letters without their encoding) is brought up to date in place
when opened for writing, keeps its rows, and reads as it is when opened read-only; a file of a
newer layout is refused."""

from __future__ import annotations

import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from etl_dataflows import create_executor
from etl_dataflows.batch import BatchResult
from etl_dataflows.testing import WorkloadSpec, ledger_workload
from staging import BatchCommit, StagingStore, StreamProgress
from staging.exceptions import StagingMismatch
from staging.layout import DEAD_LETTER_INPUT_SCHEMA, LAYOUT_VERSION


def _work():  # type: ignore[no-untyped-def]
    return ledger_workload(WorkloadSpec(keys=20, batch_size=50, batches=2))


def _commit(batch_id: int, result: BatchResult, dead: pa.Table) -> BatchCommit:
    return BatchCommit(
        batch_id=batch_id,
        result=result,
        dead_letters=dead,
        offsets={("t.txns", 0): batch_id},
        streams={"txns": StreamProgress(batch_id, 100, 10, 9)},
        events=10,
        records=1,
        arrived_at=time.time(),
        executed_ms=1.0,
    )


def _dead(payload: str, encoding: str | None) -> pa.Table:
    row = {
        "batch_id": 1,
        "stream": "txns",
        "step": "ingest",
        "topic": "t.txns",
        "partition": 0,
        "offset": 3,
        "pos": 10,
        "ts": None,
        "reason": "bad",
        "payload": payload,
        "encoding": encoding,
        "payload_bytes": None if encoding is None else len(payload),
    }
    return pa.Table.from_pylist([row], schema=DEAD_LETTER_INPUT_SCHEMA)


def _make_layout_1(path: Path) -> None:
    """A file as the first layout left it: no encoding columns, no layout_version row."""
    work = _work()
    executor = create_executor("serial", work.flow)
    with StagingStore(path, work.flow) as store:
        store.commit([_commit(1, executor.run_batch(work.batches[0]), _dead("b'\\xff'", None))])
    con = duckdb.connect(str(path))
    con.execute("ALTER TABLE streamdi.dead_letters DROP COLUMN encoding")
    con.execute("ALTER TABLE streamdi.dead_letters DROP COLUMN payload_bytes")
    con.execute("DELETE FROM streamdi.meta WHERE key = 'layout_version'")
    con.close()


def test_a_layout_1_file_is_upgraded_in_place(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    _make_layout_1(path)
    work = _work()
    with StagingStore(path, work.flow, read_only=True) as store:  # read as it is
        [old] = store.dead_letters().to_pylist()
        assert old["encoding"] is None and old["payload"] == "b'\\xff'"
        assert store.meta("layout_version") is None
    executor = create_executor("serial", work.flow)
    executor.run_batch(work.batches[0])
    with StagingStore(path, work.flow) as store:
        assert store.meta("layout_version") == str(LAYOUT_VERSION)
        store.commit([_commit(2, executor.run_batch(work.batches[1]), _dead("{}", "json"))])
        rows = store.dead_letters().to_pylist()
    assert [(r["id"], r["encoding"], r["payload_bytes"]) for r in rows] == [
        (1, None, None),
        (2, "json", 2),
    ]
    with StagingStore(path, work.flow) as store:  # opening again changes nothing
        assert len(store.dead_letters()) == 2


def test_a_newer_layout_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    work = _work()
    with StagingStore(path, work.flow) as store:
        store.set_meta("layout_version", str(LAYOUT_VERSION + 1))
    with pytest.raises(StagingMismatch, match="newer"):
        StagingStore(path, work.flow)
