"""Event times checked at the door: integers in range pass, anything else has a reason; the
settings configure the bounds; the collector's second line moves out-of-range events of any
source to its rejects with the row kept as JSON."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from ingest.collector import reject_out_of_range
from ingest.eventtime import HARD_MAX_US, HARD_MIN_US, EventTimeBounds
from ingest.sources import SourceChunk
from streamdi.settings import IngestSettings

NOW = 1_700_000_000_000_000  # 2023-11-14T22:13:20
BOUNDS = EventTimeBounds(min_us=0, max_future_us=300_000_000)


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        (2**62, "more than 300000 ms ahead of the clock"),
        (NOW + 300_000_001, "more than 300000 ms ahead of the clock"),
        (-(2**62), "before the lower bound"),
        (-1, "before the lower bound"),
        (2**70, "ahead of the clock"),  # does not even fit int64
        (True, "must be integer microseconds"),
        ("1700000000000000", "must be integer microseconds"),
        (1.7e15, "must be integer microseconds"),
        (float("nan"), "must be integer microseconds"),
        (None, "must be integer microseconds"),
        ([1], "must be integer microseconds"),
    ],
)
def test_bad_event_times_have_a_reason(value: object, fragment: str) -> None:
    problem = BOUNDS.problem(value, NOW)
    assert problem is not None and fragment in problem


@pytest.mark.parametrize(
    "value",
    [0, 1, NOW, NOW + 300_000_000, np.int64(NOW)],
    ids=["zero", "one", "now", "now-plus-5-min", "now-numpy"],
)
def test_sane_event_times_pass(value: object) -> None:
    assert BOUNDS.problem(value, NOW) is None


def test_the_vectorized_check_names_the_rows_out_of_range() -> None:
    ts = np.array([NOW, 2**62, -5, 0, NOW + 1], dtype=np.int64)
    problems = BOUNDS.check(ts, NOW)
    assert sorted(problems) == [1, 2]
    assert "ahead of the clock" in problems[1] and "before the lower bound" in problems[2]
    assert BOUNDS.check(np.array([], dtype=np.int64)) == {}


def test_no_future_bound_still_stops_at_year_9999() -> None:
    open_ended = EventTimeBounds(min_us=HARD_MIN_US - 10**9, max_future_us=None)
    assert open_ended.lower_us() == HARD_MIN_US
    assert open_ended.problem(HARD_MAX_US, NOW) is None
    problem = open_ended.problem(HARD_MAX_US + 1, NOW)
    assert problem is not None and "after the year 9999" in problem


def test_settings_configure_the_bounds() -> None:
    default = EventTimeBounds.from_settings(IngestSettings())
    assert default == EventTimeBounds(min_us=0, max_future_us=300_000_000)
    custom = EventTimeBounds.from_settings(
        IngestSettings.model_validate({"max_future_ms": "", "min_event_time_ms": -86_400_000})
    )
    assert custom == EventTimeBounds(min_us=-86_400_000_000, max_future_us=None)
    with pytest.raises(ValueError, match="min_event_time_ms"):
        IngestSettings.model_validate({"min_event_time_ms": -(10**15)})
    with pytest.raises(ValueError, match="max_future_ms"):
        IngestSettings.model_validate({"max_future_ms": -1})


def test_the_collector_moves_out_of_range_events_of_any_source_to_the_rejects() -> None:
    """A source that builds ``_ts`` itself (as the TPC-DI change stream does) is checked too."""
    events = pa.table(
        {
            "key": pa.array([1, 2, 3, 4], pa.int64()),
            "_ts": pa.array([NOW, 2**62, None, 5], pa.int64()),
            "_pos": pa.array([10, 11, 12, 13], pa.int64()),
        }
    )
    chunk = SourceChunk(events, [], last_pos=13)
    reject_out_of_range(chunk, BOUNDS)
    assert chunk.events.column("_pos").to_pylist() == [10, 13]
    assert [(r.pos, r.encoding) for r in chunk.rejects] == [(11, "json"), (12, "json")]
    assert "out of range" in chunk.rejects[0].reason
    assert json.loads(chunk.rejects[0].payload) == {"key": 2, "_ts": 2**62}
    assert chunk.rejects[1].reason == "no event time"
