"""Request bodies are refused when they are validated, never later: a structured condition whose
value does not fit its operator, names with control characters, values no database can hold."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from api.models import MAX_IN_VALUES, QueryBody, ReplayBody, StructuredQuery
from api.safety import check_query

TABLES = {"accounts": ["aid", "balance", "opened"]}


def structured(*where: dict[str, Any], **query: Any) -> dict[str, Any]:
    return {"structured": {"table": "accounts", "where": list(where), **query}}


@pytest.mark.parametrize(
    ("condition", "reason"),
    [
        ({"column": "aid", "op": "=", "value": [1]}, "operator = takes one value, not a list"),
        ({"column": "aid", "op": "<", "value": [1, 2]}, "operator < takes one value"),
        ({"column": "aid", "op": "like", "value": ["a%"]}, "operator like takes one value"),
        ({"column": "aid", "op": "!=", "value": []}, "operator != takes one value"),
        ({"column": "aid", "op": "in", "value": 1}, "operator in takes a list"),
        ({"column": "aid", "op": "in", "value": []}, "operator in takes 1 to"),
        ({"column": "aid", "op": "in", "value": [1] * (MAX_IN_VALUES + 1)}, "takes 1 to"),
        ({"column": "aid", "op": "is_null", "value": 1}, "operator is_null takes no value"),
        ({"column": "aid", "op": "not_null", "value": [None]}, "not_null takes no value"),
        ({"column": "aid", "op": "like", "value": 3}, "like takes a string"),
        ({"column": "aid", "value": None}, "for NULL use is_null"),
        ({"column": "aid", "op": ">="}, "takes a value"),
        ({"column": "aid", "value": 2**130}, "integers are limited"),
        ({"column": "aid", "op": "in", "value": [1, -(2**130)]}, "integers are limited"),
        ({"column": "aid", "value": float("nan")}, "must be finite"),
        ({"column": "aid", "value": float("inf")}, "must be finite"),
        ({"column": "aid", "value": "a\x00b"}, "NUL"),
        ({"column": "aid", "value": "\udc00"}, "valid Unicode"),
        ({"column": "aid", "value": "x" * 10_001}, "limited to 10000 characters"),
        ({"column": "a\x00", "value": 1}, "pattern"),
        ({"column": "a\nb", "value": 1}, "pattern"),
        ({"column": "", "value": 1}, "at least 1 character"),
        ({"column": "\udc00", "value": 1}, ""),
        ({"column": "aid", "op": "between", "value": [1, 2]}, "op"),
        ({"column": "aid", "value": {"a": 1}}, "value"),
        ({"column": "aid", "value": 1, "extra": 1}, "extra"),
    ],
)
def test_a_condition_that_does_not_fit_its_operator_is_refused(
    condition: dict[str, Any], reason: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        QueryBody.model_validate(structured(condition))
    assert reason in str(refused.value)


@pytest.mark.parametrize(
    "query",
    [
        {"table": "accounts\x00"},
        {"table": ""},
        {"table": "t" * 129},
        {"table": "accounts", "columns": ["aid", ""]},
        {"table": "accounts", "columns": ["\x1b[31m"]},
        {"table": "accounts", "order_by": [{"column": "\x7f"}]},
        {"table": "accounts", "limit": -1},
        {"table": "accounts", "limit": 2**63},
        {"table": "accounts", "where": "aid = 1"},
    ],
)
def test_bad_names_and_limits_are_refused(query: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        QueryBody.model_validate({"structured": query})


@pytest.mark.parametrize(
    "body",
    [
        {"sql": "SELECT 'a\x00' FROM accounts"},
        {"sql": "SELECT '\ud800' FROM accounts"},
        {"sql": "SELECT 1", "watermark": 2**70},
        {"sql": "SELECT 1", "watermark": -1},
        {"sql": "SELECT 1", "page_size": 0},
        {},
        {"sql": "SELECT 1", "structured": {"table": "accounts"}},
    ],
)
def test_bad_query_bodies_are_refused(body: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        QueryBody.model_validate(body)


@pytest.mark.parametrize(
    "body",
    [
        {"ids": [2**70]},
        {"ids": [-1]},
        {"entries": [{"id": 2**64, "stream": "s", "event": {}}]},
        {"entries": [{"stream": "\udc00", "event": {}}]},
        {"ids": []},
    ],
)
def test_bad_replay_bodies_are_refused(body: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        ReplayBody.model_validate(body)


def test_every_valid_condition_becomes_sql_the_checker_admits() -> None:
    conditions: list[dict[str, Any]] = [
        {"column": "aid", "value": 1},
        {"column": "aid", "op": "!=", "value": -(10**38) + 1},
        {"column": "balance", "op": "<", "value": 1.5},
        {"column": "balance", "op": "<=", "value": True},
        {"column": "balance", "op": ">", "value": "x'); DROP TABLE t; --"},
        {"column": "balance", "op": ">=", "value": "é名"},
        {"column": "opened", "op": "like", "value": "2024-%"},
        {"column": "aid", "op": "in", "value": [1, "2", None, 3.5, False]},
        {"column": "opened", "op": "is_null"},
        {"column": "opened", "op": "not_null", "value": None},
    ]
    for condition in conditions:
        body = QueryBody.model_validate(structured(condition, limit=2**62, columns=[]))
        checked = check_query(body.text(), TABLES)
        assert checked.tables == ("accounts",), condition


def test_a_structured_query_quotes_what_it_names() -> None:
    query = StructuredQuery.model_validate(
        {"table": 'accounts"; --', "columns": ['a"b'], "where": [{"column": "x", "value": "'"}]}
    )
    assert query.to_sql() == 'SELECT "a""b" FROM "accounts""; --" WHERE "x" = \'\'\'\''
