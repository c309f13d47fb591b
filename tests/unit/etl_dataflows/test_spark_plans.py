"""The Spark executor's routing and plans, with its passes run in this process (no Spark).

What these prove: routing finds exactly the crossing transactions and their depths (checked against
a brute-force recomputation), and every plan — one pass, supersteps with a driver tail, the driver
alone — gives the serial oracle's results, the partitions' work and results surviving a pickle round
trip as they do in Spark. The real transport is tested in tests/integration/test_spark_executor.py.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Iterable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from etl_dataflows.batch import StepDecision
from etl_dataflows.executors.spark import SparkConfig, SparkExecutor
from etl_dataflows.executors.spark.jobs import PassTiming
from etl_dataflows.executors.spark.plan import SparkCosts, choose_plan
from etl_dataflows.executors.spark.routing import DepthScratch, route
from etl_dataflows.executors.spark.task import PartitionResult, PartitionWork, run_work
from etl_dataflows.testing import (
    WorkloadSpec,
    assert_same_results,
    ledger_workload,
    make_batch,
    run_in_memory,
)
from etl_dataflows.testing.harness import RunResult, TestingSink

from .test_local_executor import calc_flow, events

CONFIG = SparkConfig(master="local[2]", partitions=2, min_transactions=0, max_supersteps=4)


class InProcessSpark(SparkExecutor):
    """The Spark executor with each pass's tasks run here, through pickle like Spark's."""

    def _start_session(self) -> None:
        pass

    def _run_pass(
        self, step: str, works: Iterable[PartitionWork]
    ) -> tuple[list[PartitionResult], PassTiming]:
        started = time.perf_counter()
        results = []
        for work in works:
            shipped = pickle.loads(pickle.dumps(work))
            result = run_work(pickle.loads(pickle.dumps(self.flow)), shipped)
            results.append(pickle.loads(pickle.dumps(result)))
        seconds = time.perf_counter() - started
        return results, PassTiming(0.0, seconds, seconds, seconds)


def run_in_process(
    flow: Any, batches: Any, placement: Any, state: Any = None, config: SparkConfig = CONFIG
) -> tuple[RunResult, list[StepDecision]]:
    runner = InProcessSpark(flow, state, placement=placement, config=config)
    sink = TestingSink()
    results = []
    for batch in batches:
        result = runner.run_batch(batch)
        sink.collect(result)
        results.append(result)
    decisions = [d for r in results for d in r.decisions]
    return RunResult("spark", results, sink, runner.state_image()), decisions


specs = st.builds(
    WorkloadSpec,
    keys=st.integers(2, 300),
    theta=st.floats(0.0, 0.99),
    cross_key_ratio=st.floats(0.0, 1.0),
    abort_ratio=st.floats(0.0, 0.5),
    cycle_ratio=st.floats(0.0, 1.0),
    same_key_ratio=st.floats(0.0, 0.3),
    insert_delete_ratio=st.floats(0.0, 0.2),
    read_ratio=st.floats(0.0, 0.1),
    error_ratio=st.floats(0.0, 0.1),
    disorder=st.floats(0.0, 1.0),
    ties=st.floats(0.0, 0.5),
    batch_size=st.integers(1, 300),
    batches=st.integers(1, 3),
    seed=st.integers(0, 2**31),
)


@pytest.mark.parametrize("placement", ["spark", "supersteps"])
@settings(max_examples=30)
@given(specs)
def test_every_plan_matches_the_serial_oracle(placement: str, spec: WorkloadSpec) -> None:
    workload = ledger_workload(spec)
    oracle = run_in_memory(workload.flow, workload.batches, state=workload.state)
    got, decisions = run_in_process(workload.flow, workload.batches, placement, workload.state)
    assert all(d.strategy in ("one_pass", "supersteps") for d in decisions)
    assert_same_results(oracle, got)


@settings(max_examples=30)
@given(st.lists(events, min_size=1, max_size=3))
def test_compiled_expressions_through_partitions(batches: list[list[dict[str, Any]]]) -> None:
    """String keys, surrogate keys, inserts and deletes, reads of other keys, user functions
    that raise and integer overflow, split over two partitions."""
    flow = calc_flow()
    made = [make_batch(flow, i + 1, ev=rows) for i, rows in enumerate(batches)]
    oracle = run_in_memory(flow, made)
    for placement in ("spark", "supersteps"):
        got, _ = run_in_process(flow, made, placement)
        assert_same_results(oracle, got)


def _brute_force_depths(order: np.ndarray, touched: list[set[Any]], cross: np.ndarray) -> list[int]:
    depth = [0] * len(touched)
    for position, i in enumerate(order):
        before = [
            depth[j] for j in order[:position] if touched[j] & touched[i]
        ]  # every earlier transaction sharing a resource
        depth[i] = max(before, default=0) + int(cross[i])
    return depth


def test_routing_finds_crossing_transactions_and_their_depths() -> None:
    workload = ledger_workload(
        WorkloadSpec(keys=12, cross_key_ratio=0.6, insert_delete_ratio=0.1, batch_size=150, seed=3)
    )
    runner = SparkExecutor(workload.flow, workload.state, config=CONFIG)
    step = runner.flow.transactional_steps()[0]
    compiled = runner.compiled_step(step)
    events = workload.batches[0].inputs["txns"]
    prepared = runner.prepare_batch(workload.batches[0])
    events = prepared.produced[step.input or ""]
    hoisted = compiled.hoist_values(events, range(len(compiled.kernel.hoisted)))
    ts = np.asarray(events.column("_ts").to_numpy())
    routing = route(compiled, runner.arrays, hoisted, ts, 2, DepthScratch())
    n = events.num_rows
    touched: list[set[Any]] = [set() for _ in range(n)]
    for group in routing.groups:
        for i in range(n):
            if group.slots[i] >= 0:
                touched[i].add((group.table, int(group.slots[i])))
    kinds = events.column("kind").to_pylist()
    for i in range(n):
        if kinds[i] == "open":  # may draw a surrogate key: the sequence lives in partition 0
            touched[i].add(("sequence", 0))
    partitions = [{0 if r[0] == "sequence" else r[1] % 2 for r in t} for t in touched]
    assert [len(p) > 1 for p in partitions] == routing.cross.tolist()
    for i in range(n):
        if not routing.cross[i] and partitions[i]:
            assert partitions[i] == {int(routing.home[i])}
    assert routing.depth.tolist() == _brute_force_depths(routing.order, touched, routing.cross)
    assert routing.cross.any() and routing.max_depth >= 1


def _routing_of(spec: WorkloadSpec) -> Any:
    workload = ledger_workload(spec)
    runner = SparkExecutor(workload.flow, workload.state, config=CONFIG)
    step = runner.flow.transactional_steps()[0]
    compiled = runner.compiled_step(step)
    events = runner.prepare_batch(workload.batches[0]).produced[step.input or ""]
    hoisted = runner.routing_hoists(compiled, events)
    ts = np.asarray(events.column("_ts").to_numpy())
    return route(compiled, runner.arrays, hoisted, ts, 2, DepthScratch())


def test_plans_follow_costs_and_the_memory_budget() -> None:
    routing = _routing_of(WorkloadSpec(keys=2_000, cross_key_ratio=0.3, batch_size=3_000, seed=5))
    costs = SparkCosts()
    small = choose_plan(
        routing,
        costs,
        max_supersteps=8,
        bytes_per_txn=200,
        memory_budget=None,
        placement=None,
    )
    assert small.strategy == "driver"  # a pass costs more than the whole batch on the driver
    budget = choose_plan(
        routing,
        costs,
        max_supersteps=8,
        bytes_per_txn=200,
        memory_budget=200 * 2_000,  # the driver may hold 2,000 of the 3,000 transactions
        placement=None,
    )
    assert budget.passes >= 1 and budget.driver_bytes <= 200 * 2_000
    assert "memory budget" in budget.why
    cheap_tasks = SparkCosts(
        pass_seconds=0.0, ship_ns=1.0, measured_task_ns=1.0, driver_ns=10_000.0
    )
    parallel = choose_plan(
        routing,
        cheap_tasks,
        max_supersteps=8,
        bytes_per_txn=200,
        memory_budget=None,
        placement=None,
    )
    assert parallel.passes == min(routing.max_depth + 1, 8)


def test_a_batch_without_crossing_transactions_runs_in_one_pass() -> None:
    workload = ledger_workload(
        WorkloadSpec(
            keys=500,
            cross_key_ratio=0.0,
            insert_delete_ratio=0.0,
            read_ratio=0.0,
            abort_ratio=0.0,
            same_key_ratio=0.3,
            batch_size=400,
            batches=2,
            seed=8,
        )
    )
    oracle = run_in_memory(workload.flow, workload.batches, state=workload.state)
    got, decisions = run_in_process(workload.flow, workload.batches, "spark", workload.state)
    assert [d.strategy for d in decisions] == ["one_pass", "one_pass"]
    assert all(d.figures["crossing"] == 0 and d.figures["passes"] == 1 for d in decisions)
    assert_same_results(oracle, got)


def test_routing_is_skipped_when_the_driver_wins_anyway() -> None:
    from etl_dataflows.executors.spark.plan import worth_routing

    driver_is_cheap = SparkCosts(driver_ns=100.0, ship_ns=600.0, measured_task_ns=300.0)
    assert not worth_routing(10_000_000, driver_is_cheap, 2, 300, None)
    # ...unless the batch exceeds the driver's memory budget
    assert worth_routing(10_000_000, driver_is_cheap, 2, 300, 1 << 30)
    costly_functions = SparkCosts(driver_ns=20_000.0, ship_ns=600.0)  # tasks: 1.5 x driver
    assert worth_routing(1_000_000, costly_functions, 2, 300, None)
    assert not worth_routing(10, costly_functions, 2, 300, None)  # the pass's fixed cost
