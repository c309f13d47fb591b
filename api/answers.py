"""Answers kept for paging: every page of an answer comes from the one read that made it.

A query's rows (at most ``API__MAX_ROWS``) are kept as an Arrow table under a random id for
``API__ANSWER_TTL_S``, within ``API__ANSWER_CACHE_MB`` (the oldest answers are dropped first);
``GET /query/{answer_id}?offset=...`` reads the next page of the same rows at the same watermark.
An answer that is gone is :class:`~api.exceptions.AnswerNotFound`: pin its watermark in a new
query to read the same state again (while it can still be read).
"""

from __future__ import annotations

import math
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from datetime import time as time_of_day
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from api.exceptions import AnswerNotFound
from api.union import UnionResult


@dataclass
class Answer:
    """A kept answer: the union result and what it says about freshness and streams."""

    answer_id: str
    result: UnionResult
    include_staged: bool
    facts: dict[str, Any]
    expires_at: float
    nbytes: int


def bounded_page(table: pa.Table, start: int, limit: int, max_bytes: int) -> pa.Table:
    """Rows ``start..start+limit`` of ``table``, fewer when they pass ``max_bytes`` (as Arrow;
    at least one row, an answer's rows being bounded by ``API__MAX_ANSWER_MB``)."""
    rows = table.slice(start, limit)
    if rows.num_rows <= 1 or rows.nbytes <= max_bytes:
        return rows
    low, high = 1, rows.num_rows  # the most rows that fit lies in [low, high)
    while high - low > 1:
        middle = (low + high) // 2
        if table.slice(start, middle).nbytes <= max_bytes:
            low = middle
        else:
            high = middle
    return table.slice(start, low)


class AnswerCache:
    """See the module docstring. Thread-safe."""

    def __init__(self, *, ttl_s: float, max_bytes: int) -> None:
        self.ttl_s = ttl_s
        self.max_bytes = max_bytes
        self._answers: OrderedDict[str, Answer] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._answers)

    def put(self, result: UnionResult, include_staged: bool, facts: dict[str, Any]) -> Answer:
        answer = Answer(
            answer_id=uuid.uuid4().hex,
            result=result,
            include_staged=include_staged,
            facts=facts,
            expires_at=time.monotonic() + self.ttl_s,
            nbytes=int(result.table.nbytes),
        )
        with self._lock:
            self._expire()
            self._answers[answer.answer_id] = answer
            self._bytes += answer.nbytes
            while self._bytes > self.max_bytes and len(self._answers) > 1:
                _, dropped = self._answers.popitem(last=False)
                self._bytes -= dropped.nbytes
        return answer

    def get(self, answer_id: str) -> Answer:
        with self._lock:
            self._expire()
            answer = self._answers.get(answer_id)
        if answer is None:
            raise AnswerNotFound(
                f"no answer {answer_id!r}: it expired (answers are kept for "
                f"{self.ttl_s:g} s) or never existed; ask again, pinning its watermark to read "
                "the same state",
                answer_id=answer_id,
            )
        return answer

    def _expire(self) -> None:
        now = time.monotonic()
        while self._answers:
            first = next(iter(self._answers.values()))
            if first.expires_at > now:
                break
            self._answers.popitem(last=False)
            self._bytes -= first.nbytes


def type_name(kind: pa.DataType) -> str:
    """A column type as the API names it."""
    if pa.types.is_integer(kind):
        return "int64"
    if pa.types.is_floating(kind) or pa.types.is_decimal(kind):
        return "float64"
    if pa.types.is_boolean(kind):
        return "bool"
    if pa.types.is_timestamp(kind):
        return "timestamp"
    if pa.types.is_date(kind):
        return "date"
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return "string"
    return str(kind)


#: Days since the epoch of 0001-01-01 and 9999-12-31: dates (and instants) between them are
#: written in the ordinary ISO form, any other in ISO 8601's expanded form (see json_rows).
_FIRST_DAY, _LAST_DAY = -719_162, 2_932_896
_US_PER_DAY = 86_400_000_000
_US_PER_UNIT = {"s": 1_000_000, "ms": 1_000, "us": 1}


def _civil(days: int) -> tuple[int, int, int]:
    """Year (astronomical: 0 is 1 BC), month and day of ``days`` since 1970-01-01, for any
    integer (the proleptic Gregorian calendar)."""
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1_460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (month <= 2), month, day


def _year(year: int) -> str:
    return f"{year:04d}" if 0 <= year <= 9999 else f"{'-' if year < 0 else '+'}{abs(year):06d}"


def expanded_date(days: int) -> str:
    """A date as ISO text, years outside 0000-9999 in the expanded form (``+148108-07-06``)."""
    year, month, day = _civil(days)
    return f"{_year(year)}-{month:02d}-{day:02d}"


def expanded_instant(micros: int, digits: int = 6) -> str:
    """µs since the epoch as ISO text (``YYYY-MM-DDTHH:MM:SS.ffffff``, ``digits`` of the
    fraction), years outside 0000-9999 in the expanded form; never fails, whatever the value."""
    days, rest = divmod(micros, _US_PER_DAY)
    seconds, fraction = divmod(rest, 1_000_000)
    hours, seconds = divmod(seconds, 3_600)
    minutes, seconds = divmod(seconds, 60)
    text = f"{expanded_date(days)}T{hours:02d}:{minutes:02d}:{seconds:02d}"
    return text + f".{fraction:06d}"[: digits + 1] if digits else text


def _ints(values: pa.ChunkedArray) -> pa.ChunkedArray:
    """The integers under a temporal column (days of a date32, units of a timestamp)."""
    if pa.types.is_date32(values.type):
        return values.cast(pa.int32()).cast(pa.int64())
    return values.cast(pa.int64())


def _out_of_range(values: pa.ChunkedArray, low: int, high: int) -> pa.ChunkedArray | None:
    """A mask of the values outside ``low..high`` (int64 view), or None when there are none."""
    ints = _ints(values)
    lowest, highest = pc.min(ints).as_py(), pc.max(ints).as_py()
    if lowest is None or (lowest >= low and highest <= high):
        return None
    return pc.fill_null(pc.or_(pc.less(ints, low), pc.greater(ints, high)), False)


def _with_expanded(
    column: pa.ChunkedArray, mask: pa.ChunkedArray, plain: list[Any], render: Any
) -> list[Any]:
    ints = _ints(column).to_pylist()
    return [
        render(ints[i]) if outside else value
        for i, (outside, value) in enumerate(zip(mask.to_pylist(), plain, strict=True))
    ]


def _timestamps(column: pa.ChunkedArray) -> list[Any]:
    kind = column.type
    per = _US_PER_UNIT.get(kind.unit)
    mask = None
    if per is not None:  # a ns timestamp always lies within 1677..2262
        low, high = _FIRST_DAY * _US_PER_DAY // per, ((_LAST_DAY + 1) * _US_PER_DAY - 1) // per
        mask = _out_of_range(column, low, high)
    if mask is None:
        return list(pc.strftime(column, format="%Y-%m-%dT%H:%M:%S").to_pylist())
    kept = pc.if_else(mask, pa.scalar(None, kind), column)
    plain = pc.strftime(kept, format="%Y-%m-%dT%H:%M:%S").to_pylist()
    assert per is not None
    digits = {"s": 0, "ms": 3, "us": 6}[kind.unit]  # as strftime writes each unit
    return _with_expanded(column, mask, plain, lambda v: expanded_instant(v * per, digits))


def _dates(column: pa.ChunkedArray) -> list[Any]:
    kind = column.type
    per_day = 1 if pa.types.is_date32(kind) else 86_400_000
    mask = _out_of_range(column, _FIRST_DAY * per_day, (_LAST_DAY + 1) * per_day - 1)
    if mask is None:
        return list(column.cast(pa.string()).to_pylist())
    kept = pc.if_else(mask, pa.scalar(None, kind), column)
    plain = kept.cast(pa.string()).to_pylist()
    return _with_expanded(column, mask, plain, lambda v: expanded_date(v // per_day))


def _json_column(column: pa.ChunkedArray) -> list[Any]:
    kind = column.type
    if pa.types.is_timestamp(kind):
        return _timestamps(column)
    if pa.types.is_date(kind):
        return _dates(column)
    if pa.types.is_floating(kind):
        return [None if v is not None and not math.isfinite(v) else v for v in column.to_pylist()]
    if pa.types.is_decimal(kind):
        return list(column.cast(pa.float64()).to_pylist())
    values = column.to_pylist()
    if (
        pa.types.is_integer(kind)
        or pa.types.is_boolean(kind)
        or pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
    ):
        return list(values)
    # nested, binary, time, interval, dictionary...: whatever Python value Arrow gives
    return [_plain(v) for v in values]


def _plain(value: Any) -> Any:
    """Any value as JSON-ready data: nested values element by element, times and dates in ISO
    form, intervals as their parts, bytes in hex, non-finite floats as null, anything else JSON
    has no form for as its ``str`` (so no column type can fail an answer)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, pa.MonthDayNano):  # an INTERVAL
        return {"months": value.months, "days": value.days, "nanoseconds": value.nanoseconds}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, datetime | date | time_of_day):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, Decimal):
        return _plain(float(value))
    return str(value)


def json_rows(table: pa.Table) -> list[list[Any]]:
    """Rows of ``table`` as lists of JSON values: timestamps and dates in ISO form, non-finite
    floats as null. No stored value makes it fail: a timestamp or date outside the years
    0001-9999 (which Python and most clients cannot represent) is written in ISO 8601's expanded
    form, with a sign and six year digits (``+148108-07-06T14:00:27.387904``)."""
    columns = [_json_column(table.column(i)) for i in range(table.num_columns)]
    return [list(row) for row in zip(*columns, strict=True)] if columns else []
