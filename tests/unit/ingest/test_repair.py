"""``streamdi streams repair``: a high mark an unchecked event time poisoned gets the newest
in-range event time of the stream's staged rows (or none); an in-range one is left alone; what it
would change is said before anything is written."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
import pytest

from etl_dataflows import create_executor
from etl_dataflows.testing import WorkloadSpec, ledger_workload
from ingest.eventtime import EventTimeBounds
from ingest.repair import repair_high_mark
from staging import BatchCommit, StagingStore, StreamProgress
from staging.highmark import set_high_mark
from staging.layout import DEAD_LETTER_INPUT_SCHEMA
from streamdi.errors import ConfigurationError

BOUNDS = EventTimeBounds()


def _store(path: Path, high: int | None) -> tuple[StagingStore, int]:
    """A store with one committed batch of the ledger workload; returns the newest ``_ts`` its
    outputs hold."""
    work = ledger_workload(WorkloadSpec(keys=20, batch_size=50, batches=1))
    result = create_executor("serial", work.flow).run_batch(work.batches[0])
    store = StagingStore(path, work.flow)
    store.commit(
        [
            BatchCommit(
                batch_id=1,
                result=result,
                dead_letters=DEAD_LETTER_INPUT_SCHEMA.empty_table(),
                offsets={("t.txns", 0): 1},
                streams={"txns": StreamProgress(1, high, 50, 49)},
                events=50,
                records=1,
                arrived_at=time.time(),
                executed_ms=1.0,
            )
        ]
    )
    outputs = pa.concat_tables(result.outputs.values(), promote_options="permissive")
    return store, int(pa.compute.max(outputs.column("_ts")).as_py())


def test_a_poisoned_high_mark_gets_the_newest_staged_event_time(tmp_path: Path) -> None:
    store, newest = _store(tmp_path / "s.duckdb", 2**62)
    with store:
        dry = repair_high_mark(store, "txns", BOUNDS, dry_run=True)
        assert (dry.changed, dry.after) == (False, newest)
        assert "would become" in dry.text() and "--dry-run" in dry.text()
        assert store.streams()["txns"].max_ts == 2**62
        report = repair_high_mark(store, "txns", BOUNDS)
        assert (report.before, report.after, report.changed) == (2**62, newest, True)
        assert "outputs." in report.why and "-> " in report.text()
        assert store.streams()["txns"].max_ts == newest
        again = repair_high_mark(store, "txns", BOUNDS)
        assert not again.changed and "in range" in again.text()


def test_with_nothing_staged_the_high_mark_is_reset_and_values_can_be_asked(
    tmp_path: Path,
) -> None:
    store, _ = _store(tmp_path / "s.duckdb", 2**62)
    with store:
        # the workload's event times are near the epoch: none is in range from an hour ago on
        narrow = EventTimeBounds(min_us=time.time_ns() // 1000 - 3_600_000_000)
        report = repair_high_mark(store, "txns", narrow)
        assert (report.after, report.changed) == (None, True)
        assert store.streams()["txns"].max_ts is None
        asked = repair_high_mark(store, "txns", BOUNDS, to_us=1_000)
        assert (asked.after, store.streams()["txns"].max_ts) == (1_000, 1_000)
        assert repair_high_mark(store, "txns", BOUNDS, reset=True).after is None
        with pytest.raises(ConfigurationError, match="--to"):
            repair_high_mark(store, "txns", BOUNDS, to_us=2**62)
        with pytest.raises(ConfigurationError, match="--stream"):
            repair_high_mark(store, "nope", BOUNDS)
        assert not set_high_mark(store, "nope", 5)
