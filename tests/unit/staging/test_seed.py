"""StagingStore.seed: the engine's starting state in bulk, into an empty store only."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from etl_dataflows.state import StateImage, rows_to_table
from etl_dataflows.testing import ledger_dataflow, make_batch, run_in_memory
from staging.exceptions import StagingCommitFailed
from staging.store import StagingStore


def _image() -> StateImage:
    flow = ledger_dataflow().build()
    table = flow.tables["accounts"]
    rows = [{"id": i, "balance": 100 * i} for i in range(1, 6)]
    return StateImage({"accounts": rows_to_table(table, rows)}, {"accounts": 7})


def test_seed_then_load_state_round_trips(tmp_path: Path) -> None:
    flow = ledger_dataflow()
    with StagingStore(tmp_path / "s.duckdb", flow) as store:
        store.seed(_image())
        state = store.load_state()
        assert state.tables["accounts"].to_pylist() == _image().tables["accounts"].to_pylist()
        assert state.sequences == {"accounts": 7}
        assert store.watermark == 0
        # nothing to migrate: the seed is not a change
        assert store.query('SELECT count(*) AS n FROM delta_log."accounts"')["n"][0].as_py() == 0


def test_seed_refuses_a_store_with_state(tmp_path: Path) -> None:
    flow = ledger_dataflow()
    with StagingStore(tmp_path / "s.duckdb", flow) as store:
        store.seed(_image())
        with pytest.raises(StagingCommitFailed, match="not empty"):
            store.seed(_image())


def test_seed_refuses_a_store_with_batches(tmp_path: Path) -> None:
    from staging.batch_commit import BatchCommit

    flow = ledger_dataflow()
    compiled = flow.build()
    run = run_in_memory(flow, [make_batch(flow, 1, txns=[])])
    commit = BatchCommit(
        batch_id=1,
        result=run.results[0],
        dead_letters=pa.table({}),
        offsets={},
        streams={},
        events=0,
        records=0,
        arrived_at=0.0,
        executed_ms=0.0,
    )
    with StagingStore(tmp_path / "s.duckdb", compiled) as store:
        from staging.layout import DEAD_LETTER_INPUT_SCHEMA

        commit.dead_letters = DEAD_LETTER_INPUT_SCHEMA.empty_table()
        store.commit([commit])
        with pytest.raises(StagingCommitFailed, match="already committed"):
            store.seed(_image())


def test_seed_rejects_unknown_tables(tmp_path: Path) -> None:
    image = _image()
    image.tables["nope"] = pa.table({"x": [1]})
    with StagingStore(tmp_path / "s.duckdb", ledger_dataflow()) as store:
        with pytest.raises(StagingCommitFailed, match="unknown state tables"):
            store.seed(image)
        assert store.load_state().tables["accounts"].num_rows == 0
