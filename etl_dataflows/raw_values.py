"""Turning raw values (text fields, JSON values, Python rows) into typed Arrow columns, vectorized,
with the rows that do not convert reported by index and reason instead of failing the whole column.

The one reading of raw values into the engine's column types: ``ingest`` reads its sources and
single-event records with it (a bad value is dead-lettered with the reason), and the testing
harness's :func:`~etl_dataflows.testing.make_batch` with it (a bad value is an error with the
same reason), so a value a test can put in a batch is one ingest accepts.

The fast path casts a whole column at once; only when that fails does it bisect the column to find
the few bad rows, so a clean chunk costs one cast per column.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from etl_dataflows.types import MICROS_PER_DAY, ColumnType, arrow_type

_TRUE = ["true", "t", "1", "yes", "y"]
_FALSE = ["false", "f", "0", "no", "n"]


def _cast_text(values: pa.Array, kind: ColumnType) -> pa.Array:
    """Cast a string array to ``kind``; raises ``pyarrow.ArrowInvalid`` (or similar) on bad
    values. Empty strings are nulls for every type but ``string``."""
    if kind == "string":
        return values
    trimmed = pc.utf8_trim_whitespace(values)
    cleaned = pc.if_else(pc.equal(trimmed, ""), pa.scalar(None, pa.string()), trimmed)
    if kind == "bool":
        lower = pc.utf8_lower(cleaned)
        is_true = pc.is_in(lower, value_set=pa.array(_TRUE))
        is_false = pc.is_in(lower, value_set=pa.array(_FALSE))
        bad = pc.and_(pc.is_valid(lower), pc.invert(pc.or_(is_true, is_false)))
        if pc.any(bad).as_py():
            raise pa.ArrowInvalid("not a boolean")
        return pc.if_else(pc.is_null(lower), pa.scalar(None, pa.bool_()), is_true)
    if kind == "timestamp":
        # ISO 8601 with a space or a T; a bare date is midnight.
        iso = pc.replace_substring(cleaned, " ", "T")
        midnight = pc.binary_join_element_wise(iso, "T00:00:00", "")
        dated = pc.if_else(pc.equal(pc.utf8_length(iso), 10), midnight, iso)
        return dated.cast(pa.timestamp("us"))
    return cleaned.cast(arrow_type(kind))


def _cast_values(values: pa.Array, kind: ColumnType) -> pa.Array:
    """Cast an array of JSON-ish Python values (already an Arrow array) to ``kind``."""
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        return _cast_text(values.cast(pa.string()), kind)
    if pa.types.is_null(values.type) or values.null_count == len(values):
        # (a null is null in every type: its neighbours' type says nothing against it)
        return pa.nulls(len(values), arrow_type(kind))
    if kind == "string":
        raise pa.ArrowInvalid(f"expected text, got {values.type}")
    if kind == "int64" and pa.types.is_floating(values.type):
        integral = pc.equal(pc.floor(values), values)
        if not pc.all(pc.fill_null(integral, True)).as_py():
            raise pa.ArrowInvalid("expected an integer")
    if kind == "date" and pa.types.is_integer(values.type):
        return values.cast(pa.int32()).cast(pa.date32())  # days since the epoch, as in the engine
    return values.cast(arrow_type(kind))


def convert_column(
    values: pa.Array, kind: ColumnType, *, name: str
) -> tuple[pa.Array, dict[int, str]]:
    """``values`` (strings or mixed JSON values) as ``kind``; rows that do not convert become null
    and are returned as ``{index: reason}``."""
    try:
        return _cast_values(values, kind), {}
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OverflowError):
        pass
    bad: dict[int, str] = {}
    good = np.ones(len(values), dtype=bool)

    def bisect(start: int, length: int) -> None:
        piece = values.slice(start, length)
        try:
            _cast_values(piece, kind)
            return
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OverflowError):
            pass
        if length == 1:
            raw = piece.to_pylist()[0]
            text = repr(raw)
            if len(text) > 200:
                text = text[:200] + f"... ({len(text):,} characters)"
            bad[start] = f"column {name!r}: cannot read {text} as {kind}"
            good[start] = False
            return
        half = length // 2
        bisect(start, half)
        bisect(start + half, length - half)

    bisect(0, len(values))
    mask = pa.array(good)
    kept = pc.if_else(mask, values, pa.scalar(None, values.type))
    try:
        return _cast_values(kept, kind), bad
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OverflowError):
        # every value failed on its own (a type that does not cast at all): only nulls are left
        return pa.nulls(len(values), arrow_type(kind)), bad


def convert_columns(
    raw: Mapping[str, pa.Array], columns: Mapping[str, ColumnType]
) -> tuple[list[pa.Array], dict[int, str]]:
    """Every declared column converted; bad rows as ``{index: reasons joined by '; '}``."""
    arrays = []
    bad: dict[int, list[str]] = {}
    for name, kind in columns.items():
        array, problems = convert_column(raw[name], kind, name=name)
        arrays.append(array)
        for index, reason in problems.items():
            bad.setdefault(index, []).append(reason)
    return arrays, {i: "; ".join(r) for i, r in bad.items()}


def event_times(column: pa.Array, kind: ColumnType) -> pa.Array:
    """Event times in µs (int64) from a typed column of kind timestamp, date or int64."""
    if kind == "timestamp":
        return column.cast(pa.timestamp("us")).cast(pa.int64())
    if kind == "date":
        days = column.cast(pa.int32()).cast(pa.int64())
        return pc.multiply(days, MICROS_PER_DAY)
    if kind == "int64":
        return column
    raise ValueError(f"an event-time column must be timestamp, date or int64, not {kind}")


def python_array(values: Sequence[Any]) -> pa.Array:
    """An Arrow array of arbitrary Python values; mixed types fall back to their text."""
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return pa.array([None if v is None else str(v) for v in values], pa.string())


_NESTED = (list, tuple, dict, set)


def python_columns(
    columns: Iterable[str], rows: Sequence[Mapping[str, Any]]
) -> tuple[dict[str, pa.Array], dict[int, str]]:
    """The raw column of each name in ``columns`` from ``rows`` (JSON-like mappings), ready for
    :func:`convert_columns`, and the rows that carry a list or an object where a column holds
    one value, as ``{index: reason}`` (their value becomes null: a nested value is never read
    as its text)."""
    raw: dict[str, pa.Array] = {}
    bad: dict[int, list[str]] = {}
    for name in columns:
        values = [r.get(name) for r in rows]
        if not any(issubclass(t, _NESTED) for t in set(map(type, values))):
            raw[name] = python_array(values)
            continue
        for i, value in enumerate(values):
            if isinstance(value, _NESTED):
                kind = "an object" if isinstance(value, dict) else "a list"
                bad.setdefault(i, []).append(f"column {name!r}: {kind} is not a single value")
                values[i] = None
        raw[name] = python_array(values)
    return raw, {i: "; ".join(r) for i, r in bad.items()}
