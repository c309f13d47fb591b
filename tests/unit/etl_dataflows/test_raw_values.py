"""Reading raw values (JSON-like Python rows) as column types, as ingest and make_batch do: a row
that does not convert is reported with its reason, and only that row."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from etl_dataflows.raw_values import convert_columns, python_columns


def read(kind: Any, *values: Any) -> tuple[list[Any], dict[int, str]]:
    raw, nested = python_columns(["c"], [{"c": v} for v in values])
    arrays, bad = convert_columns(raw, {"c": kind})
    return arrays[0].to_pylist(), {**nested, **bad}


@pytest.mark.parametrize(
    ("kind", "values", "bad_row"),
    [
        ("string", (None, 7), 1),  # a number where text belongs: no row of its type casts
        ("string", (7,), 0),
        ("date", (True, None), 0),
        ("int64", (1, 5.5, None), 1),
        ("int64", (None, [1]), 1),
    ],
)
def test_only_the_bad_row_is_reported(kind: str, values: tuple[Any, ...], bad_row: int) -> None:
    got, bad = read(kind, *values)
    assert list(bad) == [bad_row]
    assert bad[bad_row].startswith("column 'c': ")
    assert got[bad_row] is None
    assert all(got[i] is None for i, v in enumerate(values) if v is None)


def test_integers_for_a_date_are_days_since_the_epoch() -> None:
    got, bad = read("date", 0, 19_000, None)
    assert bad == {}
    assert got == [datetime.date(1970, 1, 1), datetime.date(2022, 1, 8), None]
    _, bad = read("date", 2**40)
    assert bad == {0: f"column 'c': cannot read {2**40} as date"}
