"""Delimited lines formatted by one compiled pass straight from integer columns.

The big files (Trade, TradeHistory, CashTransaction, HoldingHistory, WatchHistory, DailyMarket)
are integers, money, dates, timestamps and strings drawn from small pools (status codes,
symbols, broker names). Formatting each column to an Arrow string array, joining the columns and
then appending the line ends copies every field three times; :func:`format_lines` writes each
field once into the file's bytes. It releases the GIL, so the writer formats two chunks at a time
on two cores.

The text is exactly what :mod:`tpcdi.generator.text` (Arrow's casts) writes for the same values:
integers in decimal, money as ``[-]whole.ff``, dates ``YYYY-MM-DD``, timestamps
``YYYY-MM-DD HH:MM:SS`` (years 0001..9999), and :data:`NULL` as an empty field; FINWIRE's compact
dates ``YYYYMMDD`` and stamps ``YYYYMMDD-HHMMSS``; a field padded to a width as Arrow's
``utf8_lpad`` (right-aligned) or ``utf8_rpad`` and a slice to the width (left-aligned), counted in
characters. :func:`format_strings` gives the lines as an Arrow array instead (FINWIRE's
fixed-width records).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numba
import numpy as np
import pyarrow as pa

#: The value of a field that is written empty (a null).
NULL = np.iinfo(np.int64).min

INT, MONEY, TIMESTAMP, DATE, TEXT, COMPACT_DATE, STAMP = 0, 1, 2, 3, 4, 5, 6
#: The most bytes a value of each numeric kind takes (a sign and 19 digits; money adds a point).
_WIDTH = {INT: 20, MONEY: 22, TIMESTAMP: 19, DATE: 10, COMPACT_DATE: 8, STAMP: 15}


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
    #: pad to this many characters (0: as long as the value), with ``fill``: on the left when
    #: ``right`` (never cut), else on the right, cutting longer values to the width
    width: int = 0
    right: bool = False
    fill: str = " "


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


def compact_dates(days: np.ndarray) -> Field:
    """``YYYYMMDD`` of days since 1970-01-01."""
    return Field(COMPACT_DATE, np.asarray(days, dtype=np.int64))


def stamps(seconds: np.ndarray) -> Field:
    """``YYYYMMDD-HHMMSS`` of seconds since 1970-01-01 (FINWIRE's PTS)."""
    return Field(STAMP, np.asarray(seconds, dtype=np.int64))


def padded(field: Field, width: int, *, right: bool = False, fill: str = " ") -> Field:
    """``field`` padded with ``fill`` to ``width`` characters: on the left when ``right``
    (Arrow's ``utf8_lpad``), else on the right and cut to ``width`` (``utf8_rpad``, then a
    slice); an empty (null) value is all fill."""
    if len(fill.encode()) != 1:
        raise ValueError("the fill must be one single-byte character")
    return replace(field, width=width, right=right, fill=fill)


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
    data, _ = _formatted(fields, delimiter, eol, ends=False)
    return data


def format_strings(fields: Sequence[Field], delimiter: str = "") -> pa.Array:
    """The lines whose fields are ``fields`` as an Arrow string array (no line ends)."""
    data, ends = _formatted(fields, delimiter, "", ends=True)
    n = len(ends) - 1
    array = pa.LargeStringArray.from_buffers(n, pa.py_buffer(ends), pa.py_buffer(data))
    return array.cast(pa.string())


def _formatted(
    fields: Sequence[Field], delimiter: str, eol: str, *, ends: bool
) -> tuple[np.ndarray, np.ndarray]:
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
            width += longest + field.width  # padding adds at most the width
        else:
            width += _WIDTH[field.kind] + field.width
        width += 0 if field.glued else len(sep)
    layout = np.array(
        [
            [
                f.kind,
                10**f.scale,
                f.scale,
                f.glued or k == 0,
                f.width,
                f.right,
                f.fill.encode()[0],
            ]
            for k, f in enumerate(fields)
        ],
        dtype=np.int64,
    )
    pool_offsets = np.concatenate(offsets_parts)
    pool_data = np.concatenate(data_parts) if data_parts else np.zeros(0, dtype=np.uint8)
    out = np.empty(n * width, dtype=np.uint8)
    line_ends = np.zeros(n + 1 if ends else 1, dtype=np.int64)
    length = _format(layout, values, pool_offsets, pool_data, sep, end, out, line_ends, ends)
    return out[:length], line_ends


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
    """``YYYY-MM-DD`` of days since 1970-01-01 (the proleptic Gregorian calendar)."""
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


@numba.njit(cache=True, inline="always")
def _pad(out: np.ndarray, start: int, pos: int, width: int, right: bool, fill: int) -> int:
    """Pad (or cut) the text written at ``start``..``pos`` to ``width`` characters."""
    chars = 0
    cut = pos
    for i in range(start, pos):
        if (out[i] & 0xC0) != 0x80:  # the first byte of a character
            if chars == width:
                cut = i
            chars += 1
    if chars > width:
        return pos if right else cut
    missing = width - chars
    if right:
        for i in range(pos - 1, start - 1, -1):
            out[i + missing] = out[i]
        for i in range(start, start + missing):
            out[i] = fill
    else:
        for i in range(pos, pos + missing):
            out[i] = fill
    return pos + missing


@numba.njit(nogil=True, cache=True)
def _format(
    layout: np.ndarray,
    values: np.ndarray,
    pool_offsets: np.ndarray,
    pool_data: np.ndarray,
    sep: np.ndarray,
    eol: np.ndarray,
    out: np.ndarray,
    line_ends: np.ndarray,
    record_ends: bool,
) -> int:
    # layout per field: kind, 10**scale, scale, no delimiter before, width, right, fill
    pos = 0
    null = np.iinfo(np.int64).min
    scratch = np.empty(20, dtype=np.uint8)
    # the text of the last date written: rows near each other in time share their day
    last_day = null
    last_date = np.empty(10, dtype=np.uint8)
    for row in range(values.shape[1]):
        for f in range(values.shape[0]):
            if not layout[f, 3]:
                for b in sep:
                    out[pos] = b
                    pos += 1
            start = pos
            value = values[f, row]
            kind = layout[f, 0]
            if value == null:
                pass
            elif kind == 0:  # INT
                pos = _put_int(out, pos, value, scratch)
            elif kind == 1:  # MONEY
                if value < 0:
                    out[pos] = 45
                    pos += 1
                    value = -value
                pos = _put_int(out, pos, value // layout[f, 1], scratch)
                out[pos] = 46
                pos = _put_digits(out, pos + 1, value % layout[f, 1], layout[f, 2])
            elif kind == 4:  # TEXT
                for i in range(pool_offsets[value], pool_offsets[value + 1]):
                    out[pos] = pool_data[i]
                    pos += 1
            else:  # TIMESTAMP, DATE, COMPACT_DATE, STAMP
                day = value // 86400 if kind == 2 or kind == 6 else value
                if day != last_day:
                    _put_date(last_date, 0, day)
                    last_day = day
                compact = kind == 5 or kind == 6
                for i in range(10):
                    if not (compact and (i == 4 or i == 7)):
                        out[pos] = last_date[i]
                        pos += 1
                if kind == 2 or kind == 6:
                    second = value - day * 86400
                    out[pos] = 45 if compact else 32
                    pos = _put_digits(out, pos + 1, second // 3600, 2)
                    if not compact:
                        out[pos] = 58
                        pos += 1
                    pos = _put_digits(out, pos, (second // 60) % 60, 2)
                    if not compact:
                        out[pos] = 58
                        pos += 1
                    pos = _put_digits(out, pos, second % 60, 2)
            if layout[f, 4] > 0:
                pos = _pad(out, start, pos, layout[f, 4], layout[f, 5] != 0, layout[f, 6])
        for b in eol:
            out[pos] = b
            pos += 1
        if record_ends:
            line_ends[row + 1] = pos
    return pos
