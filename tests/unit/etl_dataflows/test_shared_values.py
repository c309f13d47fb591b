"""State loaded into an executor holds each distinct string (date, timestamp) of a column once:
the serial executor's dict rows and the local executor's string key parts share equal values
instead of holding one Python object per row (memory at scale, issue 22). The values are the
same as before, nulls included."""

from __future__ import annotations

import datetime

import pyarrow as pa

from etl_dataflows import Dataflow
from etl_dataflows.executors.local.arrays import ArrayTable
from etl_dataflows.state import table_to_rows
from etl_dataflows.types import python_values, shared_objects, shared_python_values


def test_equal_strings_are_one_object_and_values_are_unchanged() -> None:
    words = ["Active", None, "Inactive", "Active", "Active", None]
    # built from distinct objects, as Arrow's to_pylist would give them
    column = pa.chunked_array([pa.array(words[:3]), pa.array(words[3:])])
    values = shared_python_values(column, "string")
    assert values == python_values(column, "string") == words
    assert values[0] is values[3] is values[4]
    assert shared_objects(pa.array(["x", "y", "x"])).tolist() == ["x", "y", "x"]


def test_dates_and_timestamps_become_shared_engine_integers() -> None:
    days = pa.array([datetime.date(2017, 7, 7), None, datetime.date(2017, 7, 7)], pa.date32())
    values = shared_python_values(days, "date")
    assert values == python_values(days, "date")
    assert values[0] is values[2]
    at = pa.array([10**15, 10**15, None], pa.timestamp("us"))
    assert shared_python_values(at, "timestamp") == [10**15, 10**15, None]
    assert shared_python_values(pa.array([], pa.string()), "string") == []


def test_state_rows_share_their_strings() -> None:
    flow = Dataflow("t")
    table = flow.table("people", key={"id": "int64"}, columns={"status": "string"})
    data = pa.table({"id": [1, 2, 3], "status": ["Active", "Active", None]})
    rows = table_to_rows(table, data)
    assert rows == [
        {"id": 1, "status": "Active"},
        {"id": 2, "status": "Active"},
        {"id": 3, "status": None},
    ]
    assert rows[0]["status"] is rows[1]["status"]


def test_string_key_parts_share_their_strings() -> None:
    flow = Dataflow("t")
    table = flow.table(
        "watches", key={"customer": "int64", "symbol": "string"}, columns={"n": "int64"}
    )
    arrays = ArrayTable(table)
    arrays.load(pa.table({"customer": [1, 2, 3], "symbol": ["AAA", "BBB", "AAA"], "n": [1, 2, 3]}))
    symbols = arrays.key_parts[1][: arrays.index.size]
    assert symbols.tolist() == ["AAA", "BBB", "AAA"]
    assert symbols[0] is symbols[2]
    assert arrays.image().sort_by("customer").column("symbol").to_pylist() == ["AAA", "BBB", "AAA"]
