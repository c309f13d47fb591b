"""The serial executor's semantics, case by case (the contract every executor reproduces)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from etl_dataflows import Dataflow, StateImage, col, create_executor, if_else, lit, old, udf
from etl_dataflows.exceptions import StepFailed
from etl_dataflows.state import rows_to_table
from etl_dataflows.testing import make_batch, run_in_memory


def kv_flow(**extra: Any) -> Dataflow:
    flow = Dataflow("kv")
    flow.table(
        "kv",
        key={"k": "int64"},
        columns={"v": "int64", "w": "int64"},
        surrogate="sk",
        defaults={"v": 0, "w": 0},
    )
    flow.source("ops", schema={"op": "string", "k": "int64", "k2": "int64", "n": "int64"})
    return flow


def state(flow: Dataflow, rows: list[dict[str, Any]]) -> StateImage:
    compiled = flow.build()
    table = compiled.tables["kv"]
    return StateImage(
        {"kv": rows_to_table(table, rows)}, {"kv": max([r["sk"] for r in rows], default=0) + 1}
    )


def final(run: Any) -> dict[int, tuple[int, int, int]]:
    return {r["k"]: (r["sk"], r["v"], r["w"]) for r in run.final_state.tables["kv"].to_pylist()}


def test_transactions_run_in_event_time_order_with_ties_in_input_order() -> None:
    flow = kv_flow()
    t = flow.transact("apply")
    t.update("kv", "k", set={"v": old("v") * 10 + col("n")}, if_missing="insert")
    flow.sink("out")
    rows = [
        {"op": "x", "k": 1, "n": 3, "_ts": 30},
        {"op": "x", "k": 1, "n": 1, "_ts": 10},
        {"op": "x", "k": 1, "n": 2, "_ts": 20},
        {"op": "x", "k": 1, "n": 4, "_ts": 20},
    ]
    run = run_in_memory(flow, [make_batch(flow, 1, ops=rows)])
    assert final(run)[1][1] == 1243


def test_an_aborted_transaction_leaves_no_trace() -> None:
    flow = kv_flow()
    t = flow.transact("apply")
    t.insert("kv", "k", {"v": col("n")})
    t.update(
        "kv", "k2", set={"v": old("v") - col("n")}, require=(old("v") >= col("n"), "too little")
    )
    t.emit(new_sk=t.read("kv", "k")["sk"])
    flow.sink("out")
    start = state(flow, [{"k": 5, "sk": 1, "v": 10, "w": 0}])
    rows = [
        {"op": "x", "k": 1, "k2": 5, "n": 50, "_ts": 1},  # aborts: 5 has only 10
        {"op": "x", "k": 2, "k2": 5, "n": 4, "_ts": 2},  # commits: takes sk 2, not 3
    ]
    run = run_in_memory(flow, [make_batch(flow, 1, ops=rows)], state=start)
    assert final(run) == {5: (1, 6, 0), 2: (2, 4, 0)}
    assert run.sink.rows("out")[0]["new_sk"] == 2
    aborts = run.sink.abort_rows()
    assert [(a["pos"], a["kind"], a["reason"]) for a in aborts] == [
        (0, "condition", "op1 update kv: too little")
    ]
    assert run.final_state.sequences["kv"] == 3
    assert run.sink.dead_letter_rows() == []


def test_a_user_function_error_aborts_only_its_transaction() -> None:
    def risky(n: int) -> int:
        if n < 0:
            raise ValueError(f"negative {n}")
        return n

    flow = kv_flow()
    t = flow.transact("apply")
    t.update(
        "kv", "k", set={"v": old("v") + udf(risky, col("n"), returns="int64")}, if_missing="insert"
    )
    flow.sink("out")
    rows = [
        {"op": "x", "k": 1, "n": 2, "_ts": 1},
        {"op": "x", "k": 1, "n": -1, "_ts": 2},
        {"op": "x", "k": 1, "n": 3, "_ts": 3},
    ]
    run = run_in_memory(flow, [make_batch(flow, 1, ops=rows)])
    assert final(run)[1][1] == 5
    assert [(a["pos"], a["kind"]) for a in run.sink.abort_rows()] == [(1, "error")]
    dead = run.sink.dead_letter_rows()
    assert [(d["step"], d["pos"], d["reason"]) for d in dead] == [
        ("apply", 1, "risky raised ValueError: negative -1")
    ]


def test_null_keys_and_wrong_value_types_are_errors() -> None:
    flow = kv_flow()
    t = flow.transact("apply")
    t.update("kv", "k", set={"v": udf(lambda n: n / 2, col("n"))}, if_missing="insert")
    flow.sink("out")
    rows = [{"op": "x", "k": None, "n": 2, "_ts": 1}, {"op": "x", "k": 1, "n": 3, "_ts": 2}]
    run = run_in_memory(flow, [make_batch(flow, 1, ops=rows)])
    reasons = [a["reason"] for a in run.sink.abort_rows()]
    assert reasons[0] == "op0 update kv: null key ['k']"
    assert "expected int64, got float 1.5" in reasons[1]
    assert len(run.sink.dead_letter_rows()) == 2
    assert final(run) == {}


def test_operations_see_earlier_operations_of_their_transaction() -> None:
    flow = kv_flow()
    t = flow.transact("apply")
    first = t.update("kv", "k", set={"v": old("v") + 1}, if_missing="insert")
    second = t.update("kv", "k", set={"v": old("v") * 10})
    t.emit(
        before_first=first.before("v"),
        after_first=first["v"],
        before_second=second.before("v"),
        found=first.found,
    )
    flow.sink("out")
    run = run_in_memory(flow, [make_batch(flow, 1, ops=[{"op": "x", "k": 1, "_ts": 1}])])
    assert final(run)[1][1] == 10
    out = run.sink.rows("out")[0]
    assert (out["before_first"], out["after_first"], out["before_second"], out["found"]) == (
        None,
        1,
        1,
        False,
    )


def test_set_expressions_all_see_the_row_before_the_operation() -> None:
    flow = kv_flow()
    t = flow.transact("swap")
    t.update("kv", "k", set={"v": old("w"), "w": old("v")})
    flow.sink("out")
    start = state(flow, [{"k": 1, "sk": 1, "v": 3, "w": 4}])
    run = run_in_memory(
        flow, [make_batch(flow, 1, ops=[{"op": "x", "k": 1, "_ts": 1}])], state=start
    )
    assert final(run)[1] == (1, 4, 3)


def test_missing_and_existing_row_policies() -> None:
    flow = kv_flow()
    t = flow.transact("apply")
    kind = col("op")
    t.update("kv", "k", set={"v": lit(1)}, if_missing="skip", when=kind == "update-skip")
    t.update("kv", "k", set={"v": lit(2)}, when=kind == "update-abort")
    t.update("kv", "k", set={"v": old("v") + 3}, if_missing="insert", when=kind == "upsert")
    t.insert("kv", "k", {"v": lit(4)}, if_exists="skip", when=kind == "insert-skip")
    t.insert("kv", "k", {"w": lit(5)}, if_exists="update", when=kind == "insert-update")
    t.delete("kv", "k", if_missing="skip", when=kind == "delete-skip")
    t.delete("kv", "k", when=kind == "delete-abort")
    t.write("kv", "k", {"w": lit(6)}, when=kind == "write")
    flow.sink("out")
    start = state(flow, [{"k": 1, "sk": 1, "v": 9, "w": 9}])
    rows = [
        {"op": "update-skip", "k": 2, "_ts": 1},  # nothing
        {"op": "update-abort", "k": 2, "_ts": 2},  # aborts
        {"op": "upsert", "k": 2, "_ts": 3},  # creates 2 from defaults: v=3, sk 2
        {"op": "insert-skip", "k": 1, "_ts": 4},  # nothing
        {"op": "insert-update", "k": 1, "_ts": 5},  # w=5, v kept
        {"op": "delete-skip", "k": 3, "_ts": 6},  # nothing
        {"op": "delete-abort", "k": 3, "_ts": 7},  # aborts
        {"op": "write", "k": 2, "_ts": 8},  # whole row: v back to its default, sk kept
    ]
    run = run_in_memory(flow, [make_batch(flow, 1, ops=rows)], state=start)
    assert final(run) == {1: (1, 9, 5), 2: (2, 0, 6)}
    assert [a["pos"] for a in run.sink.abort_rows()] == [1, 6]


def test_emit_when_and_include_input() -> None:
    flow = kv_flow()
    t = flow.transact("apply")
    r = t.update("kv", "k", set={"v": old("v") + col("n")}, if_missing="insert")
    t.emit(when=r["v"] > 5, include_input=True, total=r["v"])
    flow.sink("out")
    rows = [{"op": "a", "k": 1, "n": 4, "_ts": 1}, {"op": "b", "k": 1, "n": 4, "_ts": 2}]
    out = run_in_memory(flow, [make_batch(flow, 1, ops=rows)]).sink.rows("out")
    assert out == [
        {"op": "b", "k": 1, "k2": None, "n": 4, "total": 8, "_ts": 2, "_pos": 1, "_src": 0}
    ]


def test_deltas_hold_net_changes_only() -> None:
    flow = kv_flow()
    t = flow.transact("apply")
    kind = col("op")
    t.update(
        "kv", "k", set={"v": if_else(kind == "same", old("v"), old("v") + 1)}, when=kind != "del"
    )
    t.insert("kv", "k2", {"v": lit(0)}, when=kind == "ins")
    t.delete("kv", "k2", when=kind == "del")
    flow.sink("out")
    start = state(flow, [{"k": 1, "sk": 1, "v": 1, "w": 0}, {"k": 2, "sk": 2, "v": 2, "w": 0}])
    rows = [
        {"op": "same", "k": 1, "_ts": 1},  # writes the same value: no change
        {"op": "inc", "k": 2, "_ts": 2},
        {"op": "ins", "k": 2, "k2": 7, "_ts": 3},  # k=2 again, and a new row 7
        {"op": "del", "k": 2, "k2": 7, "_ts": 4},  # the new row goes again
    ]
    result = run_in_memory(flow, [make_batch(flow, 1, ops=rows)], state=start).results[0]
    delta = result.deltas["kv"]
    assert delta.upserts.to_pylist() == [{"k": 2, "sk": 2, "v": 4, "w": 0}]
    assert delta.deletes.num_rows == 0


def test_state_images_round_trip_across_a_restart() -> None:
    flow = kv_flow()
    t = flow.transact("apply")
    t.update("kv", "k", set={"v": old("v") + col("n")}, if_missing="insert")
    flow.sink("out")
    batches = [
        make_batch(flow, i, ops=[{"op": "x", "k": i % 3, "n": i, "_ts": i}]) for i in range(1, 7)
    ]
    straight = run_in_memory(flow, batches)
    first = run_in_memory(flow, batches[:3])
    resumed = run_in_memory(flow, batches[3:], state=first.final_state)
    assert resumed.final_state.equals(straight.final_state)
    assert [r.deltas["kv"].upserts for r in resumed.results] == [
        r.deltas["kv"].upserts for r in straight.results[3:]
    ]


def test_a_failing_batch_is_rolled_back_entirely() -> None:
    flow = kv_flow()
    t = flow.transact("apply")
    r = t.update("kv", "k", set={"v": old("v") + col("n")}, if_missing="insert")
    t.emit(v=r["v"])
    flow.map("broken", lambda table: pa.table({"x": [1]}))
    flow.sink("out")
    executor = create_executor("serial", flow)
    before = executor.state_image()
    with pytest.raises(StepFailed, match="broken"):
        executor.run_batch(make_batch(flow, 1, ops=[{"op": "x", "k": 1, "n": 5, "_ts": 1}]))
    after = executor.state_image()
    assert after.equals(before)
