"""String keys to dense codes without a Python object per string.

A :class:`StrKeyIndex` gives every distinct string a *code*: 0, 1, 2, ... in the order the strings
were first seen. It keeps the strings as UTF-8 bytes in one growing buffer with their offsets
(Arrow's ``large_string`` layout, so the strings go back to Arrow without a copy), the 64-bit
hash of each string, and an open-addressing table of codes (at most half full) probed by a
compiled loop that reads the bytes of an Arrow string array where they lie. Coding a column of
500,000 strings costs a pass over its bytes (tens of milliseconds), where a Python dictionary
first made 500,000 Python strings to look them up (a second and more at TPC-DI SF 100, where
every batch codes the whole prospect list), and holds each string in ~30 bytes beside its text
instead of ~100.

Growth never moves a string: the buffers are replaced by larger copies and what lies below the
current size is never written again, so a reader that takes ``size`` before the buffers sees
every string it counts.
"""

from __future__ import annotations

import numba
import numpy as np
import pyarrow as pa

from etl_dataflows.planning.hashing import fmix64

#: The hash table holds ``-1`` where no code is.
_NO_CODE = np.int32(-1)
_SEED = np.uint64(0x9E3779B97F4A7C15)
_WORD_PRIME = np.uint64(0xFF51AFD7ED558CCD)


@numba.njit(cache=True, nogil=True, inline="always")
def _word(data: np.ndarray, at: np.int64) -> np.uint64:
    """The eight bytes ``data[at:at + 8]`` as one little-endian word (one load once compiled)."""
    return (
        np.uint64(data[at])
        | (np.uint64(data[at + 1]) << np.uint64(8))
        | (np.uint64(data[at + 2]) << np.uint64(16))
        | (np.uint64(data[at + 3]) << np.uint64(24))
        | (np.uint64(data[at + 4]) << np.uint64(32))
        | (np.uint64(data[at + 5]) << np.uint64(40))
        | (np.uint64(data[at + 6]) << np.uint64(48))
        | (np.uint64(data[at + 7]) << np.uint64(56))
    )


@numba.njit(cache=True, nogil=True, inline="always")
def _hash_bytes(data: np.ndarray, start: np.int64, end: np.int64) -> np.uint64:
    """A 64-bit hash of ``data[start:end]``: eight bytes at a time, each word multiplied into the
    state, the last bytes one at a time, then murmur3's finalizer over the state and the length
    (every input bit moves every output bit)."""
    h = _SEED
    i = start
    while i + 8 <= end:
        h = (h ^ _word(data, i)) * _WORD_PRIME
        h ^= h >> np.uint64(29)
        i += 8
    while i < end:
        h = (h ^ np.uint64(data[i])) * _WORD_PRIME
        i += 1
    return fmix64(h ^ np.uint64(end - start))


@numba.njit(cache=True, nogil=True, inline="always")
def same_bytes(
    a: np.ndarray, a_start: np.int64, a_end: np.int64, b: np.ndarray, b_start: np.int64
) -> bool:
    """Whether ``a[a_start:a_end]`` equals the as many bytes of ``b`` from ``b_start``."""
    i = np.int64(0)
    length = a_end - a_start
    while i + 8 <= length:
        if _word(a, a_start + i) != _word(b, b_start + i):
            return False
        i += 8
    while i < length:
        if a[a_start + i] != b[b_start + i]:
            return False
        i += 1
    return True


@numba.njit(cache=True, nogil=True)
def _intern(
    offsets: np.ndarray,
    data: np.ndarray,
    valid: np.ndarray,
    insert: bool,
    pool_data: np.ndarray,
    pool_offsets: np.ndarray,
    pool_hashes: np.ndarray,
    table: np.ndarray,
    size: np.int64,
    used: np.int64,
    first: np.int64,
    out: np.ndarray,
) -> tuple[np.int64, np.int64, np.int64]:
    """The code of every string ``data[offsets[i]:offsets[i + 1]]`` from row ``first`` on
    (``-1`` where not ``valid``, and where not known when not ``insert``); with ``insert``, a
    new string is appended to the pool's buffers under the next code. Returns the pool's new
    size, the bytes it uses and the row it stopped at: the end, or a new string the buffers
    have no room for (or that would fill the table past half), to be continued once grown."""
    mask = np.int64(table.shape[0] - 1)
    for i in range(first, valid.shape[0]):
        if not valid[i]:
            out[i] = -1
            continue
        start = offsets[i]
        end = offsets[i + 1]
        length = end - start
        h = _hash_bytes(data, start, end)
        pos = np.int64(h & np.uint64(mask))
        while True:
            code = table[pos]
            if code == -1:
                if not insert:
                    out[i] = -1
                    break
                if (
                    used + length > pool_data.shape[0]
                    or size + 2 > pool_offsets.shape[0]
                    or size + 1 > pool_hashes.shape[0]
                    or (size + 1) * 2 > table.shape[0]
                ):
                    return size, used, np.int64(i)
                pool_data[used : used + length] = data[start:end]
                used += length
                pool_hashes[size] = h
                pool_offsets[size + 1] = used
                table[pos] = size
                out[i] = size
                size += 1
                break
            if (
                pool_hashes[code] == h
                and pool_offsets[code + 1] - pool_offsets[code] == length
                and same_bytes(data, start, end, pool_data, pool_offsets[code])
            ):
                out[i] = code
                break
            pos = (pos + 1) & mask
    return size, used, np.int64(valid.shape[0])


@numba.njit(cache=True, nogil=True)
def _place(hashes: np.ndarray, size: np.int64, table: np.ndarray) -> None:
    """Put codes ``0 .. size - 1`` into the empty ``table`` by their stored hashes."""
    mask = np.int64(table.shape[0] - 1)
    for code in range(size):
        pos = np.int64(hashes[code] & np.uint64(mask))
        while table[pos] != -1:
            pos = (pos + 1) & mask
        table[pos] = code


_ONE_VALID = np.ones(1, dtype=np.bool_)
#: Codes of strings looked up one at a time kept in a dictionary (cleared when full).
SINGLE_CODES_KEPT = 65_536


def _table_size(strings: int) -> int:
    """Positions of a table holding ``strings`` at most half full (a power of two, >= 1024)."""
    return 1 << max(10, int(np.ceil(np.log2(max(strings, 1) * 2))))


def _string_buffers(array: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The int64 offsets (``len + 1``, relative to the data), the UTF-8 bytes and the validity of
    a string array (any Arrow string or dictionary type; other types are cast to string)."""
    if pa.types.is_dictionary(array.type) or not (
        pa.types.is_string(array.type) or pa.types.is_large_string(array.type)
    ):
        array = array.cast(pa.string())
    n = len(array)
    _, offset_buffer, data_buffer = array.buffers()
    width = np.int64 if pa.types.is_large_string(array.type) else np.int32
    offsets = np.frombuffer(offset_buffer, dtype=width, count=array.offset + n + 1)
    offsets = offsets[array.offset :].astype(np.int64)
    data = (
        np.frombuffer(data_buffer, dtype=np.uint8)
        if data_buffer is not None
        else np.zeros(0, dtype=np.uint8)
    )
    if array.null_count:
        valid = np.asarray(array.is_valid().to_numpy(zero_copy_only=False), dtype=np.bool_)
    else:
        valid = np.ones(n, dtype=np.bool_)
    return offsets, data, valid


class StrKeyIndex:
    """Maps string keys to slots (see the module docstring): the slot of a string is its
    *code*, the order in which it was first seen. The local executor's string pool is the same
    mapping (:class:`~etl_dataflows.executors.local.strings.StringPool`)."""

    def __init__(self) -> None:
        #: Codes (slots) handed out.
        self.size = 0
        self._used = 0  # bytes of self._data in use
        self._data = np.zeros(1 << 12, dtype=np.uint8)
        self._offsets = np.zeros(1 << 10, dtype=np.int64)  # code c is _data[o[c]:o[c + 1]]
        self._hashes = np.zeros(1 << 10, dtype=np.uint64)
        self._table = np.full(_table_size(0), _NO_CODE, dtype=np.int32)
        self._single: dict[str, int] = {}  # see _one

    # -- lookups --------------------------------------------------------------------------------

    def codes(self, array: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
        """Codes and validity of a string array, new strings coded in order of first
        appearance; a null gets code 0 and validity False."""
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
        offsets, data, valid = _string_buffers(array)
        out = self._run(offsets, data, valid, insert=True)
        return np.maximum(out, 0), valid

    def slots(self, keys: pa.Array | np.ndarray, valid: np.ndarray) -> np.ndarray:
        """The slot of every key (new keys get new slots); -1 where ``valid`` is False."""
        if not isinstance(keys, pa.Array | pa.ChunkedArray):
            keys = pa.array(keys, pa.string())
        if len(keys) == 1 and keys.null_count == 0:  # one key (an interpreted step's): _one
            code = self.code(keys[0].as_py())
            return np.array([code if valid[0] else -1], dtype=np.int64)
        codes, present = self.codes(keys)
        return np.where(valid & present, codes, -1).astype(np.int64)

    def find(self, array: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """The code of every string, -1 for a null or a string never seen (gives none)."""
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
        offsets, data, valid = _string_buffers(array)
        return self._run(offsets, data, valid, insert=False)

    def code(self, value: str) -> int:
        """The code of ``value`` (a new one for a string never seen)."""
        return self._one(value, insert=True)

    def find_one(self, value: str) -> int:
        """The code of ``value``, -1 for a string never seen (gives none)."""
        return self._one(value, insert=False)

    # -- the strings ----------------------------------------------------------------------------

    def string(self, code: int) -> str:
        """The string of ``code``."""
        if not 0 <= code < self.size:
            raise IndexError(f"no string has code {code} (codes 0..{self.size - 1})")
        start, end = self._offsets[code], self._offsets[code + 1]
        return bytes(self._data[start:end]).decode("utf-8")

    def arrow(self) -> pa.Array:
        """Every string, in code order, as a ``large_string`` array over the index's own
        buffers (no copy)."""
        size = self.size  # (before the buffers: see the module docstring)
        offsets, data = self._offsets, self._data
        return pa.LargeStringArray.from_buffers(
            size,
            pa.py_buffer(offsets[: size + 1]),
            pa.py_buffer(data[: offsets[size]]),
        )

    @property
    def nbytes(self) -> int:
        """Bytes of the index's arrays (capacity included)."""
        arrays = (self._data, self._offsets, self._hashes, self._table)
        return sum(int(a.nbytes) for a in arrays)

    # -- internals ------------------------------------------------------------------------------

    def _run(
        self, offsets: np.ndarray, data: np.ndarray, valid: np.ndarray, *, insert: bool
    ) -> np.ndarray:
        n = len(valid)
        out = np.empty(n, dtype=np.int64)
        if n == 0:
            return out
        row = 0
        while True:
            size, used, stopped = _intern(
                offsets,
                data,
                valid,
                insert,
                self._data,
                self._offsets,
                self._hashes,
                self._table,
                np.int64(self.size),
                np.int64(self._used),
                np.int64(row),
                out,
            )
            self._used = int(used)
            self.size = int(size)
            row = int(stopped)
            if row >= n:
                return out
            self._reserve(1, int(offsets[row + 1] - offsets[row]))

    def _one(self, value: str, *, insert: bool) -> int:
        """:meth:`code` or :meth:`find_one`: the kernel on the string's bytes (no Arrow array),
        behind a dictionary of the codes found so (a code never changes; a call into the
        kernel costs microseconds, and interpreted steps look strings up one at a time)."""
        code = self._single.get(value)
        if code is not None:
            return code
        data = np.frombuffer(value.encode("utf-8"), dtype=np.uint8)
        offsets = np.array([0, len(data)], dtype=np.int64)
        code = int(self._run(offsets, data, _ONE_VALID, insert=insert)[0])
        if code >= 0:
            if len(self._single) >= SINGLE_CODES_KEPT:
                self._single.clear()
            self._single[value] = code
        return code

    def _reserve(self, strings: int, nbytes: int) -> None:
        """Room for ``strings`` more strings of ``nbytes`` bytes in all (the kernel asks when it
        meets a new string it has no room for): each buffer at least doubles when it grows, and
        the table is rebuilt from the stored hashes while it would be more than half full."""
        needed = self.size + strings
        if needed + 1 > self._offsets.shape[0]:
            self._offsets = _grown(self._offsets, needed + 1, self.size + 1)
            self._hashes = _grown(self._hashes, needed, self.size)
        if self._used + nbytes > self._data.shape[0]:
            self._data = _grown(self._data, self._used + nbytes, self._used)
        if needed * 2 > self._table.shape[0]:
            if needed >= 2**31:
                raise ValueError("a string key index of more than 2**31 strings")
            table = np.full(_table_size(needed), _NO_CODE, dtype=np.int32)
            _place(self._hashes, np.int64(self.size), table)
            self._table = table


def _grown(array: np.ndarray, needed: int, kept: int) -> np.ndarray:
    """A copy of ``array`` with room for ``needed`` entries (at least twice as many), its first
    ``kept`` entries copied."""
    bigger = np.zeros(max(needed, 2 * array.shape[0]), dtype=array.dtype)
    bigger[:kept] = array[:kept]
    return bigger
