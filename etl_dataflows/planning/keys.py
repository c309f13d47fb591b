"""Dense slots for state keys.

Executors that keep state in arrays give every key a *slot* (a row of the state arrays). A
:class:`KeyIndex` maps keys to slots and assigns new slots to keys it has not seen; slots never
move, so a slot found once stays valid for the life of the executor.

``int64`` keys use an open-addressing hash table in numpy arrays probed by a compiled loop (tens of
nanoseconds per key, whatever the keys' structure: they are placed by a mixing hash); while the keys
are dense (sequential IDs, or IDs within a range at most twice their number) an array indexed by
``key - lowest key`` finds their slots too, a nanosecond or two per key with no hashing; ``string``
keys are coded by :class:`~etl_dataflows.planning.string_keys.StrKeyIndex` (a compiled loop over
the bytes of the Arrow column: no Python object per string); keys of several columns
(:class:`TupleKeyIndex`) become rows of int64 parts (string parts coded so) in a table probed by
a compiled loop too.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from etl_dataflows.planning.hashing import fmix64
from etl_dataflows.planning.string_keys import StrKeyIndex

_EMPTY = np.int64(-1)


@numba.njit(cache=True, nogil=True, inline="always")
def _home(key: np.int64, mask: np.int64) -> np.int64:
    """The first position of ``key`` in a table of ``mask + 1`` entries: the low bits of
    murmur3's 64-bit finalizer (fmix64) of the key. Every bit of the key moves every bit of the
    hash, so keys that differ only in their high bits (multiples of 2**40, say) spread as well as
    random keys; a plain multiply-and-shift would send them all to one position."""
    return np.int64(fmix64(np.uint64(key)) & np.uint64(mask))


@numba.njit(cache=True, nogil=True)
def _probe(
    entries: np.ndarray,
    queries: np.ndarray,
    valid: np.ndarray,
    next_slot: int,
    out: np.ndarray,
) -> tuple[int, int]:
    """Slots of ``queries`` (inserting new keys); nulls get -1. ``entries`` is the table: row
    ``pos`` holds a key and its slot (-1: empty), side by side so that a probe reads one cache
    line. Returns the next free slot and the number of collisions (positions looked at beyond
    each key's first)."""

    mask = np.int64(entries.shape[0] - 1)
    collisions = 0
    for i in range(queries.shape[0]):
        if not valid[i]:
            out[i] = -1
            continue
        key = queries[i]
        pos = _home(key, mask)
        while True:
            slot = entries[pos, 1]
            if slot == -1:
                entries[pos, 0] = key
                entries[pos, 1] = next_slot
                out[i] = next_slot
                next_slot += 1
                break
            if entries[pos, 0] == key:
                out[i] = slot
                break
            pos = (pos + 1) & mask
            collisions += 1
    return next_slot, collisions


@numba.njit(cache=True, nogil=True)
def _find(entries: np.ndarray, queries: np.ndarray, out: np.ndarray) -> int:
    """Slots of ``queries`` without inserting; -1 where absent. Returns the collisions."""
    mask = np.int64(entries.shape[0] - 1)
    collisions = 0
    for i in range(queries.shape[0]):
        key = queries[i]
        pos = _home(key, mask)
        while True:
            slot = entries[pos, 1]
            if slot == -1:
                out[i] = -1
                break
            if entries[pos, 0] == key:
                out[i] = slot
                break
            pos = (pos + 1) & mask
            collisions += 1
    return collisions


@numba.njit(cache=True, nogil=True)
def _direct_slots(
    direct: np.ndarray, low: int, queries: np.ndarray, valid: np.ndarray, out: np.ndarray
) -> int:
    """Slots of ``queries`` by direct addressing (``direct[key - low]``); nulls get -1. Returns
    how many valid keys were not found (outside the range, or no slot: new keys)."""
    high = low + np.int64(direct.shape[0] - 1)
    missing = 0
    for i in range(queries.shape[0]):
        if not valid[i]:
            out[i] = -1
            continue
        key = queries[i]
        if key < low or key > high:
            out[i] = -1
            missing += 1
            continue
        slot = direct[key - low]
        out[i] = slot
        if slot < 0:
            missing += 1
    return missing


#: Direct addressing (see the module docstring) is kept while every key lies within a range of at
#: most ``_DIRECT_SPAN`` times the keys plus ``_DIRECT_MIN``.
_DIRECT_SPAN = 2
_DIRECT_MIN = 1024
_INT64_MAX = 2**63 - 1
_INT64_MIN = -(2**63)


def _empty_entries(size: int) -> np.ndarray:
    """A hash table of ``size`` positions, all empty (see :func:`_probe`)."""
    entries = np.zeros((size, 2), dtype=np.int64)
    entries[:, 1] = _EMPTY
    return entries


@numba.njit(cache=True, nogil=True)
def _direct_insert(
    direct: np.ndarray,
    low: int,
    queries: np.ndarray,
    valid: np.ndarray,
    start: int,
    next_slot: int,
    out: np.ndarray,
) -> tuple[int, int]:
    """Slots of ``queries[start:]`` by direct addressing, new keys inside the array's range
    getting the next slots; nulls get -1. Stops at the first valid key outside the range.
    Returns the next free slot and where it stopped (``len(queries)``: at the end)."""
    high = low + np.int64(direct.shape[0] - 1)
    for i in range(start, queries.shape[0]):
        if not valid[i]:
            out[i] = -1
            continue
        key = queries[i]
        if key < low or key > high:
            return next_slot, i
        slot = direct[key - low]
        if slot < 0:
            slot = next_slot
            direct[key - low] = slot
            next_slot += 1
        out[i] = slot
    return next_slot, queries.shape[0]


class IntKeyIndex:
    """Maps int64 keys to slots (see the module docstring): open addressing with linear probing
    in a table at most half full, keys placed by a mixing hash (:func:`_home`), so a lookup costs
    O(1) expected probes whatever the keys' structure.

    :attr:`collisions` counts the positions looked at beyond each key's first, over every lookup
    and insertion so far (rehashing included): the measure of how well the keys spread (about
    half a collision per key for random keys at this load; a hash that maps structured keys to
    a few positions makes it grow with the number of keys).

    While the keys are dense (every key within a range of at most ``_DIRECT_SPAN`` times their
    number plus ``_DIRECT_MIN``) the direct-addressed array (the module docstring) is the index
    alone: lookups and new keys go through it, without hashing or collisions, and the hash table
    is dropped (16 bytes per position, 32-64 per key: 0.5 GB for TPC-DI's 13 M trades at SF 100;
    the array takes 8-16 per key). A key that leaves the range widens the array (amortized
    doubling, within the limit) or, when the keys are no longer dense, puts them back into a
    hash table, which then serves until they are dense again."""

    def __init__(self, capacity: int = 1024) -> None:
        #: the hash table (see :func:`_probe`); None while :attr:`_direct` is the index
        self._entries: np.ndarray | None = _empty_entries(_table_size(capacity))
        self.size = 0  # slots handed out
        self.collisions = 0
        self._low = 0  # the least and greatest key seen (when size > 0)
        self._high = 0
        #: ``_direct[k - _direct_low]`` is key k's slot or -1; None while the keys are sparse.
        self._direct: np.ndarray | None = None
        self._direct_low = 0

    @property
    def direct(self) -> bool:
        """Whether lookups of known keys go by direct addressing (the keys are dense)."""
        return self._direct is not None

    @property
    def nbytes(self) -> int:
        """Bytes of the index's arrays."""
        return sum(a.nbytes for a in (self._entries, self._direct) if a is not None)

    def _limit(self, keys: int) -> int:
        """The widest key range direct addressing keeps for ``keys`` keys."""
        return _DIRECT_SPAN * keys + _DIRECT_MIN

    def _place_direct(self, low: int, high: int, limit: int) -> None:
        """A direct array covering ``[low, high]`` with room to grow both ways (amortized
        doubling: keys that keep arriving below the range, or above it, rebuild it O(log)
        times), holding the slots of the hash table or of the array before it."""
        span = high - low + 1
        old = self._direct
        length = max(min(max(2 * span, 2 * len(old) if old is not None else 0), limit), span)
        start = max(low - (length - span) // 2, _INT64_MIN)
        length = min(length, _INT64_MAX - start + 1)
        direct = np.full(length, _EMPTY, dtype=np.int64)
        if old is not None:
            used = np.flatnonzero(old != _EMPTY)
            direct[used + (self._direct_low - start)] = old[used]
        else:
            assert self._entries is not None
            used_rows = self._entries[:, 1] != _EMPTY
            direct[self._entries[used_rows, 0] - start] = self._entries[used_rows, 1]
        self._direct, self._direct_low = direct, start
        self._entries = None

    def _to_hash(self) -> None:
        """Put the keys of the direct array into a hash table, which becomes the index."""
        direct = self._direct
        assert direct is not None
        used = np.flatnonzero(direct != _EMPTY)
        self._hash(used.astype(np.int64) + np.int64(self._direct_low), direct[used], self.size)
        self._direct = None

    def _hash(self, keys: np.ndarray, slots: np.ndarray, keys_held: int) -> None:
        """A new hash table, at most half full for ``keys_held`` keys, holding each of ``keys``
        at its slot (``slots``: the handed-out slots 0 .. size - 1, in any order)."""
        order = np.argsort(slots, kind="stable")  # probed in slot order, they get those slots
        self._entries = _empty_entries(_table_size(keys_held))
        out = np.empty(len(keys), dtype=np.int64)
        _, collisions = _probe(
            self._entries, np.ascontiguousarray(keys[order]), np.ones(len(keys), bool), 0, out
        )
        self.collisions += int(collisions)

    def _seen(self, keys: np.ndarray, valid: np.ndarray, first: bool) -> None:
        """Fold the valid ``keys`` (all in the index now) into the least and greatest key."""
        if not valid.any():
            return
        low = int(np.min(keys, where=valid, initial=_INT64_MAX))
        high = int(np.max(keys, where=valid, initial=_INT64_MIN))
        if not first:
            low, high = min(low, self._low), max(high, self._high)
        self._low, self._high = low, high

    def _reserve(self, extra: int) -> None:
        assert self._entries is not None
        if (self.size + extra) * 2 <= self._entries.shape[0]:
            return
        used = self._entries[self._entries[:, 1] != _EMPTY]
        self._hash(used[:, 0], used[:, 1], self.size + extra)

    def slots(self, keys: np.ndarray, valid: np.ndarray) -> np.ndarray:
        """The slot of every key, assigning new slots to new keys; -1 where ``valid`` is False."""
        keys = np.ascontiguousarray(keys, dtype=np.int64)
        valid = np.ascontiguousarray(valid, dtype=np.bool_)
        out = np.empty(len(keys), dtype=np.int64)
        before = self.size
        if self._direct is not None:
            self._slots_direct(keys, valid, out)
        else:
            self._probe_hash(keys, valid, 0, out)
        if self.size > before:
            self._seen(keys, valid, before == 0)
            fits = self._high - self._low + 1 <= self._limit(self.size)
            if self._direct is None and fits:
                self._place_direct(self._low, self._high, self._limit(self.size))
            elif self._direct is not None and not fits:
                self._to_hash()
        return out

    def _probe_hash(self, keys: np.ndarray, valid: np.ndarray, start: int, out: np.ndarray) -> None:
        """Slots of ``keys[start:]`` into ``out[start:]`` through the hash table."""
        self._reserve(len(keys) - start)
        assert self._entries is not None
        part = np.empty(len(keys) - start, dtype=np.int64)
        size, collisions = _probe(self._entries, keys[start:], valid[start:], self.size, part)
        out[start:] = part
        self.size = int(size)
        self.collisions += int(collisions)

    def _slots_direct(self, keys: np.ndarray, valid: np.ndarray, out: np.ndarray) -> None:
        """Slots of ``keys`` by direct addressing, widening the array for keys outside it (or
        going over to the hash table when even the widest array allowed could not hold them)."""
        start = 0
        while True:
            assert self._direct is not None
            size, stop = _direct_insert(
                self._direct, self._direct_low, keys, valid, start, self.size, out
            )
            self.size = int(size)
            if stop == len(keys):
                return
            rest = int(np.count_nonzero(valid[stop:]))
            # the keys held before the batch, the batch's so far and the rest of it
            low = min(int(np.min(keys, where=valid, initial=_INT64_MAX)), self._low)
            high = max(int(np.max(keys, where=valid, initial=_INT64_MIN)), self._high)
            # at most this many keys after the batch: the array may be too wide for the keys
            # the batch really adds, which the check after it corrects
            limit = self._limit(self.size + rest)
            if high - low + 1 > limit:
                self._to_hash()
                self._probe_hash(keys, valid, stop, out)
                return
            self._place_direct(low, high, limit)
            start = stop

    def find(self, keys: np.ndarray) -> np.ndarray:
        """The slot of every key, -1 for keys never seen."""
        out = np.empty(len(keys), dtype=np.int64)
        keys = np.ascontiguousarray(keys, dtype=np.int64)
        if self._direct is not None:  # it holds every key: a miss is an absent key
            _direct_slots(self._direct, self._direct_low, keys, np.ones(len(keys), np.bool_), out)
            return out
        assert self._entries is not None
        collisions = _find(self._entries, keys, out)
        self.collisions += int(collisions)
        return out


@numba.njit(cache=True, nogil=True, inline="always")
def _row_home(keys: np.ndarray, row: int, mask: np.int64) -> np.int64:
    """The first position of the key in row ``row`` of ``keys`` (one int64 per part): each part
    folded into the hash through murmur3's 64-bit finalizer, so every bit of every part moves
    every bit of the position."""
    h = np.uint64(0x9E3779B97F4A7C15)
    for c in range(keys.shape[1]):
        h = fmix64(h ^ np.uint64(keys[row, c]))
    return np.int64(h & np.uint64(mask))


@numba.njit(cache=True, nogil=True)
def _probe_rows(
    positions: np.ndarray,
    keys: np.ndarray,
    queries: np.ndarray,
    valid: np.ndarray,
    next_slot: int,
    out: np.ndarray,
) -> tuple[int, int]:
    """:func:`_probe` for keys of several int64 parts (a row of ``queries`` per key). The table
    ``positions`` holds slots only (-1: empty); the key of slot ``s`` is row ``s`` of ``keys``
    (dense, in slot order), where a new key is written. Returns the next free slot and the
    collisions."""
    mask = np.int64(positions.shape[0] - 1)
    width = queries.shape[1]
    collisions = 0
    for i in range(queries.shape[0]):
        if not valid[i]:
            out[i] = -1
            continue
        pos = _row_home(queries, i, mask)
        while True:
            slot = np.int64(positions[pos])
            if slot == -1:
                for c in range(width):
                    keys[next_slot, c] = queries[i, c]
                positions[pos] = next_slot
                out[i] = next_slot
                next_slot += 1
                break
            same = True
            for c in range(width):
                if keys[slot, c] != queries[i, c]:
                    same = False
                    break
            if same:
                out[i] = slot
                break
            pos = (pos + 1) & mask
            collisions += 1
    return next_slot, collisions


@numba.njit(cache=True, nogil=True)
def _place_rows(positions: np.ndarray, keys: np.ndarray, count: int) -> int:
    """Place slots ``0 .. count - 1`` (distinct keys, rows of ``keys``) in the empty table
    ``positions``; the collisions."""
    mask = np.int64(positions.shape[0] - 1)
    collisions = 0
    for slot in range(count):
        pos = _row_home(keys, slot, mask)
        while positions[pos] != -1:
            pos = (pos + 1) & mask
            collisions += 1
        positions[pos] = slot
    return collisions


class TupleKeyIndex:
    """Maps keys of several columns (``int64``, or any other type through a dictionary of its
    values) to slots: each key becomes a row of int64 parts (an int64 column's value, another
    column's code, and a mask of the parts that are null) placed in an open-addressing table by
    a compiled loop, like :class:`IntKeyIndex` (a dictionary of Python tuples cost ~2.4 us per
    key: TPC-DI's 1.8 M watches took 4.3 s to load at SF 10). New keys take the next slots in
    the order they first appear.

    The key rows are kept once, dense in slot order (growing by a quarter); the hash table, at
    most half full, holds only int32 slots. Keeping the rows in the table itself cost 32 bytes
    per position, and a table just doubled is a quarter full: TPC-DI's watches at SF 100 held
    2.0 GB so; dense rows take ``8 * (parts + 1)`` bytes per key plus 8-16 per key of table."""

    def __init__(self, kinds: list[str], capacity: int = 1024) -> None:
        if len(kinds) > 62:
            raise ValueError("a key of more than 62 columns")
        self.kinds = list(kinds)
        self._codes: list[StrKeyIndex | None] = [
            None if kind == "int64" else StrKeyIndex() for kind in kinds
        ]
        width = len(kinds) + 1  # the parts and the null mask
        self._keys = np.zeros((max(capacity, 16), width), dtype=np.int64)
        self._positions = np.full(_table_size(capacity), -1, dtype=np.int32)
        self.size = 0  # slots handed out
        self.collisions = 0

    def _rows(self, parts: list[Any], n: int) -> np.ndarray:
        """The key rows of ``parts`` (one array per key column, numpy or Arrow)."""
        if len(parts) != len(self.kinds):
            raise ValueError(f"a key of {len(parts)} columns for an index of {len(self.kinds)}")
        rows = np.zeros((n, len(self.kinds) + 1), dtype=np.int64)
        nulls = np.zeros(n, dtype=np.int64)
        for c, (part, codes) in enumerate(zip(parts, self._codes, strict=True)):
            null: np.ndarray | None = None  # None: no nulls
            if codes is None:
                if isinstance(part, pa.Array | pa.ChunkedArray):
                    if part.null_count:
                        null = np.asarray(part.is_null().to_numpy(zero_copy_only=False), dtype=bool)
                        part = pc.fill_null(part, 0)
                    values = np.asarray(part.to_numpy(zero_copy_only=False), dtype=np.int64)
                else:
                    values = np.asarray(part, dtype=np.int64)
            else:
                array = part if isinstance(part, pa.Array | pa.ChunkedArray) else pa.array(part)
                if isinstance(array, pa.ChunkedArray):
                    array = array.combine_chunks()
                if pa.types.is_dictionary(array.type):
                    values, present = _dictionary_codes(codes, array)
                else:
                    values, present = codes.codes(array)
                if not present.all():
                    null = ~present
            if null is None:
                rows[:, c] = values
            else:
                rows[:, c] = np.where(null, 0, values)
                nulls |= null.astype(np.int64) << np.int64(c)
        rows[:, -1] = nulls
        return rows

    @property
    def nbytes(self) -> int:
        """Bytes of the index's arrays (the string columns' dictionaries not counted)."""
        return int(self._keys.nbytes + self._positions.nbytes)

    def _reserve(self, extra: int) -> None:
        """Room for ``extra`` more keys: the dense rows grow by a quarter at least and keep an
        eighth of room beyond what is needed (an index filled from a state image takes the
        next batches' keys without a copy of every row), the table doubles until it is at
        most half full (and is rebuilt from the rows)."""
        needed = self.size + extra
        if needed > self._keys.shape[0]:
            grown = max(needed + needed // 8, self._keys.shape[0] + self._keys.shape[0] // 4)
            keys = np.zeros((grown, self._keys.shape[1]), dtype=np.int64)
            keys[: self.size] = self._keys[: self.size]
            self._keys = keys
        if needed * 2 > self._positions.shape[0]:
            if needed >= 2**31:
                raise ValueError("a key index of more than 2**31 keys")
            self._positions = np.full(_table_size(needed), -1, dtype=np.int32)
            self.collisions += int(_place_rows(self._positions, self._keys, self.size))

    def slots(self, parts: list[Any], valid: np.ndarray) -> np.ndarray:
        """The slot of every row's key, assigning new slots to new keys; -1 where ``valid`` is
        False."""
        n = len(valid)
        rows = self._rows(parts, n)
        self._reserve(n)
        out = np.empty(n, dtype=np.int64)
        size, collisions = _probe_rows(
            self._positions,
            self._keys,
            rows,
            np.ascontiguousarray(valid, dtype=bool),
            self.size,
            out,
        )
        self.size = int(size)
        self.collisions += int(collisions)
        return out


def _dictionary_codes(
    codes: StrKeyIndex, array: pa.DictionaryArray
) -> tuple[np.ndarray, np.ndarray]:
    """Codes and validity of a dictionary array's rows: its dictionary coded (each distinct value
    hashed once, not once per row: TPC-DI's 18 M watches name a few thousand symbols at SF 100),
    then taken by the indices. Every value of the dictionary gets a code, used or not; a code
    here is a part of a key row, never a slot."""
    distinct, distinct_present = codes.codes(array.dictionary)
    indices = array.indices
    present = np.asarray(indices.is_valid().to_numpy(zero_copy_only=False), dtype=np.bool_)
    at = np.asarray(pc.fill_null(indices, 0).to_numpy(zero_copy_only=False), dtype=np.int64)
    if len(distinct) == 0:
        return np.zeros(len(array), dtype=np.int64), np.zeros(len(array), dtype=np.bool_)
    return distinct[at], present & distinct_present[at]


def _table_size(keys: int) -> int:
    """Positions of a hash table holding ``keys`` at most half full (a power of two, >= 1024)."""
    return 1 << max(10, int(np.ceil(np.log2(max(keys, 1) * 2))))


KeyIndex = IntKeyIndex | StrKeyIndex | TupleKeyIndex
