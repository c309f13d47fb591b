"""Delimited lines formatted by one compiled pass straight from integer columns.

The big files (Trade, TradeHistory, CashTransaction, HoldingHistory, WatchHistory, DailyMarket)
are integers, money, dates, timestamps and strings drawn from small pools (status codes,
symbols, broker names). Formatting each column to an Arrow string array, joining the columns and
then appending the line ends copies every field three times; :func:`format_lines` writes each
field once into the file's bytes. It releases the GIL, so the writer formats two chunks at a time
on two cores.

The text is exactly what :mod:`tpcdi.generator.text` (Arrow's casts) writes for the same values:
integers in decimal, money as ``[-]whole.ff``, dates ``YYYY-MM-DD``, timestamps
``YYYY-MM-DD HH:MM:SS`` (years 0001..9999), and :data:`NULL` as an empty field.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numba
import numpy as np
import pyarrow as pa

#: The value of a field that is written empty (a null).
NULL = np.iinfo(np.int64).min

INT, MONEY, TIMESTAMP, DATE, TEXT = 0, 1, 2, 3, 4
#: The most bytes a value of each numeric kind takes (a sign and 19 digits; money adds a point).
_WIDTH = {INT: 20, MONEY: 22, TIMESTAMP: 19, DATE: 10}


@dataclass(frozen=True)
class Field:
    """One field of every line: ``values`` (int64, :data:`NULL` for an empty field) shown as
    ``kind``; a TEXT field's values index ``pool``. A ``glued`` field follows the previous one
    without a delimiter (the parts of one text field, like ``Sale of 10 shares``)."""

    kind: int
    values: np.ndarray
    pool: pa.Array | None = None
    glued: bool = False
    scale: int = 2


def ints(values: np.ndarray) -> Field:
    """Decimal integers."""
    return Field(INT, np.asarray(values, dtype=np.int64))


def money(cents: np.ndarray, scale: int = 2) -> Field:
    """Fixed point in units of 10**-scale (``-12.30`` for -1230)."""
    return Field(MONEY, np.asarray(cents, dtype=np.int64), scale=scale)


def timestamps(seconds: np.ndarray) -> Field:
    """``YYYY-MM-DD HH:MM:SS`` of seconds since 1970-01-01."""
    return Field(TIMESTAMP, np.asarray(seconds, dtype=np.int64))


def dates(days: np.ndarray) -> Field:
    """``YYYY-MM-DD`` of days since 1970-01-01."""
    return Field(DATE, np.asarray(days, dtype=np.int64))


def pick(pool: Sequence[str] | pa.Array, index: np.ndarray) -> Field:
    """``pool[index]`` for every index (a null in the pool is an empty field)."""
    strings = pool if isinstance(pool, pa.Array) else pa.array(list(pool), pa.string())
    return Field(TEXT, np.asarray(index, dtype=np.int64), strings)


def const(value: str, n: int) -> Field:
    """The same text on every one of ``n`` lines."""
    return pick([value], np.zeros(n, dtype=np.int64))


def glued(field: Field) -> Field:
    """``field`` written right after the previous field, without a delimiter."""
    return replace(field, glued=True)


def with_nulls(field: Field, null: np.ndarray) -> Field:
    """``field`` empty on the lines where ``null`` is true."""
    return replace(field, values=np.where(null, NULL, field.values))


def _pool_parts(pool: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Offsets (int64, from 0) and bytes of a string array."""
    if not pa.types.is_large_string(pool.type):
        pool = pool.cast(pa.large_string())
    _, offsets_buf, data_buf = pool.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int64)[pool.offset : pool.offset + len(pool) + 1]
    data = (
        np.frombuffer(data_buf, dtype=np.uint8)
        if data_buf is not None
        else np.zeros(0, dtype=np.uint8)
    )
    return offsets - offsets[0], data[offsets[0] : offsets[-1]]


def format_lines(fields: Sequence[Field], delimiter: str, eol: str = "\r\n") -> np.ndarray:
    """The bytes of the lines (each followed by ``eol``) whose fields are ``fields``, all of
    the same length. Raises ValueError for fields of different lengths."""
    if not fields:
        raise ValueError("a line needs at least one field")
    n = len(fields[0].values)
    if any(len(f.values) != n for f in fields):
        raise ValueError("fields of different lengths")
    sep = np.frombuffer(delimiter.encode(), dtype=np.uint8)
    end = np.frombuffer(eol.encode(), dtype=np.uint8)
    values = np.empty((len(fields), n), dtype=np.int64)
    offsets_parts, data_parts = [np.zeros(1, dtype=np.int64)], []
    strings = bytes_so_far = 0
    width = len(end)
    for k, field in enumerate(fields):
        values[k] = field.values
        if field.kind == TEXT:
            assert field.pool is not None
            offsets, data = _pool_parts(field.pool)
            longest = int(np.diff(offsets).max()) if len(offsets) > 1 else 0
            np.add(values[k], strings, out=values[k], where=values[k] != NULL)
            offsets_parts.append(offsets[1:] + bytes_so_far)
            data_parts.append(data)
            strings += len(offsets) - 1
            bytes_so_far += len(data)
            width += longest
        else:
            width += _WIDTH[field.kind]
        width += 0 if field.glued else len(sep)
    kinds = np.array([f.kind for f in fields], dtype=np.int64)
    scales = np.array([10**f.scale for f in fields], dtype=np.int64)
    digits = np.array([f.scale for f in fields], dtype=np.int64)
    glue = np.array([f.glued or k == 0 for k, f in enumerate(fields)], dtype=np.bool_)
    pool_offsets = np.concatenate(offsets_parts)
    pool_data = np.concatenate(data_parts) if data_parts else np.zeros(0, dtype=np.uint8)
    out = np.empty(n * width, dtype=np.uint8)
    length = _format(kinds, scales, digits, glue, values, pool_offsets, pool_data, sep, end, out)
    return out[:length]


#: "00" .. "99": two digits per division.
_PAIRS = np.frombuffer("".join(f"{i:02d}" for i in range(100)).encode(), dtype=np.uint8)


@numba.njit(cache=True, inline="always")
def _put_digits(out: np.ndarray, pos: int, value: int, count: int) -> int:
    """``value`` (>= 0) as exactly ``count`` digits, zero-padded."""
    rest = np.uint64(value)
    i = pos + count
    while i - pos >= 2:
        pair = rest % np.uint64(100)
        rest //= np.uint64(100)
        out[i - 1] = _PAIRS[2 * pair + 1]
        out[i - 2] = _PAIRS[2 * pair]
        i -= 2
    if i > pos:
        out[pos] = np.uint8(48) + np.uint8(rest % np.uint64(10))
    return pos + count


@numba.njit(cache=True, inline="always")
def _put_int(out: np.ndarray, pos: int, value: int, scratch: np.ndarray) -> int:
    if value < 0:
        out[pos] = 45
        pos += 1
        value = -value
    # digits two at a time into the end of ``scratch``, then copied in order
    rest = np.uint64(value)
    i = len(scratch)
    while rest >= np.uint64(100):
        pair = rest % np.uint64(100)
        rest //= np.uint64(100)
        scratch[i - 1] = _PAIRS[2 * pair + 1]
        scratch[i - 2] = _PAIRS[2 * pair]
        i -= 2
    if rest >= np.uint64(10):
        scratch[i - 1] = _PAIRS[2 * rest + 1]
        scratch[i - 2] = _PAIRS[2 * rest]
        i -= 2
    else:
        scratch[i - 1] = np.uint8(48) + np.uint8(rest)
        i -= 1
    for k in range(i, len(scratch)):
        out[pos] = scratch[k]
        pos += 1
    return pos


@numba.njit(cache=True, inline="always")
def _put_date(out: np.ndarray, pos: int, days: int) -> int:
    # days since 1970-01-01 -> civil date (the proleptic Gregorian calendar)
    z = days + 719468
    era = (z if z >= 0 else z - 146096) // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + 3 if mp < 10 else mp - 9
    y = yoe + era * 400 + (1 if m <= 2 else 0)
    pos = _put_digits(out, pos, y, 4)
    out[pos] = 45
    pos = _put_digits(out, pos + 1, m, 2)
    out[pos] = 45
    return _put_digits(out, pos + 1, d, 2)


@numba.njit(nogil=True, cache=True)
def _format(
    kinds: np.ndarray,
    scales: np.ndarray,
    digits: np.ndarray,
    glue: np.ndarray,
    values: np.ndarray,
    pool_offsets: np.ndarray,
    pool_data: np.ndarray,
    sep: np.ndarray,
    eol: np.ndarray,
    out: np.ndarray,
) -> int:
    pos = 0
    null = np.iinfo(np.int64).min
    scratch = np.empty(20, dtype=np.uint8)
    # the text of the last date written: rows near each other in time share their day
    last_day = null
    last_date = np.empty(10, dtype=np.uint8)
    for row in range(values.shape[1]):
        for f in range(values.shape[0]):
            if not glue[f]:
                for b in sep:
                    out[pos] = b
                    pos += 1
            value = values[f, row]
            if value == null:
                continue
            kind = kinds[f]
            if kind == 0:  # INT
                pos = _put_int(out, pos, value, scratch)
            elif kind == 1:  # MONEY
                if value < 0:
                    out[pos] = 45
                    pos += 1
                    value = -value
                pos = _put_int(out, pos, value // scales[f], scratch)
                out[pos] = 46
                pos = _put_digits(out, pos + 1, value % scales[f], digits[f])
            elif kind == 2 or kind == 3:  # TIMESTAMP, DATE
                day = value // 86400 if kind == 2 else value
                if day != last_day:
                    _put_date(last_date, 0, day)
                    last_day = day
                for b in last_date:
                    out[pos] = b
                    pos += 1
                if kind == 3:
                    continue
                second = value - day * 86400
                out[pos] = 32
                pos = _put_digits(out, pos + 1, second // 3600, 2)
                out[pos] = 58
                pos = _put_digits(out, pos + 1, (second // 60) % 60, 2)
                out[pos] = 58
                pos = _put_digits(out, pos + 1, second % 60, 2)
            else:  # TEXT
                for i in range(pool_offsets[value], pool_offsets[value + 1]):
                    out[pos] = pool_data[i]
                    pos += 1
        for b in eol:
            out[pos] = b
            pos += 1
    return pos
