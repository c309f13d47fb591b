"""The testing API: the harness that compares executors must catch an executor that is wrong;
executor names (``local:<strategy>``, ``spark:<placement>``) work wherever a name is accepted and a
wrong one fails naming the valid ones; ``make_batch`` rejects what does not fit, naming the source,
the row and the column, with ingest's reasons."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

import pyarrow as pa
import pytest

from etl_dataflows import Dataflow, col, old
from etl_dataflows.exceptions import BatchInputError, UnknownExecutor
from etl_dataflows.executors import (
    EXECUTORS,
    LocalExecutor,
    SerialExecutor,
    SparkExecutor,
    create_executor,
    executor_names,
    register_executor,
    unregister_executor,
)
from etl_dataflows.executors.base import TransactionOutcome
from etl_dataflows.raw_values import convert_columns, python_columns
from etl_dataflows.scheduling.decision import FIXED_STRATEGIES
from etl_dataflows.stateless import DeadLetters
from etl_dataflows.testing import (
    WorkloadSpec,
    assert_same_results,
    ledger_workload,
    make_batch,
    run_in_memory,
)
from etl_dataflows.transaction import TransactionStep


class ArrivalOrderExecutor(SerialExecutor):
    """Deliberately wrong: runs transactions in arrival order, ignoring event time."""

    name: ClassVar[str] = "test-arrival-order"

    def run_transactions(
        self, step: TransactionStep, events: pa.Table, dead: DeadLetters, early: object = None
    ) -> TransactionOutcome:
        ts = pa.array(range(events.num_rows), type=pa.int64())
        return super().run_transactions(
            step, events.set_column(events.schema.get_field_index("_ts"), "_ts", ts), dead
        )


class ForgetfulExecutor(SerialExecutor):
    """Deliberately wrong: loses the sequence values across batches."""

    name: ClassVar[str] = "test-forgetful"

    def end_batch(self):  # type: ignore[no-untyped-def]
        deltas, sequences = super().end_batch()
        return deltas, {name: 1 for name in sequences}


@pytest.fixture
def wrong_executors() -> Iterator[None]:
    register_executor(ArrivalOrderExecutor)
    register_executor(ForgetfulExecutor)
    try:
        yield
    finally:
        unregister_executor(ArrivalOrderExecutor.name)
        unregister_executor(ForgetfulExecutor.name)


@pytest.mark.usefixtures("wrong_executors")
@pytest.mark.parametrize("broken", ["test-arrival-order", "test-forgetful"])
def test_a_wrong_executor_is_detected(broken: str) -> None:
    workload = ledger_workload(
        WorkloadSpec(
            keys=20, batch_size=300, batches=2, disorder=0.5, insert_delete_ratio=0.2, seed=3
        )
    )
    oracle = run_in_memory(workload.flow, workload.batches, state=workload.state)
    wrong = run_in_memory(workload.flow, workload.batches, executor=broken, state=workload.state)
    with pytest.raises(AssertionError, match=f"{broken} vs serial"):
        assert_same_results(oracle, wrong)


def test_unknown_executor() -> None:
    workload = ledger_workload(WorkloadSpec(batch_size=1, batches=1))
    with pytest.raises(UnknownExecutor, match="no executor named 'warp'; available: serial"):
        create_executor("warp", workload.flow)


@pytest.mark.parametrize(
    "name", ["local:bogus", "local:interpreted", "lock:waves", "spark:auto", "serial:", ":waves"]
)
def test_an_unknown_strategy_or_executor_names_the_valid_ones(name: str) -> None:
    workload = ledger_workload(WorkloadSpec(batch_size=1, batches=1))
    with pytest.raises(UnknownExecutor) as caught:
        create_executor(name, workload.flow)
    message = str(caught.value)
    assert f"no executor named {name!r}" in message
    assert all(executor in message for executor in EXECUTORS)
    assert "local:<strategy> with a strategy of " + ", ".join(FIXED_STRATEGIES) in message
    assert "spark:<placement> with a placement of driver, spark, supersteps" in message


def test_executors_refuse_an_unknown_strategy_or_placement_when_built() -> None:
    flow = ledger_workload(WorkloadSpec(batch_size=1, batches=1)).flow
    with pytest.raises(UnknownExecutor, match="no strategy 'bogus'; strategies: sequential"):
        LocalExecutor(flow, strategy="bogus")  # type: ignore[arg-type]
    with pytest.raises(UnknownExecutor, match="no placement 'auto'; placements: driver"):
        SparkExecutor(flow, placement="auto")  # type: ignore[arg-type]


def test_every_name_builds_its_executor() -> None:
    flow = ledger_workload(WorkloadSpec(batch_size=1, batches=1)).flow
    for name in executor_names():
        runner = create_executor(name, flow)
        try:
            base, _, variant = name.partition(":")
            assert runner.name == base
            if base == "local":
                assert isinstance(runner, LocalExecutor)
                assert runner.fixed_strategy == (variant or None)
            if base == "spark":
                assert isinstance(runner, SparkExecutor)
                assert runner.placement == (variant or runner.placement)
        finally:
            runner.close()


@pytest.mark.parametrize("strategy", FIXED_STRATEGIES)
def test_run_in_memory_takes_a_fixed_local_strategy(strategy: str) -> None:
    workload = ledger_workload(WorkloadSpec(keys=30, batch_size=200, batches=2, seed=4))
    oracle = run_in_memory(workload.flow, workload.batches, state=workload.state)
    fixed = run_in_memory(
        workload.flow, workload.batches, executor=f"local:{strategy}", state=workload.state
    )
    assert {d.strategy for r in fixed.results for d in r.decisions} == {strategy}
    assert_same_results(oracle, fixed)


def amounts_flow() -> Dataflow:
    flow = Dataflow("amounts")
    totals = flow.table("totals", key={"k": "int64"}, columns={"n": "int64"}, defaults={"n": 0})
    flow.source(
        "ev",
        schema={"k": "int64", "amount": "int64", "x": "float64", "day": "date", "s": "string"},
    )
    flow.transact("add").update(totals, "k", set={"n": old("n") + col("amount")})
    return flow


def ingest_reason(column: str, kind: Any, value: Any) -> str:
    """What ingest says of ``value`` in a ``kind`` column (the code ingest runs)."""
    raw, nested = python_columns([column], [{column: value}])
    _, bad = convert_columns(raw, {column: kind})
    return {**nested, **bad}[0]


@pytest.mark.parametrize(
    ("column", "kind", "value"),
    [
        ("amount", "int64", 5.5),
        ("amount", "int64", 2**63),
        ("amount", "int64", "ten"),
        ("x", "float64", "many"),
        ("day", "date", "2024-13-01"),
        ("s", "string", 7),
        ("amount", "int64", [1, 2]),
    ],
)
def test_make_batch_rejects_a_value_as_ingest_does(column: str, kind: str, value: Any) -> None:
    good = {"k": 1, "amount": 2, "_ts": 1}
    with pytest.raises(BatchInputError) as caught:
        make_batch(amounts_flow(), 1, ev=[good, good, {**good, column: value, "_ts": 3}])
    reason = ingest_reason(column, kind, value)
    assert f"column {column!r}" in reason
    assert str(caught.value) == f"make_batch: source 'ev' row 2: {reason}"


def test_make_batch_takes_engine_values() -> None:
    rows = [
        {"k": 1, "amount": -(2**63), "x": 1, "day": 19_000, "s": "a", "_ts": 5},
        {"k": None, "amount": 2**63 - 1, "x": 2.5, "_ts": 6, "_pos": 40},
    ]
    events = make_batch(amounts_flow(), 1, ev=rows).inputs["ev"]
    assert events.column("amount").to_pylist() == [-(2**63), 2**63 - 1]
    assert events.column("x").to_pylist() == [1.0, 2.5]
    assert events.column("day").cast(pa.int32()).to_pylist() == [19_000, None]
    assert events.column("_pos").to_pylist() == [0, 40]
    assert events.schema.field("day").type == pa.date32()


@pytest.mark.parametrize(
    ("sources", "message"),
    [
        ({"evs": [{"k": 1, "_ts": 1}]}, "no source 'evs' in dataflow 'amounts'; its sources: ev"),
        ({"ev": [{"k": 1, "_ts": 1}, {"k": 2}]}, "source 'ev' row 1: column '_ts' (the event"),
        ({"ev": [{"k": 1, "_ts": 1.5}]}, "source 'ev' row 0: column '_ts' must be a 64-bit"),
        ({"ev": [{"k": 1, "_ts": 2**63}]}, "source 'ev' row 0: column '_ts' must be a 64-bit"),
        ({"ev": [{"k": 1, "_ts": 1, "_pos": True}]}, "row 0: column '_pos' must be a 64-bit"),
        ({"ev": [{"k": 1, "_ts": 1}, {"k": 1, "amout": 3, "_ts": 2}]}, "row 1: no column 'amout'"),
    ],
)
def test_make_batch_names_the_source_the_row_and_the_column(
    sources: dict[str, Any], message: str
) -> None:
    with pytest.raises(BatchInputError) as caught:
        make_batch(amounts_flow(), 1, **sources)
    assert message in str(caught.value)
