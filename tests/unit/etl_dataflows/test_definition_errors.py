"""Malformed dataflows fail before any data flows, with a message naming the step."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from etl_dataflows import Dataflow, col, lit, old
from etl_dataflows.exceptions import DataflowDefinitionError
from streamdi.errors import TerminalError


def base_flow() -> Dataflow:
    flow = Dataflow("bad")
    flow.table(
        "accounts",
        key={"id": "int64"},
        columns={"balance": "int64", "owner": "string"},
        indexes=("owner",),
    )
    flow.history_table("customers", key={"cid": "int64"}, columns={"name": "string"})
    flow.window_table(
        "prices",
        key={"sym": "string"},
        columns={"px": "float64"},
        span=10,
        aggregates={"hi": ("max", "px")},
    )
    flow.source(
        "events", schema={"id": "int64", "amount": "int64", "name": "string", "when": "timestamp"}
    )
    return flow


def expect_error(build: Callable[[Dataflow], None], step: str | None, *fragments: str) -> None:
    flow = base_flow()
    with pytest.raises(DataflowDefinitionError) as caught:
        build(flow)
        flow.build()
    error = caught.value
    assert isinstance(error, TerminalError)
    assert error.step == step
    if step is not None:
        assert f"step {step!r}" in str(error)
    for fragment in fragments:
        assert fragment in str(error), str(error)


def test_undeclared_table_by_name() -> None:
    expect_error(lambda f: f.transact("t").read("acounts", "id"), "t", "'acounts' is not declared")


def test_table_of_another_dataflow() -> None:
    other = Dataflow("other")
    foreign = other.table("accounts", key={"id": "int64"}, columns={"balance": "int64"})
    expect_error(
        lambda f: f.transact("t").read(foreign, "id"), "t", "not declared in dataflow 'bad'"
    )


def test_undeclared_column_in_set() -> None:
    expect_error(
        lambda f: f.transact("t").update("accounts", "id", set={"balanse": col("amount")}),
        "t",
        "no settable column 'balanse'",
    )


def test_undeclared_event_column() -> None:
    def build(f: Dataflow) -> None:
        f.transact("t").update("accounts", "id", set={"balance": old("balance") + col("amt")})

    expect_error(build, "t", "reads column 'amt'", "the input does not have")


def test_undeclared_old_column() -> None:
    def build(f: Dataflow) -> None:
        f.transact("t").update("accounts", "id", set={"balance": old("balanse")})

    expect_error(build, "t", "old('balanse') is not a column of 'accounts'")


def test_undeclared_result_column() -> None:
    def build(f: Dataflow) -> None:
        t = f.transact("t")
        r = t.read("accounts", "id")
        t.emit(x=r["nope"])

    expect_error(build, "t", "has no column 'nope'")


def test_key_of_the_wrong_type() -> None:
    expect_error(
        lambda f: f.transact("t").read("accounts", "name"), "t", "key 'id' is int64", "is string"
    )


def test_key_with_the_wrong_number_of_parts() -> None:
    expect_error(
        lambda f: f.transact("t").read("accounts", ["id", "amount"]), "t", "key has 2 part(s)"
    )


def test_null_key_literal() -> None:
    expect_error(lambda f: f.transact("t").read("accounts", lit(None)), "t", "null literal")


def test_value_of_the_wrong_type() -> None:
    def build(f: Dataflow) -> None:
        f.transact("t").update("accounts", "id", set={"balance": col("name")})

    expect_error(build, "t", "value for 'balance' is string, expected int64")


def test_condition_that_is_not_boolean() -> None:
    def build(f: Dataflow) -> None:
        f.transact("t").update(
            "accounts", "id", set={"balance": lit(1)}, require=old("balance") + 1
        )

    expect_error(build, "t", "require is int64, expected bool")


def test_incompatible_comparison() -> None:
    expect_error(lambda f: f.filter("f", col("name") > 3), "f", "compares string with int64")


def test_filter_reading_a_missing_column() -> None:
    expect_error(lambda f: f.filter("f", col("nope") > 3), "f", "reads column 'nope'")


def test_duplicate_step_id() -> None:
    expect_error(lambda f: f.filter("events", col("id") > 0), "events", "duplicate step id")


def test_cycle() -> None:
    def build(f: Dataflow) -> None:
        f.filter("a", col("id") > 0, input="b")
        f.filter("b", col("id") > 1, input="a")

    expect_error(build, "a", "form a cycle")


def test_unknown_input() -> None:
    expect_error(
        lambda f: f.filter("a", col("id") > 0, input="nowhere"),
        "a",
        "input 'nowhere' is not a step",
    )


def test_result_of_another_step() -> None:
    def build(f: Dataflow) -> None:
        first = f.transact("first")
        r = first.read("accounts", "id")
        second = f.transact("second", input="events")
        second.update("accounts", "id", set={"balance": r["balance"]})

    expect_error(build, "second", "uses a result of step 'first'")


def test_old_in_an_insert() -> None:
    def build(f: Dataflow) -> None:
        f.transact("t").insert("accounts", "id", {"balance": old("balance")})

    expect_error(build, "t", "old('balance')")


def test_as_of_on_a_plain_table() -> None:
    expect_error(
        lambda f: f.transact("t").read("accounts", "id", as_of=col("when")),
        "t",
        "as_of needs a history table",
    )


def test_update_where_on_an_unindexed_column() -> None:
    def build(f: Dataflow) -> None:
        f.transact("t").update_where("accounts", "balance", col("amount"), set={"owner": lit("x")})

    expect_error(build, "t", "'balance' is not indexed")


def test_window_operation_on_a_plain_table() -> None:
    expect_error(lambda f: f.transact("t").window("accounts", "id"), "t", "a table table allows")


def test_plain_operation_on_a_window_table() -> None:
    expect_error(
        lambda f: f.transact("t").read("prices", "name"), "t", "a window table allows ['window']"
    )


def test_reserved_output_column() -> None:
    expect_error(lambda f: f.transact("t").emit(_ts=col("id")), "t", "reserved")


def test_emit_twice() -> None:
    def build(f: Dataflow) -> None:
        t = f.transact("t")
        t.read("accounts", "id")
        t.emit(a=col("id"))
        t.emit(b=col("id"))

    expect_error(build, "t", "emit() may be called once")


def test_transaction_without_operations() -> None:
    expect_error(lambda f: f.transact("t"), "t", "needs operations")


def test_bad_table_declaration() -> None:
    flow = Dataflow("x")
    with pytest.raises(DataflowDefinitionError, match="keys are int64 or string"):
        flow.table("t", key={"k": "float64"}, columns={"v": "int64"})
    with pytest.raises(DataflowDefinitionError, match="reserved"):
        flow.table("u", key={"k": "int64"}, columns={"_v": "int64"})
    with pytest.raises(DataflowDefinitionError, match="expected one of"):
        flow.table("v", key={"k": "int64"}, columns={"v": "decimal"})


def test_merge_with_conflicting_types() -> None:
    def build(f: Dataflow) -> None:
        f.source("other", schema={"id": "string"})
        f.merge("both", ["events", "other"])

    expect_error(build, "both", "column 'id' is int64 in one input and string")


def test_expression_truth_value_is_refused() -> None:
    with pytest.raises(TypeError, match=r"& \| ~"):
        bool(col("a") > 1)
