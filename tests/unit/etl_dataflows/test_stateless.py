"""Stateless steps: map, filter, flat_map, validate, merge, and the checks on incoming events."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from etl_dataflows import Dataflow, EngineBatch, col, create_executor, udf
from etl_dataflows.exceptions import BatchInputError, StepFailed
from etl_dataflows.testing import make_batch, run_in_memory

ROWS = [
    {"id": 1, "amount": 10, "note": "a", "_ts": 30},
    {"id": 2, "amount": -5, "note": None, "_ts": 10},
    {"id": 3, "amount": 0, "note": "c", "_ts": 20},
]


def flow_with(build: Any) -> Dataflow:
    flow = Dataflow("s")
    flow.source("events", schema={"id": "int64", "amount": "int64", "note": "string"})
    build(flow)
    flow.sink("out")
    return flow


def run(flow: Dataflow, rows: list[dict[str, Any]] = ROWS) -> Any:
    return run_in_memory(flow, [make_batch(flow, 1, events=rows)])


def test_map_over_tables_keeps_meta_columns() -> None:
    def double(table: pa.Table) -> pa.Table:
        return table.set_column(1, "amount", pc.multiply(table.column("amount"), 2))

    result = run(flow_with(lambda f: f.map("double", double)))
    rows = result.sink.rows("out")
    assert [r["amount"] for r in rows] == [20, -10, 0]
    assert [(r["_ts"], r["_pos"]) for r in rows] == [(30, 0), (10, 1), (20, 2)]


def test_map_exception_dead_letters_only_the_failing_rows() -> None:
    def parse(table: pa.Table) -> pa.Table:
        if any(v is None for v in table.column("note").to_pylist()):
            raise ValueError("note missing")
        return table.append_column("length", pc.utf8_length(table.column("note")))

    flow = flow_with(lambda f: f.map("parse", parse, schema={"id": "int64", "length": "int64"}))
    result = run(flow)
    assert [r["id"] for r in result.sink.rows("out")] == [1, 3]
    dead = result.sink.dead_letter_rows()
    assert len(dead) == 1
    assert dead[0]["step"] == "parse" and dead[0]["pos"] == 1 and dead[0]["source"] == "events"
    assert dead[0]["reason"] == "ValueError: note missing"
    assert '"amount": -5' in dead[0]["payload"]


def test_map_per_row() -> None:
    def label(row: dict[str, Any]) -> dict[str, Any]:
        return {"id": row["id"], "label": f"{row['id']}:{100 // row['amount']}"}

    flow = flow_with(
        lambda f: f.map("label", label, schema={"id": "int64", "label": "string"}, per_row=True)
    )
    result = run(flow)
    assert [r["label"] for r in result.sink.rows("out")] == ["1:10", "2:-20"]
    assert [d["reason"] for d in result.sink.dead_letter_rows()] == [
        "ZeroDivisionError: integer division or modulo by zero"
    ]


def test_map_returning_the_wrong_shape_is_a_step_failure() -> None:
    flow = flow_with(lambda f: f.map("shrink", lambda t: t.slice(0, 1)))
    with pytest.raises(StepFailed, match="use flat_map or filter"):
        run(flow)
    flow = flow_with(lambda f: f.map("lose", lambda t: t.drop_columns(["note"])))
    with pytest.raises(StepFailed, match="lacks column 'note'"):
        run(flow)


def test_filter_by_expression_and_function() -> None:
    result = run(flow_with(lambda f: f.filter("positive", col("amount") > 0)))
    assert [r["id"] for r in result.sink.rows("out")] == [1]
    result = run(flow_with(lambda f: f.filter("has_note", lambda t: pc.is_valid(t.column("note")))))
    assert [r["id"] for r in result.sink.rows("out")] == [1, 3]


def test_filter_error_dead_letters_the_row() -> None:
    def picky(amount: int) -> bool:
        if amount == 0:
            raise ArithmeticError("zero")
        return amount > 0

    result = run(flow_with(lambda f: f.filter("picky", udf(picky, col("amount"), returns="bool"))))
    assert [r["id"] for r in result.sink.rows("out")] == [1]
    assert [(d["pos"], d["reason"]) for d in result.sink.dead_letter_rows()] == [
        (2, "picky raised ArithmeticError: zero")
    ]


def test_validate_routes_with_every_failed_reason() -> None:
    checks = {
        "amount must be positive": col("amount") > 0,
        "note is required": col("note").not_null(),
    }
    result = run(flow_with(lambda f: f.validate("check", checks)))
    assert [r["id"] for r in result.sink.rows("out")] == [1]
    reasons = {d["pos"]: d["reason"] for d in result.sink.dead_letter_rows()}
    assert reasons == {1: "amount must be positive; note is required", 2: "amount must be positive"}
    stats = result.results[0].stats["check"]
    assert (stats.rows_in, stats.rows_out, stats.dead_letters) == (3, 1, 2)


def test_flat_map_per_row_and_columnar() -> None:
    def repeat(row: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"id": row["id"], "copy": i} for i in range(max(row["amount"], 0) // 5)]

    result = run(
        flow_with(lambda f: f.flat_map("repeat", repeat, schema={"id": "int64", "copy": "int64"}))
    )
    rows = result.sink.rows("out")
    assert [(r["id"], r["copy"], r["_ts"], r["_pos"]) for r in rows] == [
        (1, 0, 30, 0),
        (1, 1, 30, 0),
    ]

    def twice(table: pa.Table) -> pa.Table:
        ids = table.column("id").to_pylist()
        return pa.table({"id": ids + ids, "_parent": list(range(len(ids))) * 2})

    result = run(
        flow_with(lambda f: f.flat_map("twice", twice, schema={"id": "int64"}, per_row=False))
    )
    assert [(r["id"], r["_pos"]) for r in result.sink.rows("out")] == [
        (1, 0),
        (2, 1),
        (3, 2),
        (1, 0),
        (2, 1),
        (3, 2),
    ]


def test_merge_unions_by_column_name() -> None:
    flow = Dataflow("m")
    flow.source("a", schema={"id": "int64", "x": "string"})
    flow.source("b", schema={"id": "int64", "y": "float64"})
    flow.merge("both", ["a", "b"])
    flow.sink("out")
    batch = make_batch(
        flow, 1, a=[{"id": 1, "x": "p", "_ts": 5}], b=[{"id": 2, "y": 0.5, "_ts": 1}]
    )
    rows = run_in_memory(flow, [batch]).sink.rows("out")
    assert rows == [
        {"id": 1, "x": "p", "y": None, "_ts": 5, "_pos": 0, "_src": 0},
        {"id": 2, "x": None, "y": 0.5, "_ts": 1, "_pos": 0, "_src": 1},
    ]


def test_events_that_cannot_be_converted_are_dead_lettered() -> None:
    flow = flow_with(lambda f: None)
    table = pa.table(
        {
            "id": ["1", "two", "3"],
            "amount": [1, 2, 3],
            "note": ["a", "b", "c"],
            "_ts": pa.array([1, None, 3], type=pa.int64()),
            "_pos": [0, 1, 2],
        }
    )
    result = run_in_memory(flow, [EngineBatch(1, {"events": table})])
    assert [r["id"] for r in result.sink.rows("out")] == [1, 3]
    dead = result.sink.dead_letter_rows()
    assert [(d["step"], d["pos"]) for d in dead] == [("events", 1)]
    assert "cannot convert 'two' to int64" in dead[0]["reason"]


def test_batches_that_do_not_fit_the_dataflow() -> None:
    flow = flow_with(lambda f: None)
    executor = create_executor("serial", flow)
    with pytest.raises(BatchInputError, match="unknown sources"):
        executor.run_batch(EngineBatch(1, {"nope": pa.table({"x": [1]})}))
    with pytest.raises(BatchInputError, match=r"lack columns \['_ts'\]"):
        executor.run_batch(
            EngineBatch(
                1, {"events": pa.table({"id": [1], "amount": [1], "note": ["a"], "_pos": [0]})}
            )
        )


def test_a_source_missing_from_a_batch_is_empty() -> None:
    flow = Dataflow("two")
    flow.source("a", schema={"id": "int64"})
    flow.source("b", schema={"id": "int64"})
    flow.merge("both", ["a", "b"])
    flow.sink("out")
    rows = run_in_memory(flow, [make_batch(flow, 1, a=[{"id": 4, "_ts": 1}])]).sink.rows("out")
    assert [r["id"] for r in rows] == [4]
