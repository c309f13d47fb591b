"""The incremental TPC-DI dataflow on the local executor (its trade, cash, holding and watch steps
compiled with pre-reads, string codes and two-column keys) against the serial oracle, batch by
batch, on a generated daily feed: Batch1's facts as the event stream, then the whole of Batch2;
and Batch1's facts followed by every day of the feed, cut into engine batches that span days."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

import tpcdi.incremental.builder as builder
from etl_dataflows.batch import EngineBatch
from etl_dataflows.executors import LocalExecutor
from etl_dataflows.testing import assert_same_results, run_in_memory
from migration.schema import WarehouseLayout
from tpcdi.generator import generate
from tpcdi.historical.load import transform_dimensions
from tpcdi.incremental import build_flow
from tpcdi.incremental.changes import ChangesSource
from tpcdi.incremental.reference import Reference
from tpcdi.run.streaming import stream_events

#: Days of the generated feed.
DAYS = 6


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    data = tmp_path_factory.mktemp("tpcdi-oracle")
    generate(data, 0.1, days=DAYS)
    flow = build_flow().build()
    result = transform_dimensions(data / "Batch1", flow, WarehouseLayout(flow, "dw"))
    assert result.inputs is not None
    con = duckdb.connect()
    for name, table in result.tables.items():
        con.register(name, table)
    reference = Reference.from_warehouse(lambda sql: con.sql(sql).to_arrow_table())
    stream = stream_events(result.inputs.tables).drop_columns(["_pos"])
    stream = stream.append_column("_pos", pa.array(range(1, stream.num_rows + 1), pa.int64()))
    days = [
        pa.concat_tables([c.events for c in ChangesSource(Path(data / f"Batch{b}"), b).read()])
        for b in range(2, DAYS + 2)
    ]
    return {
        "seed": result.seed,
        "reference": reference,
        "stream": stream,
        "update": days[0],
        "feed": pa.concat_tables(days),
    }


@pytest.fixture
def fixed_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Alerts carry the run's clock: one fixed instant, so two runs can be compared."""
    fixed = datetime.datetime(2024, 1, 1)
    monkeypatch.setattr(builder, "now_column", lambda n: pa.array([fixed] * n, pa.timestamp("us")))


def test_local_executor_equals_the_oracle_on_tpcdi(
    workload: dict[str, Any], fixed_clock: None
) -> None:
    flow = build_flow(workload["reference"]).build()
    stream, update = workload["stream"], workload["update"]
    assert update.num_rows > 0 and stream.num_rows > 3_000
    events = stream.slice(0, 12_000)
    batches = [
        EngineBatch(i + 1, {"changes": events.slice(offset, 1_500)})
        for i, offset in enumerate(range(0, events.num_rows, 1_500))
    ]
    batches += [
        EngineBatch(len(batches) + 1 + i, {"changes": update.slice(offset, 800)})
        for i, offset in enumerate(range(0, update.num_rows, 800))
    ]
    oracle = run_in_memory(flow, batches, executor="serial", state=workload["seed"])
    local = run_in_memory(flow, batches, executor="local", state=workload["seed"])
    assert_same_results(oracle, local)
    committed = sum(r.stats["apply_trade"].committed for r in oracle.results)
    assert committed > 1_000  # the comparison covered real trade work
    analysis = LocalExecutor(flow, workload["seed"]).explain()
    for step in ("apply_trade", "apply_cash", "apply_holding", "apply_watch"):
        assert analysis[step].compiled and analysis[step].extended, analysis[step].reasons


def test_local_executor_equals_the_oracle_on_the_daily_feed(
    workload: dict[str, Any], fixed_clock: None
) -> None:
    """Every fact of Batch1 in two large batches, then the six days of the feed as the pipeline
    would cut them (700 events, days' boundaries inside batches): every batch's changes, outputs,
    aborts and dead letters are the oracle's."""
    flow = build_flow(workload["reference"]).build()
    stream, feed = workload["stream"], workload["feed"]
    assert feed.num_rows > DAYS * 600
    assert len(set(feed["batchid"].to_pylist())) == DAYS
    half = stream.num_rows // 2 + 1
    batches = [
        EngineBatch(1, {"changes": stream.slice(0, half)}),
        EngineBatch(2, {"changes": stream.slice(half)}),
    ]
    batches += [
        EngineBatch(3 + i, {"changes": feed.slice(offset, 700)})
        for i, offset in enumerate(range(0, feed.num_rows, 700))
    ]
    oracle = run_in_memory(flow, batches, executor="serial", state=workload["seed"])
    local = run_in_memory(flow, batches, executor="local", state=workload["seed"])
    assert_same_results(oracle, local)
    feed_results = oracle.results[2:]
    updated = sum(r.stats["apply_trade"].committed for r in feed_results)
    customers = sum(r.stats["apply_customer"].committed for r in feed_results)
    assert updated > DAYS * 5 and customers >= DAYS  # the days' trades and customers ran
