"""Sources check event times at the door and keep every reject's row as it came: a file's line as
its text (or its bytes in base64 when they are not text), a Python event as JSON."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pyarrow as pa

from ingest.eventtime import EventTimeBounds
from ingest.sources import DelimitedFileSource, IterableSource, SourceChunk

COLUMNS = {"kind": "string", "amount": "int64", "ts": "timestamp"}


def _read_all(source: DelimitedFileSource | IterableSource) -> SourceChunk:
    chunks = list(source.read(0))
    return SourceChunk(
        pa.concat_tables([c.events for c in chunks]),
        [r for c in chunks for r in c.rejects],
        warnings=[w for c in chunks for w in c.warnings],
    )


def test_a_file_timestamp_column_out_of_range_is_a_reject_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "events.txt"
    path.write_bytes(
        b"open|1|2024-01-02 03:04:05\n"
        b"open|2|1900-01-01\n"  # before 1970
        b"open|3|9999-12-31 00:00:00\n"  # far ahead of the clock
        b"open|4|2023-05-06\n"
        b"open|x|2023-05-06\n"  # a value that does not convert
        b"open|\xff\xfe|2023-05-06\n"  # not utf-8
    )
    source = DelimitedFileSource(path, COLUMNS, timestamp="ts")
    chunk = _read_all(source)
    assert chunk.events.column("amount").to_pylist() == [1, 4]
    rejects = {r.pos: r for r in chunk.rejects}
    assert sorted(rejects) == [1, 2, 4, 5]
    assert "before the lower bound" in rejects[1].reason
    assert "ahead of the clock" in rejects[2].reason
    assert (rejects[1].payload, rejects[1].encoding) == ("open|2|1900-01-01", "utf8")
    assert (rejects[2].payload, rejects[2].encoding) == ("open|3|9999-12-31 00:00:00", "utf8")
    assert "cannot read 'x' as int64" in rejects[4].reason
    assert rejects[5].encoding == "base64"
    assert base64.b64decode(rejects[5].payload) == b"open|\xff\xfe|2023-05-06"


def test_a_lower_bound_from_the_settings_admits_older_event_times(tmp_path: Path) -> None:
    path = tmp_path / "events.txt"
    path.write_text("open|2|1900-01-01\n")
    source = DelimitedFileSource(path, COLUMNS, timestamp="ts")
    source.event_time_bounds = EventTimeBounds(min_us=-(10**17))
    chunk = _read_all(source)
    assert chunk.events.num_rows == 1 and not chunk.rejects


def test_iterable_events_keep_their_json_and_partial_ts_is_said() -> None:
    items = [
        {"kind": "a", "amount": 1, "_ts": 1_000},
        {"kind": "b", "amount": 2},  # no _ts: the time it was read
        {"kind": "c", "amount": 3, "_ts": 2**62},
        {"kind": "d", "amount": "three", "_ts": 3_000},
        ["not", "a", "mapping"],
    ]
    source = IterableSource("it", items, {"kind": "string", "amount": "int64"})
    chunk = _read_all(source)
    assert chunk.events.column("kind").to_pylist() == ["a", "b"]
    assert chunk.events.column("_ts").to_pylist()[0] == 1_000
    assert chunk.warnings == [
        "1 of 4 events have no _ts: their event time is the time they arrived"
    ]
    rejects = {r.pos: r for r in chunk.rejects}
    assert sorted(rejects) == [2, 3, 4]
    assert all(r.encoding == "json" for r in chunk.rejects)
    assert json.loads(rejects[2].payload) == items[2]
    assert json.loads(rejects[3].payload) == items[3]
    assert json.loads(rejects[4].payload) == items[4]
    assert rejects[4].reason == "not a mapping: list"


def test_a_list_or_an_object_where_a_column_holds_one_value_is_a_reject() -> None:
    items = [
        {"kind": [1], "amount": 1, "_ts": 1_000},  # beside strings: once read as the text "[1]"
        {"kind": {"a": 1}, "amount": 2, "_ts": 2_000},
        {"kind": "c", "amount": [3], "_ts": 3_000},
        {"kind": "d", "amount": 4, "_ts": 4_000},
    ]
    source = IterableSource("it", items, {"kind": "string", "amount": "int64"})
    chunk = _read_all(source)
    assert chunk.events.column("kind").to_pylist() == ["d"]
    rejects = {r.pos: r for r in chunk.rejects}
    assert sorted(rejects) == [0, 1, 2]
    assert rejects[0].reason == "column 'kind': a list is not a single value"
    assert rejects[1].reason == "column 'kind': an object is not a single value"
    assert rejects[2].reason == "column 'amount': a list is not a single value"
    assert [json.loads(rejects[p].payload) for p in (0, 1, 2)] == items[:3]
