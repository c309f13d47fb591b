"""Event time checked at the door: an event's ``_ts`` must be a sane instant before it can move its
stream's high mark.

An event time (``_ts``, integer µs since the epoch) is accepted when

* it is an integer (not a bool, a float, a string or null),
* it is not before the lower bound (``INGEST__MIN_EVENT_TIME_MS``, default 1970-01-01), and
* it is not more than ``INGEST__MAX_FUTURE_MS`` (default 5 minutes) ahead of the clock of the
  process that checks it; with that setting unset only the hard limit applies: the end of year
  9999, the last instant every reader of the data (Python, PostgreSQL, JSON clients) can write.

Anything else is a dead letter whose reason starts with ``event time out of range`` or
``_ts must be integer microseconds``; it never moves a stream's high mark (the high mark decides
which later events are late, so one event a century ahead would make every later event late).

The same :class:`EventTimeBounds` is applied wherever events enter: the sources (file rows with a
timestamp column, Python iterables, the HTTP push source), the collector (every chunk of any
source, as a second line), and the consumer's assembler (single-event records and batch records an
outside producer wrote straight to the topic).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

#: 0001-01-01T00:00:00 and 9999-12-31T23:59:59.999999 in µs since the epoch: the instants every
#: reader of the data can represent; no setting can widen them.
HARD_MIN_US = -62_135_596_800_000_000
HARD_MAX_US = 253_402_300_799_999_999

OUT_OF_RANGE = "event time out of range"
NOT_AN_INTEGER = "_ts must be integer microseconds since the epoch"


def now_us() -> int:
    return time.time_ns() // 1000


def describe_us(value: int) -> str:
    """``value`` µs as ISO text when it is a representable instant, else the raw number only."""
    if HARD_MIN_US <= value <= HARD_MAX_US:
        from datetime import UTC, datetime, timedelta

        instant = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=value)
        return f"{value} µs ({instant.replace(tzinfo=None).isoformat()})"
    return f"{value} µs"


@dataclass(frozen=True)
class EventTimeBounds:
    """The accepted range of event times; see the module docstring. ``max_future_us`` None: no
    bound relative to the clock (the hard limit still holds)."""

    min_us: int = 0
    max_future_us: int | None = 300_000_000

    @classmethod
    def from_settings(cls, ingest: Any) -> EventTimeBounds:
        """The bounds an :class:`~streamdi.settings.IngestSettings` configures."""
        future = ingest.max_future_ms
        return cls(
            min_us=int(ingest.min_event_time_ms) * 1000,
            max_future_us=None if future is None else int(future) * 1000,
        )

    def upper_us(self, now: int | None = None) -> int:
        """The latest event time accepted at ``now`` (µs; the clock when not given)."""
        if self.max_future_us is None:
            return HARD_MAX_US
        return min(HARD_MAX_US, (now_us() if now is None else now) + self.max_future_us)

    def lower_us(self) -> int:
        return max(HARD_MIN_US, self.min_us)

    def problem(self, value: Any, now: int | None = None) -> str | None:
        """Why ``value`` (a raw ``_ts`` from JSON or Python) is not an acceptable event time, or
        None when it is."""
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            return f"{NOT_AN_INTEGER}, got {_short(value)}"
        return self._range_problem(int(value), now)

    def _range_problem(self, value: int, now: int | None) -> str | None:
        lower = self.lower_us()
        if value < lower:
            return (
                f"{OUT_OF_RANGE}: _ts {describe_us(value)} is before the lower bound "
                f"{describe_us(lower)} (INGEST__MIN_EVENT_TIME_MS)"
            )
        upper = self.upper_us(now)
        if value > upper:
            if self.max_future_us is not None and upper < HARD_MAX_US:
                return (
                    f"{OUT_OF_RANGE}: _ts {describe_us(value)} is more than "
                    f"{self.max_future_us // 1000} ms ahead of the clock (INGEST__MAX_FUTURE_MS)"
                )
            return f"{OUT_OF_RANGE}: _ts {describe_us(value)} is after the year 9999"
        return None

    def check(self, ts: np.ndarray, now: int | None = None) -> dict[int, str]:
        """The rows of an int64 array of event times that are out of range, ``{index: reason}``
        (vectorized: a clean array costs two comparisons)."""
        if len(ts) == 0:
            return {}
        at = now_us() if now is None else now
        values = np.asarray(ts, dtype=np.int64)
        bad = np.flatnonzero((values < self.lower_us()) | (values > self.upper_us(at)))
        return {int(i): self._range_problem(int(values[i]), at) or OUT_OF_RANGE for i in bad}


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
