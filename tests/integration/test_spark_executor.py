"""The ``spark`` executor on Spark local mode (local[2], two partitions): the serial oracle's
results on every path — one pass, supersteps, the driver — with the work and state really
travelling through Spark tasks. One session for the whole test process; a session that cannot
start fails the tests."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from etl_dataflows import Dataflow, col, create_executor, old, udf
from etl_dataflows.batch import StepDecision
from etl_dataflows.exceptions import StepFailed
from etl_dataflows.executors.spark import (
    SparkConfig,
    SparkExecutor,
    configure_spark,
    spark_session,
)
from etl_dataflows.testing import (
    WorkloadSpec,
    assert_same_results,
    ledger_workload,
    make_batch,
    run_in_memory,
)
from etl_dataflows.testing.harness import RunResult, TestingSink
from tests.unit.etl_dataflows.test_local_executor import calc_flow, events
from tests.unit.etl_dataflows.test_spark_plans import specs
from tests.unit.etl_dataflows.test_tpcdi_patterns import DAY, HOUR, acct, broker_flow, cust, trade
from tests.unit.etl_dataflows.test_user_functions import ODD, typed_udfs_flow

pytestmark = pytest.mark.spark

CONFIG = SparkConfig(master="local[2]", partitions=2, min_transactions=0, max_supersteps=4)


@pytest.fixture(scope="module", autouse=True)
def session() -> Any:
    configure_spark(CONFIG)
    return spark_session()  # raises (fails the tests) when Spark cannot start


def run_spark(
    flow: Any,
    batches: Any,
    placement: Any,
    state: Any = None,
    config: SparkConfig = CONFIG,
) -> tuple[RunResult, list[StepDecision]]:
    runner = SparkExecutor(flow, state, placement=placement, config=config)
    try:
        sink = TestingSink()
        results = []
        for batch in batches:
            result = runner.run_batch(batch)
            sink.collect(result)
            results.append(result)
        decisions = [d for r in results for d in r.decisions]
        return RunResult("spark", results, sink, runner.state_image()), decisions
    finally:
        runner.close()


def test_a_pass_runs_in_spark_tasks() -> None:
    workload = ledger_workload(WorkloadSpec(keys=300, batch_size=500, batches=2, seed=1))
    oracle = run_in_memory(workload.flow, workload.batches, state=workload.state)
    got, decisions = run_spark(workload.flow, workload.batches, "spark", workload.state)
    assert all(d.figures["passes"] >= 1 and d.figures["spark_transactions"] > 0 for d in decisions)
    assert all(d.figures["job_ms"] > 0 and d.figures["task_ms"] > 0 for d in decisions)
    assert_same_results(oracle, got)


@pytest.mark.parametrize("placement", ["spark", "supersteps"])
@settings(max_examples=10)
@given(specs)
def test_spark_matches_the_serial_oracle(placement: str, spec: WorkloadSpec) -> None:
    workload = ledger_workload(spec)
    oracle = run_in_memory(workload.flow, workload.batches, state=workload.state)
    got, decisions = run_spark(workload.flow, workload.batches, placement, workload.state)
    assert all(d.strategy in ("one_pass", "supersteps") for d in decisions)
    assert_same_results(oracle, got)


@settings(max_examples=5)
@given(st.lists(events, min_size=1, max_size=3))
def test_compiled_expressions_through_spark(batches: list[list[dict[str, Any]]]) -> None:
    """String and int keys, surrogate keys, reads of other keys, inserts and deletes, a user
    function that raises (its module travels by reference), integer overflow."""
    flow = calc_flow()
    made = [make_batch(flow, i + 1, ev=rows) for i, rows in enumerate(batches)]
    oracle = run_in_memory(flow, made)
    got, _ = run_spark(flow, made, "supersteps")
    assert_same_results(oracle, got)


def test_misbehaving_user_functions_in_spark_tasks() -> None:
    """Functions returning values of the wrong type, out of range, or raising, in every place a
    transaction calls one, evaluated in Spark's Python workers: each row fails on its own value,
    as on the serial oracle, whichever partition and neighbours it has (issue 23)."""
    import random

    flow = typed_udfs_flow()
    rng = random.Random(23)
    modes = ("m_set", "m_when", "m_key", "m_req", "m_emit")

    def mode() -> int:
        return 0 if rng.random() < 0.7 else rng.randrange(len(ODD))

    rows = [
        {"id": rng.randrange(6), "a": rng.randrange(-3, 4), **{m: mode() for m in modes}, "_ts": i}
        for i in range(600)
    ]
    made = [make_batch(flow, 1, ev=rows[:300]), make_batch(flow, 2, ev=rows[300:])]
    oracle = run_in_memory(flow, made)
    assert {a["kind"] for a in oracle.sink.abort_rows()} == {"condition", "error"}
    for placement in ("spark", "supersteps"):
        got, decisions = run_spark(flow, made, placement)
        assert all(d.figures["spark_transactions"] > 0 for d in decisions)
        assert_same_results(oracle, got)


def test_one_pass_when_no_transaction_crosses_partitions() -> None:
    workload = ledger_workload(
        WorkloadSpec(
            keys=2_000,
            cross_key_ratio=0.0,
            insert_delete_ratio=0.0,
            read_ratio=0.0,
            abort_ratio=0.0,
            same_key_ratio=0.3,
            batch_size=3_000,
            batches=2,
            seed=2,
        )
    )
    oracle = run_in_memory(workload.flow, workload.batches, state=workload.state)
    got, decisions = run_spark(workload.flow, workload.batches, "spark", workload.state)
    assert [d.strategy for d in decisions] == ["one_pass", "one_pass"]
    assert all(
        d.figures["crossing"] == 0 and d.figures["driver_transactions"] == 0 for d in decisions
    )
    assert_same_results(oracle, got)


def test_supersteps_when_some_transactions_cross() -> None:
    workload = ledger_workload(
        WorkloadSpec(
            keys=5_000,
            theta=0.0,
            cross_key_ratio=0.05,
            insert_delete_ratio=0.01,
            batch_size=2_000,
            batches=2,
            seed=3,
        )
    )
    oracle = run_in_memory(workload.flow, workload.batches, state=workload.state)
    got, decisions = run_spark(workload.flow, workload.batches, "supersteps", workload.state)
    for decision in decisions:
        assert decision.strategy == "supersteps" and decision.figures["passes"] >= 2, decision
        assert 0 < decision.figures["crossing"] <= decision.figures["driver_transactions"]
    assert_same_results(oracle, got)


def test_the_driver_takes_small_batches_and_uncompiled_steps() -> None:
    workload = ledger_workload(WorkloadSpec(keys=100, batch_size=200, batches=2, seed=4))
    oracle = run_in_memory(workload.flow, workload.batches, state=workload.state)
    adaptive = SparkConfig(master="local[2]", partitions=2, min_transactions=1_000)
    got, decisions = run_spark(workload.flow, workload.batches, None, workload.state, adaptive)
    assert [d.strategy for d in decisions] == ["driver", "driver"]
    assert "small batch" in decisions[0].why
    local = decisions[0].local
    assert local is not None and local.strategy == "sequential"
    assert_same_results(oracle, got)

    # Big enough to consider, but a Spark pass costs more than the whole batch on the driver.
    considered = SparkConfig(master="local[2]", partitions=2, min_transactions=0)
    got, decisions = run_spark(workload.flow, workload.batches, None, workload.state, considered)
    assert [d.strategy for d in decisions] == ["driver", "driver"]
    assert decisions[0].why.startswith("Spark cannot win")
    assert_same_results(oracle, got)

    flow = broker_flow()
    made = [
        make_batch(
            flow,
            1,
            customer_updates=[cust("NEW", 1, DAY, name="Ann", tier=1)],
            account_updates=[acct("NEW", 10, DAY + HOUR, customer_id=1)],
            trade_events=[trade("NEW", 100, 2 * DAY, account=10, trade_time=2 * DAY)],
        ),
        make_batch(
            flow,
            2,
            customer_updates=[cust("UPD", 1, 3 * DAY, tier=3)],
            trade_events=[trade("NEW", 101, 4 * DAY, account=10, trade_time=4 * DAY)],
        ),
    ]
    oracle = run_in_memory(flow, made)
    got, decisions = run_spark(flow, made, "spark")
    assert decisions and all(d.strategy == "driver" for d in decisions)
    assert all("not compiled" in d.why for d in decisions)
    assert_same_results(oracle, got)


def test_a_memory_budget_sends_a_batch_to_spark() -> None:
    workload = ledger_workload(WorkloadSpec(keys=1_000, batch_size=1_500, batches=2, seed=5))
    oracle = run_in_memory(workload.flow, workload.batches, state=workload.state)
    tight = SparkConfig(master="local[2]", partitions=2, min_transactions=0, memory_budget=100_000)
    got, decisions = run_spark(workload.flow, workload.batches, None, workload.state, tight)
    assert all(d.strategy != "driver" and "memory budget" in d.why for d in decisions)
    assert_same_results(oracle, got)


def test_user_functions_travel_by_value() -> None:
    """A closure defined here (not importable by the workers) runs in the tasks."""
    offset = 7

    def shifted(amount: int | None) -> int | None:
        if amount == 13:
            raise ValueError("thirteen")
        return None if amount is None else amount + offset

    flow = Dataflow("closures")
    totals = flow.table("totals", key={"k": "int64"}, columns={"n": "int64"}, defaults={"n": 0})
    flow.source("ev", schema={"k": "int64", "a": "int64"})
    t = flow.transact("add")
    added = t.update(
        totals,
        "k",
        set={"n": old("n") + udf(shifted, col("a"), returns="int64")},
        if_missing="insert",
    )
    t.emit(n=added["n"])
    flow.sink("out")
    rows = [{"k": i % 11, "a": i % 17, "_ts": i} for i in range(400)]
    made = [make_batch(flow, 1, ev=rows)]
    oracle = run_in_memory(flow, made)
    got, decisions = run_spark(flow, made, "spark")
    assert decisions[0].strategy == "one_pass"
    assert len(got.sink.dead_letter_rows()) == len([r for r in rows if r["a"] == 13])
    assert_same_results(oracle, got)


def test_a_failing_batch_is_rolled_back_after_a_pass() -> None:
    broken = {"now": False}

    def sometimes_broken(table: pa.Table) -> pa.Table:
        return pa.table({"x": [1]}) if broken["now"] else table

    workload = ledger_workload(WorkloadSpec(keys=200, batch_size=300, batches=3, seed=6))
    flow = workload.flow
    flow.map("maybe_broken", sometimes_broken, input="ledger")
    runner = SparkExecutor(flow, workload.state, placement="spark", config=CONFIG)
    oracle = create_executor("serial", flow, workload.state)
    try:
        runner.run_batch(workload.batches[0])
        oracle.run_batch(workload.batches[0])
        before = runner.state_image()
        broken["now"] = True
        with pytest.raises(StepFailed, match="maybe_broken"):
            runner.run_batch(workload.batches[1])
        assert runner.state_image().equals(before)
        broken["now"] = False
        got, expected = runner.run_batch(workload.batches[2]), oracle.run_batch(workload.batches[2])
        assert got.deltas["accounts"].upserts.equals(expected.deltas["accounts"].upserts)
        assert got.outputs["balances"].equals(expected.outputs["balances"])
        assert runner.state_image().equals(oracle.state_image())
    finally:
        runner.close()


def test_streaming_with_prepare_ahead_equals_batch_by_batch() -> None:
    workload = ledger_workload(
        WorkloadSpec(keys=400, batch_size=600, batches=3, error_ratio=0.05, seed=7)
    )
    one = SparkExecutor(workload.flow, workload.state, placement="spark", config=CONFIG)
    other = SparkExecutor(workload.flow, workload.state, placement="spark", config=CONFIG)
    try:
        streamed = list(other.run_stream(workload.batches))
        for batch, got in zip(workload.batches, streamed, strict=True):
            expected = one.run_batch(batch)
            assert got.aborts.equals(expected.aborts)
            assert got.dead_letters.equals(expected.dead_letters)
            assert got.outputs["balances"].equals(expected.outputs["balances"])
        assert other.state_image().equals(one.state_image())
    finally:
        one.close()
        other.close()
