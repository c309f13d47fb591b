"""State of a window table as arrays: each key's entries a linked list in one pool of entries.

Keys get slots from a key directory (an :class:`~.arrays.ArrayTable` of the key columns alone,
whose slots never move). Per slot, ``head`` and ``tail`` hold the pool positions of the key's
oldest and newest entry (-1: the key has none). The pool holds every entry made: its time
(``at``), its number (``entry``, the table's ``_entry`` sequence), its slot, each value column
with its validity, and ``next``, the key's next entry (-1 after the newest). A kernel changes a
key's entries only as the serial executor does (:meth:`SerialExecutor._window
<etl_dataflows.executors.serial.SerialExecutor._window>`): it drops a prefix (``head`` moves on)
and appends one entry at the tail (the old tail's ``next`` is set). An entry never changes once
made, apart from ``next`` of the tail it was appended to, which an undo clears again.

Change tracking for a batch:

1. :meth:`WindowArrays.begin_batch` notes the pool's size (``made``): entries at or after it are
   the batch's own.
2. Before a step runs, :meth:`WindowArrays.remember` keeps the head and tail of the slots it may
   touch (once per slot per batch).
3. :meth:`WindowArrays.end_batch` compares each remembered slot's list before with its list now,
   which is a suffix of the one before followed by the batch's own entries: the entries of the
   list before ahead of the head now were dropped (deletes), the entries after the old tail (or
   all of them, when every old one was dropped) were added (upserts); both sorted by ``_entry``,
   as the serial executor's deltas are. An entry made and dropped within the batch is in
   neither.
4. :meth:`WindowArrays.restore` (the batch failed) writes the heads and tails back, clears the old
   tails' ``next`` and cuts the pool back to ``made``.

Dropped entries stay in the pool until they outnumber the live ones (and number at least
:data:`COMPACT_MIN_DROPPED`); then the end of a batch copies the live entries to a new pool, each
key's together and in order.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
import pyarrow as pa

from etl_dataflows.batch import TableDelta
from etl_dataflows.executors.local.arrays import ArrayTable, column_to_arrow, kernel_dtype
from etl_dataflows.executors.local.strings import StringPool
from etl_dataflows.state import image_schema, row_id_schema
from etl_dataflows.tables import AT, ENTRY, Table, WindowTable
from etl_dataflows.types import arrow_type
from etl_dataflows.vectorized import column_from_arrow

#: A pool grows by at least this share of its size (amortized O(1) per entry).
POOL_GROWTH_DIVISOR = 4

#: Compact the pool when its dropped entries outnumber the live ones and are at least this many.
COMPACT_MIN_DROPPED = 1 << 16


class WindowArrays:
    """A :class:`~etl_dataflows.tables.WindowTable` held as arrays (see the module docstring)."""

    def __init__(
        self, table: WindowTable, capacity: int = 1024, pool: StringPool | None = None
    ) -> None:
        if not table.key:
            raise ValueError(f"array state needs a key, {table.name!r} has none")
        self.table = table
        #: the key directory: slots and the key columns of each
        self.keys = ArrayTable(Table(table.name, key=table.key, columns=()), capacity, pool)
        self.head = np.full(0, -1, dtype=np.int64)
        self.tail = np.full(0, -1, dtype=np.int64)
        self.entries_at = np.zeros(0, dtype=np.int64)
        self.entries_entry = np.zeros(0, dtype=np.int64)
        self.entries_slot = np.zeros(0, dtype=np.int64)
        self.entries_next = np.zeros(0, dtype=np.int64)
        self.values: dict[str, np.ndarray] = {
            c: np.zeros(0, dtype=kernel_dtype(t)) for c, t in table.columns
        }
        self.valid: dict[str, np.ndarray] = {
            c: np.zeros(0, dtype=np.bool_) for c, _ in table.columns
        }
        #: entries made so far (the pool's used length), as a one-element array kernels advance
        self.used = np.zeros(1, dtype=np.int64)
        #: entries in some key's list
        self.live = 0
        #: the next ``_entry`` number
        self.sequence = 1
        self._sequence_before = 1
        self._made = 0
        self._touched = np.zeros(0, dtype=np.bool_)
        self._remembered: list[np.ndarray] = []
        self._image_schema = image_schema(table)
        self._id_schema = row_id_schema(table)
        self._grow_slots()

    # -- storage --------------------------------------------------------------------------------

    @property
    def capacity(self) -> int:
        """Slots the arrays hold."""
        return self.keys.capacity

    def _grow_slots(self) -> None:
        capacity = self.keys.capacity
        if len(self.head) >= capacity:
            return
        old = len(self.head)
        for name, fill in (("head", -1), ("tail", -1)):
            grown = np.full(capacity, fill, dtype=np.int64)
            grown[:old] = getattr(self, name)
            setattr(self, name, grown)
        touched = np.zeros(capacity, dtype=np.bool_)
        touched[:old] = self._touched
        self._touched = touched

    def reserve(self, entries: int) -> None:
        """Room in the pool for ``entries`` more entries (before a kernel that may make them)."""
        needed = int(self.used[0]) + entries
        size = len(self.entries_at)
        if needed <= size:
            return
        size = max(needed, size + size // POOL_GROWTH_DIVISOR, 1024)
        self._resize_pool(size)

    def _resize_pool(self, size: int) -> None:
        used = int(self.used[0])

        def resized(array: np.ndarray) -> np.ndarray:
            out = np.zeros(size, dtype=array.dtype)
            out[:used] = array[:used]
            return out

        self.entries_at = resized(self.entries_at)
        self.entries_entry = resized(self.entries_entry)
        self.entries_slot = resized(self.entries_slot)
        self.entries_next = resized(self.entries_next)
        for c in self.values:
            self.values[c] = resized(self.values[c])
            self.valid[c] = resized(self.valid[c])

    def slots(self, keys: list[Any], valid: np.ndarray) -> np.ndarray:
        """Slots of ``keys`` (one array per key column; new keys get empty slots); -1 where
        ``valid`` is False."""
        slots = self.keys.slots(keys, valid)
        self._grow_slots()
        return slots

    # -- images ---------------------------------------------------------------------------------

    def load(self, image: pa.Table) -> None:
        """Replace the contents with the entries of an image table."""
        n = image.num_rows
        names = self.table.key_names
        if n > 1:  # each key's entries together and in order (see the module docstring)
            image = image.sort_by([(name, "ascending") for name in (*names, AT, ENTRY)])
        parts: list[Any] = []
        for name, kind in self.table.key:
            column = image.column(name)
            if kind == "int64":
                parts.append(np.asarray(column.to_numpy(), dtype=np.int64))
            else:
                parts.append(column.combine_chunks() if n else pa.array([], type=pa.string()))
        self.used[0] = 0
        self._resize_pool(n + n // POOL_GROWTH_DIVISOR)
        slots = self.slots(parts, np.ones(n, dtype=np.bool_))
        self.head[:] = -1
        self.tail[:] = -1
        self.entries_slot[:n] = slots
        self.entries_at[:n] = np.asarray(image.column(AT).to_numpy(), dtype=np.int64)
        entries = np.asarray(image.column(ENTRY).to_numpy(), dtype=np.int64)
        self.entries_entry[:n] = entries
        for column, kind in self.table.columns:
            values, valid = column_from_arrow(image.column(column), kind)
            self.values[column][:n] = values
            self.valid[column][:n] = valid
        _link_runs(self.entries_slot[:n], self.entries_next, self.head, self.tail)
        self.used[0] = n
        self.live = n
        if n:
            self.sequence = max(self.sequence, int(entries.max()) + 1)

    def image(self) -> pa.Table:
        """Every live entry in image form, sorted by ``_entry``."""
        size = self.keys.index.size
        return self._rows(_walk_lists(self.head[:size], self.entries_next, self.live))

    def _rows(self, positions: np.ndarray) -> pa.Table:
        """Image rows of pool ``positions`` sorted by ``_entry``."""
        positions = positions[np.argsort(self.entries_entry[positions], kind="stable")]
        slots = self.entries_slot[positions]
        arrays: list[pa.Array] = []
        for part, (_, kind) in zip(self.keys.key_parts, self.table.key, strict=True):
            arrays.append(pa.array(part[slots], type=arrow_type(kind)))
        arrays.append(pa.array(self.entries_entry[positions], type=pa.int64()))
        arrays.append(pa.array(self.entries_at[positions], type=pa.int64()))
        for column, kind in self.table.columns:
            values, valid = self.values[column][positions], self.valid[column][positions]
            arrays.append(column_to_arrow(values, valid, kind, None))
        return pa.Table.from_arrays(arrays, schema=self._image_schema)

    # -- change tracking ------------------------------------------------------------------------

    def begin_batch(self) -> None:
        self._remembered = []
        self._made = int(self.used[0])
        self._sequence_before = self.sequence

    def remember(self, slots: np.ndarray) -> None:
        """Keep the head and tail of ``slots`` not yet remembered in this batch."""
        fresh = _first_seen(np.ascontiguousarray(slots, dtype=np.int64), self._touched)
        if len(fresh):
            self._remembered.append(np.stack([fresh, self.head[fresh], self.tail[fresh]]))

    def _take_remembered(self) -> np.ndarray:
        """The remembered (slot, head, tail) columns of this batch, forgetting them."""
        if not self._remembered:
            return np.zeros((3, 0), dtype=np.int64)
        kept = np.concatenate(self._remembered, axis=1)
        self._touched[kept[0]] = False
        self._remembered = []
        return kept

    def end_batch(self) -> TableDelta:
        """The batch's net changes (see the module docstring)."""
        kept = self._take_remembered()
        dropped, added = _changes(
            kept[0], kept[1], kept[2], self.head, self.entries_next, self._made
        )
        self.live += len(added) - len(dropped)
        ids = pa.Table.from_arrays(
            [pa.array(np.sort(self.entries_entry[dropped]), type=pa.int64())],
            schema=self._id_schema,
        )
        delta = TableDelta(self._rows(added), ids)
        if int(self.used[0]) - self.live > max(self.live, COMPACT_MIN_DROPPED):
            self._compact()
        return delta

    def restore(self) -> None:
        """Undo the batch (it failed): heads, tails, the old tails' links, the pool's length
        and the entry sequence as they were when it began."""
        kept = self._take_remembered()
        slots, heads, tails = kept
        self.head[slots] = heads
        self.tail[slots] = tails
        self.entries_next[tails[tails >= 0]] = -1
        self.used[0] = self._made
        self.sequence = self._sequence_before

    def _compact(self) -> None:
        """Copy the live entries to a new pool, each key's together and in order."""
        size = self.keys.index.size
        positions = _walk_lists(self.head[:size], self.entries_next, self.live)
        n = len(positions)
        slots = self.entries_slot[positions]
        self.entries_at = self.entries_at[positions]
        self.entries_entry = self.entries_entry[positions]
        self.entries_slot = slots
        for c in self.values:
            self.values[c] = self.values[c][positions]
            self.valid[c] = self.valid[c][positions]
        self.entries_next = np.full(n, -1, dtype=np.int64)
        self.head[:] = -1
        self.tail[:] = -1
        _link_runs(slots, self.entries_next, self.head, self.tail)
        self.used[0] = n


@numba.njit(cache=True, nogil=True)
def _link_runs(slots: np.ndarray, next_: np.ndarray, head: np.ndarray, tail: np.ndarray) -> None:
    """Link pool positions ``0..len(slots)`` into lists: consecutive positions of one slot (each
    slot's positions are one run, in list order)."""
    n = slots.shape[0]
    for i in range(n):
        s = slots[i]
        if i == 0 or slots[i - 1] != s:
            head[s] = i
        if i + 1 < n and slots[i + 1] == s:
            next_[i] = i + 1
        else:
            next_[i] = -1
            tail[s] = i


@numba.njit(cache=True, nogil=True, inline="always")
def _pushed(out: np.ndarray, count: int, value: np.int64) -> np.ndarray:
    """``out`` (``count`` entries used) with ``value`` as entry ``count``: the same array, or a
    copy twice as long when it is full."""
    if count == out.shape[0]:
        grown = np.empty(2 * count + 1, dtype=out.dtype)
        grown[:count] = out[:count]
        out = grown
    out[count] = value
    return out


@numba.njit(cache=True, nogil=True)
def _walk_lists(head: np.ndarray, next_: np.ndarray, live: int) -> np.ndarray:
    """The pool positions of every list, slot by slot and each in order."""
    out = np.empty(live, dtype=np.int64)
    count = 0
    for s in range(head.shape[0]):
        e = head[s]
        while e >= 0:
            out = _pushed(out, count, e)
            count += 1
            e = next_[e]
    return out[:count]


@numba.njit(cache=True, nogil=True)
def _first_seen(slots: np.ndarray, seen: np.ndarray) -> np.ndarray:
    """The valid slots not yet in ``seen``, each once, marking them in ``seen``."""
    out = np.empty(slots.shape[0], dtype=np.int64)
    count = 0
    for i in range(slots.shape[0]):
        s = slots[i]
        if s >= 0 and not seen[s]:
            seen[s] = True
            out[count] = s
            count += 1
    return out[:count]


@numba.njit(cache=True, nogil=True)
def _changes(
    slots: np.ndarray,
    old_head: np.ndarray,
    old_tail: np.ndarray,
    head: np.ndarray,
    next_: np.ndarray,
    made: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Per slot, the entries of its list before (``old_head`` .. ``old_tail``) that its list now
    lacks, and the entries of its list now made in the batch (positions >= ``made``). A list now
    is a suffix of the list before followed by new entries: when its head is older than
    ``made``, the kept suffix runs from the head to the old tail and the new entries follow the
    old tail; otherwise every old entry was dropped."""
    dropped = np.empty(16, dtype=np.int64)
    added = np.empty(16, dtype=np.int64)
    nd = 0
    na = 0
    for k in range(slots.shape[0]):
        now = head[slots[k]]
        kept_from = now if 0 <= now < made else -1
        e = old_head[k]
        while e >= 0 and e != kept_from:
            dropped = _pushed(dropped, nd, e)
            nd += 1
            if e == old_tail[k]:
                break
            e = next_[e]
        e = next_[old_tail[k]] if kept_from >= 0 else now
        while e >= 0:
            added = _pushed(added, na, e)
            na += 1
            e = next_[e]
    return dropped[:nd], added[:na]
