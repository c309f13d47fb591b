"""User functions that misbehave, in every place a transaction evaluates one, on every executor.

A ``udf(fn, ..., returns=T)`` promises values of type ``T``; the serial oracle checks every call:
a value of another type or out of range, or an exception, aborts that transaction as an error
(``when`` included: an erroring ``when`` is not a false one). Every executor must do the same row
by row, whatever the other rows of the batch return (issue 23: the bulk path truncated 1.5 to 1
unless a neighbour raised, and ``tstream`` committed a transaction whose ``when`` raised).

The functions here read a *mode* per row from the event, so hypothesis mixes good and bad results
in one batch: each mode returns one kind of value (see :data:`ODD`), right for some declared types
and wrong for others, or raises. Each of ``set``, ``when``, keys, ``require`` and ``emit`` has its
own mode column.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from etl_dataflows import Dataflow, col, create_executor, old, udf
from etl_dataflows.executors import LocalExecutor
from etl_dataflows.testing import assert_same_results, make_batch, run_in_memory
from etl_dataflows.testing.harness import RunResult

from .test_spark_plans import run_in_process

INT64_MAX = 2**63 - 1


def _raise(a: Any) -> Any:
    raise ValueError(f"misbehaving on {a!r}")


#: What a function returns in each mode after 0 (0 is the right value of its declared type).
ODD: list[Any] = [
    None,
    lambda a: 1.5,  # a float: wrong for int64, bool, string
    lambda a: 2.0,  # an integral float: still not an int64
    lambda a: True,  # a bool: not an int64, not a float64
    lambda a: 2,  # an int: a float64 takes it (widened), a bool does not
    lambda a: 2**63,  # an int beyond int64
    lambda a: INT64_MAX,  # int64's largest: arithmetic on it overflows
    lambda a: 10**400,  # beyond float64 too
    lambda a: "7",  # a string
    lambda a: None,  # null
    lambda a: np.int64(2),  # a numpy integer is not an int
    lambda a: np.float64(0.25),  # a numpy float is a float
    _raise,
]
MODES = st.one_of(st.just(0), st.integers(0, len(ODD) - 1), st.none())

GOOD: dict[str, Any] = {
    "int64": lambda a: a * 3,
    "float64": lambda a: a / 4,
    "bool": lambda a: a % 2 == 0,
    "string": lambda a: f"s{a}",
}


def _result(kind: str, mode: int | None, a: int | None) -> Any:
    if not mode:
        return None if a is None else GOOD[kind](a)
    return ODD[mode](a)


# Module-level functions: the Spark path pickles the dataflow (by reference, as here).
def as_int(mode: int | None, a: int | None) -> Any:
    return _result("int64", mode, a)


def as_float(mode: int | None, a: int | None) -> Any:
    return _result("float64", mode, a)


def as_bool(mode: int | None, a: int | None) -> Any:
    return _result("bool", mode, a)


def as_str(mode: int | None, a: int | None) -> Any:
    return _result("string", mode, a)


def typed_udfs_flow() -> Dataflow:
    """One compiled step with a declared-type function in a value (alone and in arithmetic), a
    ``when`` (alone, and in arithmetic that may overflow), a key, a ``require`` (alone and beside
    state) and the output (alone, in arithmetic with an operation's result, and in the output's
    ``when``)."""
    flow = Dataflow("typed_udfs")
    acc = flow.table(
        "acc",
        key={"id": "int64"},
        columns={"v": "int64", "f": "float64", "b": "bool"},
        defaults={"v": 0},
    )
    flow.source(
        "ev",
        schema={
            "id": "int64",
            "a": "int64",
            **{m: "int64" for m in ("m_set", "m_when", "m_key", "m_req", "m_emit")},
        },
    )

    def fn(f: Any, mode: str, returns: Any, arg: str = "a") -> Any:
        return udf(f, col(mode), col(arg), returns=returns)

    t = flow.transact("apply")
    first = t.update(
        acc,
        "id",
        set={
            "v": old("v") + fn(as_int, "m_set", "int64"),
            "f": fn(as_float, "m_set", "float64"),
            "b": fn(as_bool, "m_set", "bool"),
        },
        if_missing="insert",
    )
    t.update(
        acc,
        col("id") + 1,
        set={"v": old("v") + 1},
        if_missing="insert",
        when=fn(as_bool, "m_when", "bool"),
    )
    t.update(  # int64's largest times a: an overflow in the when
        acc,
        col("id") + 2,
        set={"v": old("v") + 2},
        if_missing="insert",
        when=col("a") * fn(as_int, "m_when", "int64") > 0,
    )
    t.update(acc, fn(as_int, "m_key", "int64"), set={"v": old("v") - 1}, if_missing="insert")
    t.update(
        acc,
        "id",
        set={"f": old("f") + 1.0},
        require=[
            (fn(as_bool, "m_req", "bool", "id"), "the function says no"),
            (old("v") < fn(as_int, "m_req", "int64") + 100, "too rich"),
        ],
    )
    t.emit(
        n=fn(as_int, "m_emit", "int64"),
        g=fn(as_float, "m_emit", "float64"),
        s=fn(as_str, "m_emit", "string"),
        total=first["v"] + fn(as_int, "m_emit", "int64", "id"),
        when=fn(as_bool, "m_emit", "bool", "id") | col("a").is_null(),
    )
    flow.sink("out")
    return flow


events = st.lists(
    st.fixed_dictionaries(
        {
            "id": st.integers(0, 5),
            "a": st.one_of(st.integers(-3, 3), st.none()),
            "m_set": MODES,
            "m_when": MODES,
            "m_key": MODES,
            "m_req": MODES,
            "m_emit": MODES,
            "_ts": st.integers(0, 30),
        }
    ),
    min_size=1,
    max_size=30,
)

#: Every executor, the local one also with each strategy that runs the kernel another way, and
#: Spark on the driver and through its tasks (run in this process, through pickle).
EXECUTORS = [
    "local",
    "local:waves",
    "local:chains",
    "local:chain_scan",
    "lock",
    "pat",
    "tstream",
    "spark",
    "spark:spark",
    "spark:supersteps",
]


def run(executor: str, flow: Dataflow, batches: list[Any]) -> RunResult:
    if executor in ("spark:spark", "spark:supersteps"):
        got, decisions = run_in_process(flow, batches, executor.split(":")[1])
        assert all(d.strategy in ("one_pass", "supersteps") for d in decisions)
        return got
    return run_in_memory(flow, batches, executor=executor)


def test_the_step_is_compiled() -> None:
    """Otherwise the comparisons below would run the oracle's own code."""
    local = create_executor("local", typed_udfs_flow())
    spark = create_executor("spark", typed_udfs_flow())
    assert isinstance(local, LocalExecutor) and isinstance(spark, LocalExecutor)
    assert local.explain()["apply"].compiled and not local.explain()["apply"].extended
    assert spark.explain()["apply"].compiled


@pytest.mark.parametrize("executor", EXECUTORS)
@settings(max_examples=25)
@given(st.lists(events, min_size=1, max_size=2))
def test_misbehaving_functions_match_the_oracle(
    executor: str, batches: list[list[dict[str, Any]]]
) -> None:
    flow = typed_udfs_flow()
    made = [make_batch(flow, i + 1, ev=rows) for i, rows in enumerate(batches)]
    oracle = run_in_memory(flow, made)
    assert_same_results(oracle, run(executor, flow, made))


@pytest.mark.parametrize("executor", EXECUTORS)
def test_one_wrong_value_among_good_ones_aborts_only_its_transaction(executor: str) -> None:
    """The issue's case: a float from an int64 function in one row of a clean batch, and a 2 from
    a bool ``when`` in another; and a ``when`` that raises (tstream committed the rest)."""
    flow = typed_udfs_flow()
    rows = [
        {"id": i % 2 * 2, "a": 1, "m_set": 0, "m_when": 0, "m_key": 0, "m_req": 0, "m_emit": 0}
        for i in range(40)
    ]
    rows[7]["m_set"] = 1  # 1.5 for int64
    rows[11]["m_when"] = 4  # 2 for bool
    rows[23]["m_when"] = len(ODD) - 1  # raises
    made = [make_batch(flow, 1, ev=[{**r, "_ts": i} for i, r in enumerate(rows)])]
    oracle = run_in_memory(flow, made)
    reasons = {a["pos"]: a["reason"] for a in oracle.sink.abort_rows()}
    assert reasons == {
        7: "as_int returned 1.5: expected int64, got float 1.5",
        11: "as_bool returned 2: expected bool, got int 2",
        23: "as_bool raised ValueError: misbehaving on 1",
    }
    assert_same_results(oracle, run(executor, flow, made))


def halves(a: int | None) -> Any:
    """No declared type: an int for even ``a``, a float for odd, a raise for 3."""
    if a == 3:
        raise ValueError("three")
    return None if a is None else (a // 2 if a % 2 == 0 else a / 2)


def test_an_undeclared_function_keeps_its_step_interpreted() -> None:
    """Without ``returns=`` each row's value keeps its own type (a float stored in an int64
    column fails that row only): no kernel holds that, so the step runs the oracle's code."""
    flow = Dataflow("untyped")
    acc = flow.table("acc", key={"id": "int64"}, columns={"v": "int64", "f": "float64"})
    flow.source("ev", schema={"id": "int64", "a": "int64"})
    flow.transact("apply").update(
        acc,
        "id",
        set={"v": udf(halves, col("a")), "f": udf(halves, col("a"))},
        if_missing="insert",
    )
    local = create_executor("local", flow)
    assert isinstance(local, LocalExecutor)
    assert "halves() has no declared type" in " ".join(local.explain()["apply"].reasons)
    rows = [{"id": i % 3, "a": i % 5, "_ts": i} for i in range(20)]
    made = [make_batch(flow, 1, ev=rows)]
    oracle = run_in_memory(flow, made)
    assert {a["reason"] for a in oracle.sink.abort_rows()} == {
        "op0 update acc column 'v': expected int64, got float 0.5",
        "halves raised ValueError: three",
    }
    for executor in ("local", "tstream", "spark"):
        assert_same_results(oracle, run_in_memory(flow, made, executor=executor))
