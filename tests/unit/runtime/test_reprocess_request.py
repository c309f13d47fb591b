"""What ``streamdi upgrade reprocess`` refuses before it touches anything (runtime.reprocess):
a plain sink, an unknown name, no name; and the cut-over batch it commits changes only the named
tables' rows and moves no offsets."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from etl_dataflows.executors import create_executor
from migration.schema import declare_plain_sinks
from runtime import bind
from runtime.replay_start import ReprocessRefused
from runtime.reprocess import check_request, cut_over_commit
from staging import StagingStore
from staging.difference import table_difference
from tests.unit.runtime.harness import pair_dataflow
from tests.unit.staging.helpers import simple_commit
from tests.unit.staging.test_upgrade import bank, batches


@pytest.mark.parametrize(
    ("tables", "reason"),
    [
        (["kv", "nope"], "'nope' is neither a state table nor a sink"),
        ([], "at least one state table or sink"),
    ],
)
def test_requests_that_cannot_be_served_are_refused(tables: list[str], reason: str) -> None:
    with pytest.raises(ReprocessRefused, match=reason):
        check_request(bind(pair_dataflow()), tables)


def test_a_plain_sink_is_refused() -> None:
    declare_plain_sinks("pair", ["log_a"])
    try:
        with pytest.raises(ReprocessRefused, match="'log_a' is a plain sink"):
            check_request(bind(pair_dataflow()), ["kv", "log_a"])
    finally:
        declare_plain_sinks("pair", [])


def test_state_tables_and_sinks_are_accepted() -> None:
    check_request(bind(pair_dataflow()), ["kv", "log_a"])


def test_the_cut_over_batch_changes_the_named_table_and_nothing_else(tmp_path: Path) -> None:
    flow = bank(1)
    oracle = create_executor("serial", flow)
    with StagingStore(tmp_path / "s.duckdb", flow, background_merge=False) as store:
        for batch in batches(flow, 1, 3, seed=4):
            store.commit([simple_commit(batch.batch_id, oracle.run_batch(batch))])
        offsets, before = store.offsets(), store.state_table("accounts")
        # the recomputed rows: every balance doubled, account 0 gone
        doubled = before.set_column(1, "balance", pa.compute.multiply(before["balance"], 2))
        recomputed = doubled.filter(pa.compute.not_equal(doubled["id"], 0))
        delta = table_difference(before, recomputed, ["id"])
        store.commit([cut_over_commit(4, {"accounts": delta}, {"x": 7})])
        assert store.watermark == 4
        assert store.state_table("accounts").equals(recomputed)
        assert store.offsets() == offsets
        assert store.sequences() == {"x": 7}
        ledger = store.query("SELECT events, records FROM streamdi.batches WHERE batch_id = 4")
        assert ledger.to_pylist() == [{"events": 0, "records": 0}]
