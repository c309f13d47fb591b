"""Vectorized text building for the generator: every helper turns whole numpy columns into Arrow
string arrays (no Python loop per row), and :func:`write_lines` writes them as CRLF lines."""

from __future__ import annotations

from collections.abc import Sequence
from typing import IO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

STR = pa.string()
_LETTERS = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
#: Byte -> character table for random text: letters, and about 5% blanks.
_TEXT_TABLE = np.frombuffer((_LETTERS * 5)[:243] + b" " * 13, dtype=np.uint8)


def ints(values: np.ndarray) -> pa.Array:
    """Decimal text of integers."""
    return pc.cast(pa.array(np.asarray(values, dtype=np.int64)), STR)


def padded(values: np.ndarray, width: int, fill: str = "0") -> pa.Array:
    """Integers left-padded to ``width`` with ``fill``."""
    return pc.utf8_lpad(ints(values), width=width, padding=fill)


def money(cents: np.ndarray, scale: int = 2) -> pa.Array:
    """Fixed-point text of integer amounts in units of 10**-scale (``-12.30`` for -1230)."""
    cents = np.asarray(cents, dtype=np.int64)
    unit = 10**scale
    whole = np.abs(cents) // unit
    frac = padded(np.abs(cents) % unit, scale)
    text = pc.binary_join_element_wise(ints(whole), frac, ".")
    negative = cents < 0
    if negative.any():
        text = pc.if_else(pa.array(negative), pc.binary_join_element_wise("-", text, ""), text)
    return text


def concat(*parts: pa.Array | str) -> pa.Array:
    """Element-wise concatenation; a null part counts as empty."""
    return pc.binary_join_element_wise(*parts, "", null_handling="replace", null_replacement="")


def dates(days: np.ndarray) -> pa.Array:
    """``YYYY-MM-DD`` text of days since 1970-01-01."""
    days = np.asarray(days, dtype=np.int64)
    if len(days) == 0:
        return pa.array([], STR)
    low, high = int(days.min()), int(days.max())
    if high - low + 1 > len(days):
        return pc.cast(pa.array(days.astype(np.int32), pa.date32()), STR)
    # few distinct days: format each once and gather
    table = pc.cast(pa.array(np.arange(low, high + 1, dtype=np.int32), pa.date32()), STR)
    return table.take(pa.array(days - low))


def timestamps(seconds: np.ndarray) -> pa.Array:
    """``YYYY-MM-DD HH:MM:SS`` text of seconds since 1970-01-01."""
    array = pa.array(np.asarray(seconds, dtype=np.int64), pa.timestamp("s"))
    return pc.cast(array, STR)


def compact_dates(days: np.ndarray) -> pa.Array:
    """``YYYYMMDD`` text (FINWIRE dates)."""
    return pc.replace_substring(dates(days), "-", "")


def choose(rng: np.random.Generator, words: Sequence[str] | pa.Array, n: int) -> pa.Array:
    """``n`` values drawn uniformly from ``words``."""
    pool = words if isinstance(words, pa.Array) else pa.array(list(words), STR)
    return pool.take(pa.array(rng.integers(0, len(pool), n)))


def pick(words: Sequence[str] | pa.Array, index: np.ndarray) -> pa.Array:
    """``words[index]`` for every index."""
    pool = words if isinstance(words, pa.Array) else pa.array(list(words), STR)
    return pool.take(pa.array(np.asarray(index, dtype=np.int64)))


def letters(rng: np.random.Generator, lengths: np.ndarray) -> pa.Array:
    """Random strings of letters (about 5% blanks) of the given lengths."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    chars = _TEXT_TABLE[np.frombuffer(rng.bytes(total), dtype=np.uint8)]
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return pa.LargeStringArray.from_buffers(
        len(lengths), pa.py_buffer(offsets), pa.py_buffer(chars.tobytes())
    ).cast(STR)


def digits(rng: np.random.Generator, n: int, count: int) -> pa.Array:
    """``n`` strings of ``count`` random decimal digits."""
    return padded(rng.integers(0, 10**count, n), count)


def with_nulls(array: pa.Array, null: np.ndarray) -> pa.Array:
    """``array`` with the rows where ``null`` is true set to null."""
    return pc.if_else(pa.array(~np.asarray(null, dtype=bool)), array, pa.scalar(None, array.type))


def csv_quote(array: pa.Array) -> pa.Array:
    """Quote values containing a comma or a double quote, doubling inner quotes (RFC 4180)."""
    needs = pc.or_(pc.match_substring(array, ","), pc.match_substring(array, '"'))
    quoted = concat('"', pc.replace_substring(array, '"', '""'), '"')
    return pc.if_else(needs, quoted, array)


def xml_escape(array: pa.Array) -> pa.Array:
    """Escape the characters XML text and attribute values cannot hold."""
    for char, entity in (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ('"', "&quot;")):
        array = pc.replace_substring(array, char, entity)
    return array


def join_fields(columns: Sequence[pa.Array], delimiter: str) -> pa.Array:
    """Lines (without terminator): the fields of each row joined by ``delimiter``; null is empty."""
    return pc.binary_join_element_wise(
        *columns, delimiter, null_handling="replace", null_replacement=""
    )


def write_lines(handle: IO[bytes], lines: pa.Array, eol: str = "\r\n") -> int:
    """Write ``lines`` each followed by ``eol``; returns the number of lines written."""
    if len(lines) == 0:
        return 0
    terminated = pc.binary_join_element_wise(lines, eol, "")
    if isinstance(terminated, pa.ChunkedArray):
        terminated = terminated.combine_chunks()
    _, offsets, data = terminated.buffers()
    offset_width = 8 if pa.types.is_large_string(terminated.type) else 4
    bounds = np.frombuffer(offsets, dtype=np.int64 if offset_width == 8 else np.int32)
    start = int(bounds[terminated.offset])
    end = int(bounds[terminated.offset + len(terminated)])
    handle.write(memoryview(data)[start:end])
    return len(lines)
