"""Dense slots for state keys.

Executors that keep state in arrays give every key a *slot* (a row of the state arrays). A
:class:`KeyIndex` maps keys to slots and assigns new slots to keys it has not seen; slots never
move, so a slot found once stays valid for the life of the executor.

``int64`` keys use an open-addressing hash table in numpy arrays probed by a compiled loop (tens of
nanoseconds per key, whatever the keys' structure: they are placed by a mixing hash); ``string``
keys go through Arrow dictionary encoding, so Python touches each distinct key of a batch once;
keys of several columns (:class:`TupleKeyIndex`) are tuples of int64 values (strings as codes)
in a hash table of the same kind.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_EMPTY = np.int64(-1)


@numba.njit(cache=True, nogil=True, inline="always")
def _home(key: np.int64, mask: np.int64) -> np.int64:
    """The first position of ``key`` in a table of ``mask + 1`` entries: the low bits of
    murmur3's 64-bit finalizer (fmix64) of the key. Every bit of the key moves every bit of the
    hash, so keys that differ only in their high bits (multiples of 2**40, say) spread as well as
    random keys; a plain multiply-and-shift would send them all to one position."""
    x = np.uint64(key)
    x ^= x >> np.uint64(33)
    x *= np.uint64(0xFF51AFD7ED558CCD)
    x ^= x >> np.uint64(33)
    x *= np.uint64(0xC4CEB9FE1A85EC53)
    x ^= x >> np.uint64(33)
    return np.int64(x & np.uint64(mask))


@numba.njit(cache=True, nogil=True)
def _probe(
    table_keys: np.ndarray,
    table_slots: np.ndarray,
    queries: np.ndarray,
    valid: np.ndarray,
    next_slot: int,
    out: np.ndarray,
) -> tuple[int, int]:
    """Slots of ``queries`` (inserting new keys); nulls get -1. Returns the next free slot and
    the number of collisions (positions looked at beyond each key's first)."""

    mask = np.int64(table_keys.shape[0] - 1)
    collisions = 0
    for i in range(queries.shape[0]):
        if not valid[i]:
            out[i] = -1
            continue
        key = queries[i]
        pos = _home(key, mask)
        while True:
            slot = table_slots[pos]
            if slot == -1:
                table_keys[pos] = key
                table_slots[pos] = next_slot
                out[i] = next_slot
                next_slot += 1
                break
            if table_keys[pos] == key:
                out[i] = slot
                break
            pos = (pos + 1) & mask
            collisions += 1
    return next_slot, collisions


@numba.njit(cache=True, nogil=True)
def _find(
    table_keys: np.ndarray, table_slots: np.ndarray, queries: np.ndarray, out: np.ndarray
) -> int:
    """Slots of ``queries`` without inserting; -1 where absent. Returns the collisions."""
    mask = np.int64(table_keys.shape[0] - 1)
    collisions = 0
    for i in range(queries.shape[0]):
        key = queries[i]
        pos = _home(key, mask)
        while True:
            slot = table_slots[pos]
            if slot == -1:
                out[i] = -1
                break
            if table_keys[pos] == key:
                out[i] = slot
                break
            pos = (pos + 1) & mask
            collisions += 1
    return collisions


class IntKeyIndex:
    """Maps int64 keys to slots (see the module docstring): open addressing with linear probing
    in a table at most half full, keys placed by a mixing hash (:func:`_home`), so a lookup costs
    O(1) expected probes whatever the keys' structure.

    :attr:`collisions` counts the positions looked at beyond each key's first, over every lookup
    and insertion so far (rehashing included): the measure of how well the keys spread (about
    half a collision per key for random keys at this load; a hash that maps structured keys to
    a few positions makes it grow with the number of keys)."""

    def __init__(self, capacity: int = 1024) -> None:
        size = 1 << max(10, int(np.ceil(np.log2(max(capacity, 1) * 2))))
        self._keys = np.zeros(size, dtype=np.int64)
        self._slots = np.full(size, _EMPTY, dtype=np.int64)
        self.size = 0  # slots handed out
        self.collisions = 0

    def _reserve(self, extra: int) -> None:
        needed = (self.size + extra) * 2
        if needed <= self._keys.shape[0]:
            return
        size = self._keys.shape[0]
        while size < needed:
            size *= 2
        used = self._slots != _EMPTY
        keys, slots = self._keys[used], self._slots[used]
        self._keys = np.zeros(size, dtype=np.int64)
        self._slots = np.full(size, _EMPTY, dtype=np.int64)
        order = np.argsort(slots, kind="stable")
        out = np.empty(len(keys), dtype=np.int64)
        _, collisions = _probe(
            self._keys, self._slots, keys[order], np.ones(len(keys), dtype=bool), 0, out
        )
        self.collisions += int(collisions)

    def slots(self, keys: np.ndarray, valid: np.ndarray) -> np.ndarray:
        """The slot of every key, assigning new slots to new keys; -1 where ``valid`` is False."""
        keys = np.ascontiguousarray(keys, dtype=np.int64)
        self._reserve(len(keys))
        out = np.empty(len(keys), dtype=np.int64)
        size, collisions = _probe(
            self._keys, self._slots, keys, np.ascontiguousarray(valid), self.size, out
        )
        self.size = int(size)
        self.collisions += int(collisions)
        return out

    def find(self, keys: np.ndarray) -> np.ndarray:
        """The slot of every key, -1 for keys never seen."""
        out = np.empty(len(keys), dtype=np.int64)
        collisions = _find(self._keys, self._slots, np.ascontiguousarray(keys, dtype=np.int64), out)
        self.collisions += int(collisions)
        return out


class StrKeyIndex:
    """Maps string keys to slots (see the module docstring): the slot of a string is its
    *code*, the order in which it was first seen. The local executor's string pool is the same
    mapping (:class:`~etl_dataflows.executors.local.strings.StringPool`)."""

    def __init__(self) -> None:
        self._code_of: dict[str, int] = {}
        self.strings: list[str] = []  # by code

    @property
    def size(self) -> int:
        """Codes (slots) handed out."""
        return len(self.strings)

    def code(self, value: str) -> int:
        """The code of ``value`` (a new one for a string never seen)."""
        code = self._code_of.get(value)
        if code is None:
            code = len(self.strings)
            self._code_of[value] = code
            self.strings.append(value)
        return code

    def codes(self, array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """Codes and validity of a string array (Arrow dictionary encoding: Python touches each
        distinct string once); a null gets code 0 and validity False."""
        n = len(array)
        if n == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.bool_)
        encoded = pc.dictionary_encode(array)
        uniques: list[Any] = encoded.dictionary.to_pylist()
        mapped = np.fromiter((self.code(s) for s in uniques), dtype=np.int64, count=len(uniques))
        valid = np.asarray(encoded.indices.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        indices = encoded.indices.fill_null(0).to_numpy(zero_copy_only=False)
        codes = mapped[indices] if len(mapped) else np.zeros(n, dtype=np.int64)
        return np.where(valid, codes, 0).astype(np.int64), valid

    def slots(self, keys: pa.Array | np.ndarray, valid: np.ndarray) -> np.ndarray:
        array = keys if isinstance(keys, pa.Array) else pa.array(keys, type=pa.string())
        codes, present = self.codes(array)
        return np.where(valid & present, codes, -1).astype(np.int64)


@numba.njit(cache=True, nogil=True, inline="always")
def _row_home(rows: np.ndarray, i: int, mask: np.int64) -> np.int64:
    """The first position of row ``i``'s tuple of int64 values (every value mixed in)."""
    x = np.uint64(0x9E3779B97F4A7C15)
    for j in range(rows.shape[1]):
        x ^= np.uint64(rows[i, j]) + np.uint64(0x9E3779B97F4A7C15) + (x << np.uint64(6))
        x ^= x >> np.uint64(33)
        x *= np.uint64(0xFF51AFD7ED558CCD)
        x ^= x >> np.uint64(33)
        x *= np.uint64(0xC4CEB9FE1A85EC53)
        x ^= x >> np.uint64(33)
    return np.int64(x & np.uint64(mask))


@numba.njit(cache=True, nogil=True)
def _probe_rows(
    table: np.ndarray,
    slot_rows: np.ndarray,
    rows: np.ndarray,
    valid: np.ndarray,
    next_slot: int,
    out: np.ndarray,
) -> int:
    """Slots of the tuples ``rows`` (one per row, inserting new ones into ``table``, whose
    entries are slots, and ``slot_rows``, the tuple of each slot); -1 where not ``valid``.
    Returns the next free slot."""
    mask = np.int64(table.shape[0] - 1)
    width = rows.shape[1]
    for i in range(rows.shape[0]):
        if not valid[i]:
            out[i] = -1
            continue
        pos = _row_home(rows, i, mask)
        while True:
            slot = table[pos]
            if slot == -1:
                table[pos] = next_slot
                for j in range(width):
                    slot_rows[next_slot, j] = rows[i, j]
                out[i] = next_slot
                next_slot += 1
                break
            same = True
            for j in range(width):
                if slot_rows[slot, j] != rows[i, j]:
                    same = False
                    break
            if same:
                out[i] = slot
                break
            pos = (pos + 1) & mask
    return next_slot


class TupleKeyIndex:
    """Maps keys of several columns (int64 or string each) to slots, in the order keys are first
    seen. A string column's values become codes of the column's own :class:`StrKeyIndex` (each
    distinct string held once; a null is its own key), and the tuples of int64 values live in
    an open-addressing table probed by a compiled loop, as :class:`IntKeyIndex`'s keys do: a few
    dozen bytes per key, where a Python tuple per key cost about 240 (430 MB for the 1.8 M
    watches of TPC-DI's SF 10)."""

    def __init__(self) -> None:
        self._strings: dict[int, StrKeyIndex] = {}  # by column position
        self._slot_rows = np.zeros((0, 0), dtype=np.int64)  # the tuple of each slot
        self._table = np.full(1024, _EMPTY, dtype=np.int64)
        self.size = 0

    def _rows(self, parts: list[Any], rows: np.ndarray) -> np.ndarray:
        """The valid rows' key tuples as int64 values (string columns as codes, null -1)."""
        out = np.empty((len(rows), len(parts)), dtype=np.int64)
        for c, part in enumerate(parts):
            if isinstance(part, pa.ChunkedArray):
                part = part.combine_chunks()
            if isinstance(part, pa.Array) and not pa.types.is_integer(part.type):
                strings = self._strings.setdefault(c, StrKeyIndex())
                codes, present = strings.codes(part.take(pa.array(rows, type=pa.int64())))
                out[:, c] = np.where(present, codes, -1)
            elif isinstance(part, pa.Array):  # a null is the least int64
                filled = part.fill_null(np.iinfo(np.int64).min).cast(pa.int64())
                out[:, c] = np.asarray(filled.to_numpy(zero_copy_only=False))[rows]
            else:
                out[:, c] = np.asarray(part, dtype=np.int64)[rows]
        return out

    def _reserve(self, extra: int, width: int) -> None:
        needed = self.size + extra
        if self._slot_rows.shape[1] != width:
            if self.size:
                raise ValueError(f"keys of {self._slot_rows.shape[1]} columns, not {width}")
            self._slot_rows = np.zeros((max(needed, 1024), width), dtype=np.int64)
        elif needed > self._slot_rows.shape[0]:
            grown = np.zeros((max(needed, 2 * self._slot_rows.shape[0]), width), dtype=np.int64)
            grown[: self.size] = self._slot_rows[: self.size]
            self._slot_rows = grown
        if 2 * needed <= self._table.shape[0]:
            return
        size = self._table.shape[0]
        while size < 2 * needed:
            size *= 2
        # re-insert every tuple in slot order: each gets its own slot back
        self._table = np.full(size, _EMPTY, dtype=np.int64)
        known = self._slot_rows[: self.size].copy()
        out = np.empty(self.size, dtype=np.int64)
        _probe_rows(self._table, self._slot_rows, known, np.ones(self.size, np.bool_), 0, out)

    @property
    def nbytes(self) -> int:
        """Bytes of the tuples and the hash table (not the string columns' distinct strings)."""
        return int(self._slot_rows.nbytes + self._table.nbytes)

    def slots(self, parts: list[Any], valid: np.ndarray) -> np.ndarray:
        """The slot of every row's key tuple, assigning new slots to new keys; -1 where ``valid``
        is False."""
        n = len(valid)
        out = np.full(n, -1, dtype=np.int64)
        rows = np.flatnonzero(valid)
        if not len(rows):
            return out
        values = self._rows(parts, rows)
        self._reserve(len(rows), len(parts))
        found = np.empty(len(rows), dtype=np.int64)
        self.size = int(
            _probe_rows(
                self._table, self._slot_rows, values, np.ones(len(rows), np.bool_), self.size, found
            )
        )
        out[rows] = found
        return out


KeyIndex = IntKeyIndex | StrKeyIndex | TupleKeyIndex
