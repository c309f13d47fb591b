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
from datetime import date, datetime
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


def _json_column(column: pa.ChunkedArray) -> list[Any]:
    kind = column.type
    if pa.types.is_timestamp(kind):
        text = pc.strftime(column, format="%Y-%m-%dT%H:%M:%S")
        return list(text.to_pylist())
    if pa.types.is_date(kind):
        return list(column.cast(pa.string()).to_pylist())
    if pa.types.is_floating(kind):
        return [None if v is not None and not math.isfinite(v) else v for v in column.to_pylist()]
    if pa.types.is_decimal(kind):
        return list(column.cast(pa.float64()).to_pylist())
    values = column.to_pylist()
    if pa.types.is_nested(kind) or pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return [_plain(v) for v in values]
    return list(values)


def _plain(value: Any) -> Any:
    """A nested value as JSON-ready data."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def json_rows(table: pa.Table) -> list[list[Any]]:
    """Rows of ``table`` as lists of JSON values: timestamps and dates in ISO form, non-finite
    floats as null."""
    columns = [_json_column(table.column(i)) for i in range(table.num_columns)]
    return [list(row) for row in zip(*columns, strict=True)] if columns else []
