"""State of a keyed table as dense arrays, one row (slot) per key ever seen.

Columns are numpy arrays with a validity mask each (False = null); ``exists`` says whether the key
currently has a row, ``sk`` holds surrogate keys. Slots come from a
:class:`~etl_dataflows.planning.keys.KeyIndex` (one key column) or a
:class:`~etl_dataflows.planning.keys.TupleKeyIndex` (several) and never move; a deleted row keeps
its slot with ``exists`` False. String value columns hold codes of a
:class:`~etl_dataflows.executors.local.strings.StringPool` (the executor's).

Change tracking for a batch: before a step runs, :meth:`ArrayTable.remember` copies the current
values of the slots the step may touch (once per slot per batch). :meth:`delta` compares them with
the values after the batch (net changes, in the table's image form) and :meth:`restore` writes them
back when a batch fails.

Key order: images and deltas list rows sorted by key. A table with one int64 key column keeps the
*rank* of every slot's key among all keys (its position in key order), so the rows a batch changed
are put in key order by a counting pass over their ranks instead of a comparison sort. Ranks come
free while new keys arrive in ascending order after every key seen (an image loaded, sequential
IDs); otherwise they are rebuilt when the table is small next to the rows being ordered, and the
rows are sorted by key as before when it is not.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from etl_dataflows.batch import TableDelta
from etl_dataflows.executors.local.strings import StringPool
from etl_dataflows.planning.keys import IntKeyIndex, TupleKeyIndex
from etl_dataflows.planning.string_keys import StrKeyIndex
from etl_dataflows.state import image_schema, row_id_schema
from etl_dataflows.tables import Table
from etl_dataflows.types import ColumnType, arrow_type, dictionary_encoded, shared_objects
from etl_dataflows.vectorized import column_from_arrow

_DTYPES: dict[ColumnType, Any] = {
    "int64": np.int64,
    "timestamp": np.int64,
    "date": np.int64,
    "float64": np.float64,
    "bool": np.bool_,
    "string": np.int64,  # codes of the executor's StringPool
}


def kernel_dtype(column_type: ColumnType) -> Any:
    """The numpy dtype a column of ``column_type`` has inside compiled kernels."""
    return _DTYPES[column_type]


def _encoded(part: Any) -> Any:
    """A key column as :meth:`ArrayTable.slots` hands it to a several-column index: an Arrow
    column of strings dictionary-encoded (nulls as null indices), anything else as it is (a
    dictionary column too: the index codes its dictionary's values, used by a row or not, and
    those codes are parts of key rows, never slots)."""
    if not isinstance(part, pa.Array | pa.ChunkedArray) or pa.types.is_integer(part.type):
        return part
    return dictionary_encoded(part)


def _to_arrow(values: np.ndarray, valid: np.ndarray, column_type: ColumnType) -> pa.Array:
    mask = None if valid.all() else ~valid  # (no mask: no validity bitmap to build)
    if column_type in ("timestamp", "date"):
        base = pa.array(values, type=pa.int64(), mask=mask)
        if column_type == "date":
            return base.cast(pa.int32()).cast(pa.date32())
        return base.cast(pa.timestamp("us"))
    return pa.array(values, type=arrow_type(column_type), mask=mask)


def column_to_arrow(
    values: np.ndarray, valid: np.ndarray, kind: ColumnType, pool: StringPool | None
) -> pa.Array:
    """Kernel values of a column as Arrow (string codes decoded through ``pool``)."""
    if kind == "string":
        if pool is None:
            raise ValueError("string codes need the string pool that made them")
        return pool.decode(values, valid)
    return _to_arrow(values, valid, kind)


#: An array table grows by ``capacity // GROWTH_DIVISOR`` slots at least (see ``_grow``).
GROWTH_DIVISOR = 4


class ArrayTable:
    """A :class:`~etl_dataflows.tables.Table` held as arrays (see the module docstring)."""

    def __init__(self, table: Table, capacity: int = 1024, pool: StringPool | None = None) -> None:
        if not table.key:
            raise ValueError(f"array state needs a key, {table.name!r} has none")
        self.table = table
        self.pool = pool if pool is not None else StringPool()
        self.key_name, self.key_type = table.key[0]
        self.index: IntKeyIndex | StrKeyIndex | TupleKeyIndex
        if len(table.key) > 1:
            self.index = TupleKeyIndex([kind for _, kind in table.key], capacity)
        else:
            self.index = IntKeyIndex(capacity) if self.key_type == "int64" else StrKeyIndex()
        self.capacity = 0
        self.key_parts: list[np.ndarray] = [
            np.empty(0, dtype=np.int64 if kind == "int64" else object) for _, kind in table.key
        ]
        self.exists = np.zeros(0, dtype=np.bool_)
        self.sk = np.zeros(0, dtype=np.int64)
        self.values: dict[str, np.ndarray] = {
            c: np.zeros(0, dtype=kernel_dtype(t)) for c, t in table.columns
        }
        self.valid: dict[str, np.ndarray] = {
            c: np.zeros(0, dtype=np.bool_) for c, _ in table.columns
        }
        self.sequence = table.surrogate_start
        self._sequence_before = self.sequence
        self._image_schema = image_schema(table)
        self._id_schema = row_id_schema(table)
        self._no_ids = self._id_schema.empty_table()
        self._before: dict[str, np.ndarray] = {}
        self._remembered = np.zeros(0, dtype=np.bool_)
        self._remembered_slots: list[np.ndarray] = []
        self._before_parts: list[dict[str, np.ndarray]] = []
        #: Key order of the slots (int64 single-column keys, see the module docstring):
        #: ``_rank[s]`` is slot ``s``'s position in key order among slots ``[0, _ranked)``; the
        #: ranks are current when ``_ranked`` equals the index's size.
        self._rank = np.zeros(0, dtype=np.int64)
        self._ranked = 0
        self._last_ranked = 0  # the slot of the greatest ranked key
        self._grow(capacity)

    # -- storage --------------------------------------------------------------------------------

    def _grow(self, needed: int) -> None:
        # By a quarter, not double, and one array at a time: a table loaded from a state image
        # has a quarter's room (``load``), and doubling TPC-DI's 18 M open watches (SF 100)
        # would add 1.35 GB of arrays the updates never fill, with old and new copies of every
        # column alive at once while it ran. Growing by a quarter still copies each slot a
        # bounded number of times (amortized O(1) per key).
        if needed <= self.capacity:
            return
        capacity = max(needed, self.capacity + self.capacity // GROWTH_DIVISOR, 1024)

        def grown(array: np.ndarray) -> np.ndarray:
            # zeros (False, None for objects): np.zeros takes pages the system hands out
            # zeroed on first touch, where np.full wrote every byte of the room first (~2 s of
            # the 18 M watches' load at SF 100, most of it for room the updates never fill)
            out = (
                np.empty(capacity, dtype=object)
                if array.dtype == object
                else np.zeros(capacity, dtype=array.dtype)
            )
            out[: len(array)] = array
            return out

        for i, part in enumerate(self.key_parts):
            self.key_parts[i] = grown(part)
        self.exists = grown(self.exists)
        self.sk = grown(self.sk)
        for c in self.values:
            self.values[c] = grown(self.values[c])
            self.valid[c] = grown(self.valid[c])
        self._remembered = grown(self._remembered)
        self._rank = grown(self._rank)
        self.capacity = capacity

    @property
    def keys(self) -> np.ndarray:
        """The key of every slot (the first key column's, for a table with several)."""
        return self.key_parts[0]

    def slots(
        self, keys: np.ndarray | pa.Array | list[np.ndarray | pa.Array], valid: np.ndarray
    ) -> np.ndarray:
        """Slots of ``keys`` (one array per key column, or one array for a single key column;
        new keys get new, empty slots); -1 where ``valid`` is False."""
        parts = keys if isinstance(keys, list) else [keys]
        before = self.index.size
        if isinstance(self.index, TupleKeyIndex):
            # a string key column dictionary-encoded once: the index codes its distinct
            # values, and new slots' key objects below are taken from the same encoding
            parts = [_encoded(part) for part in parts]
            slots = self.index.slots(parts, valid)
        else:
            slots = self.index.slots(parts[0], valid)
        after = self.index.size
        if after > before:
            self._grow(after)
            fresh = (slots >= before) & (slots >= 0)
            for c, part in enumerate(parts):
                if isinstance(part, pa.Array | pa.ChunkedArray):
                    # a string key's equal values as one object each: at load, TPC-DI's 18 M
                    # open watches (SF 100) name a few thousand symbols
                    part = (
                        np.asarray(part.to_numpy(zero_copy_only=False))
                        if pa.types.is_integer(part.type)
                        else shared_objects(part)
                    )
                self.key_parts[c][slots[fresh]] = part[fresh]
            self._extend_ranks(before, after)
        return slots

    def slot_of(self, key: Any) -> int:
        """The slot of ``key`` (a table with one key column), -1 if it has none; makes none."""
        index = self.index
        if isinstance(index, StrKeyIndex):
            return index.find_one(key)
        if isinstance(index, IntKeyIndex):
            return int(index.find(np.array([key], dtype=np.int64))[0])
        raise ValueError(f"table {self.table.name!r} has several key columns")

    def _ranks_kept(self) -> bool:
        return len(self.key_parts) == 1 and self.key_type == "int64"

    def _extend_ranks(self, before: int, after: int) -> None:
        """Rank new slots ``[before, after)`` if their keys come after every key ranked so far,
        in slot order (new slots are numbered in the order their keys were first seen)."""
        if not self._ranks_kept() or self._ranked != before:
            return
        new = self.key_parts[0][before:after]
        last = self.key_parts[0][self._last_ranked] if before else None
        if (last is None or new[0] > last) and bool(np.all(new[1:] > new[:-1])):
            self._rank[before:after] = np.arange(before, after, dtype=np.int64)
            self._ranked = after
            self._last_ranked = after - 1

    def _ranks(self, rows: int) -> np.ndarray | None:
        """Current ranks of every slot, rebuilt if stale and the table has at most
        ``_RANK_REBUILD`` times ``rows`` keys; None when not kept or not worth rebuilding."""
        size = self.index.size
        if not self._ranks_kept():
            return None
        if self._ranked != size:
            if size > _RANK_REBUILD * max(rows, 1):
                return None
            order = np.argsort(self.key_parts[0][:size], kind="stable")
            self._rank[order] = np.arange(size, dtype=np.int64)
            self._ranked = size
            self._last_ranked = int(order[-1]) if size else 0
        return self._rank[:size]

    def _column_from_arrow(
        self, array: pa.Array | pa.ChunkedArray, kind: ColumnType
    ) -> tuple[np.ndarray, np.ndarray]:
        if kind == "string":
            return self.pool.encode(array)
        return column_from_arrow(array, kind)

    # -- images ---------------------------------------------------------------------------------

    def load(self, image: pa.Table) -> None:
        """Replace the contents with the rows of an image table."""
        n = image.num_rows
        # Room for a quarter more keys from the start: the first batch with a new key would
        # otherwise grow every array of a table loaded without slack (copying and faulting in
        # each column again: ~2 s of TPC-DI's first update at SF 100), see ``_grow``.
        self._grow(n + n // GROWTH_DIVISOR)
        parts: list[Any] = []
        for name, kind in self.table.key:
            key_column = image.column(name)
            if kind == "int64":
                parts.append(np.asarray(key_column.to_numpy(), dtype=np.int64))
            else:
                parts.append(key_column.combine_chunks() if n else pa.array([], type=pa.string()))
        slots = self.slots(parts, np.ones(n, dtype=np.bool_))
        self.exists[slots] = True
        if self.table.surrogate:
            self.sk[slots] = np.asarray(
                image.column(self.table.surrogate).to_numpy(), dtype=np.int64
            )
            if n:
                self.sequence = max(self.sequence, int(self.sk[slots].max()) + 1)
        for column, kind in self.table.columns:
            values, valid = self._column_from_arrow(image.column(column), kind)
            self.values[column][slots] = values
            self.valid[column][slots] = valid

    def _in_key_order(self, slots: np.ndarray) -> tuple[np.ndarray, list[pa.Array]]:
        """``slots`` (distinct) sorted by key (every key column, in declaration order), and
        their key columns as Arrow in that order. A key with a string column is made into Arrow
        once, sorted there and taken in order (a string key column holds Python strings:
        converting them is most of the cost, TPC-DI's daily 500 k prospects at SF 100)."""
        if len(self.key_parts) == 1 and self.key_type == "int64":
            ranks = self._ranks(len(slots)) if len(slots) else None
            if ranks is not None:
                ordered: np.ndarray = slots[order_by_rank(ranks[slots], len(ranks))]
            else:
                ordered = slots[np.argsort(self.key_parts[0][slots], kind="stable")]
            return ordered, [pa.array(self.key_parts[0][ordered], type=pa.int64())]
        keys = [
            pa.array(part[slots], type=arrow_type(kind))
            for part, (_, kind) in zip(self.key_parts, self.table.key, strict=True)
        ]
        if len(keys) == 1:
            order = pc.sort_indices(keys[0])
        else:
            names = [f"k{c}" for c in range(len(keys))]
            order = pc.sort_indices(
                pa.Table.from_arrays(keys, names=names),
                sort_keys=[(name, "ascending") for name in names],
            )
        positions = np.asarray(order.to_numpy(), dtype=np.int64)
        return slots[positions], [key.take(order) for key in keys]

    def image_rows(self, slots: np.ndarray) -> pa.Table:
        """Image rows of ``slots`` sorted by key."""
        slots, arrays = self._in_key_order(slots)
        if self.table.surrogate:
            arrays.append(pa.array(self.sk[slots], type=pa.int64()))
        for column, kind in self.table.columns:
            values, valid = self.values[column][slots], self.valid[column][slots]
            arrays.append(column_to_arrow(values, valid, kind, self.pool))
        return pa.Table.from_arrays(arrays, schema=self._image_schema)

    def image(self) -> pa.Table:
        """The whole table in image form."""
        return self.image_rows(np.flatnonzero(self.exists[: self.index.size]))

    # -- change tracking ------------------------------------------------------------------------

    def begin_batch(self) -> None:
        self._remembered_slots = []
        self._before_parts = []
        self._before = {}
        self._sequence_before = self.sequence

    def remember(self, slots: np.ndarray) -> None:
        """Copy the current values of ``slots`` not yet remembered in this batch."""
        slots = _first_time(np.ascontiguousarray(slots, dtype=np.int64), self._remembered)
        if not len(slots):
            return
        self._remembered_slots.append(slots)
        parts = {"exists": self.exists[slots], "sk": self.sk[slots]}
        for c in self.values:
            parts["v:" + c] = self.values[c][slots]
            parts["m:" + c] = self.valid[c][slots]
        self._before_parts.append(parts)

    def remember_slot(self, slot: int) -> None:
        """:meth:`remember` for one slot (a write from outside the kernels)."""
        if not self._remembered[slot]:
            self.remember(np.array([slot], dtype=np.int64))

    def _all_remembered(self) -> np.ndarray:
        """Every slot remembered in this batch; their remembered values in :attr:`_before`."""
        if not self._remembered_slots:
            return np.zeros(0, dtype=np.int64)
        if len(self._before_parts) == 1:
            self._before = self._before_parts[0]
            return self._remembered_slots[0]
        self._before = {
            name: np.concatenate([parts[name] for parts in self._before_parts])
            for name in self._before_parts[0]
        }
        return np.concatenate(self._remembered_slots)

    def _forget(self, slots: np.ndarray) -> None:
        self._remembered[slots] = False
        self._remembered_slots = []
        self._before_parts = []
        self._before = {}

    def end_batch(self) -> TableDelta:
        """The batch's net changes; forget the remembered values."""
        slots = self._all_remembered()
        if not len(slots):
            self._forget(slots)
            return TableDelta(self.image_rows(slots), self._no_ids)
        before_exists = self._before["exists"]
        after_exists = self.exists[slots]
        changed = before_exists != after_exists
        if self.table.surrogate:
            changed |= after_exists & (self._before["sk"] != self.sk[slots])
        for c in self.values:
            bv, bm = self._before["v:" + c], self._before["m:" + c]
            av, am = self.values[c][slots], self.valid[c][slots]
            changed |= after_exists & ((bm != am) | (am & (bv != av)))
        upserts = slots[changed & after_exists]
        deletes = slots[before_exists & ~after_exists]
        self._forget(slots)
        return TableDelta(self.image_rows(upserts), self._id_rows(deletes))

    def restore(self) -> None:
        """Write back every value remembered in this batch (the batch failed)."""
        slots = self._all_remembered()
        if len(slots):
            self.exists[slots] = self._before["exists"]
            self.sk[slots] = self._before["sk"]
            for c in self.values:
                self.values[c][slots] = self._before["v:" + c]
                self.valid[c][slots] = self._before["m:" + c]
        self.sequence = self._sequence_before
        self._forget(slots)

    def _id_rows(self, slots: np.ndarray) -> pa.Table:
        if not len(slots):
            return self._no_ids
        return pa.Table.from_arrays(self._in_key_order(slots)[1], schema=self._id_schema)


@numba.njit(cache=True, nogil=True)
def _first_time(slots: np.ndarray, seen: np.ndarray) -> np.ndarray:
    """The valid slots not yet in ``seen``, each once, marking them in ``seen``."""
    out = np.empty(slots.shape[0], dtype=np.int64)
    count = 0
    for i in range(slots.shape[0]):
        s = slots[i]
        if s >= 0:  # (no branch on seen: keys repeat at random, a branch mispredicts)
            out[count] = s
            count += 1 - int(seen[s])
            seen[s] = True
    return out[:count]


#: Rebuild stale ranks when the table has at most this many keys per row to order (the rebuild is
#: a sort of every key; beyond this, sorting the rows' own keys costs less).
_RANK_REBUILD = 4

#: Order distinct ranks by counting (O(rows + upper)) when ``upper`` is at most this many times
#: the rows; a comparison sort when the ranks are few among many.
_COUNTING_SPAN = 16


def order_by_rank(ranks: np.ndarray, upper: int) -> np.ndarray:
    """The permutation that sorts ``ranks`` (distinct integers in ``[0, upper)``) ascending."""
    if len(ranks) and upper <= _COUNTING_SPAN * len(ranks):
        order = _counting_order(np.ascontiguousarray(ranks, dtype=np.int64), upper)
        if len(order) == len(ranks):
            return order
    return np.argsort(ranks, kind="stable")


@numba.njit(cache=True, nogil=True)
def _counting_order(ranks: np.ndarray, upper: int) -> np.ndarray:
    """The order of distinct ``ranks`` in ``[0, upper)`` by one pass over ``upper`` (fewer
    entries than ``ranks`` if some repeat or fall outside: the caller then sorts)."""
    at = np.full(upper, -1, dtype=np.int64)
    for i in range(ranks.shape[0]):
        r = ranks[i]
        if r < 0 or r >= upper:
            return np.empty(0, dtype=np.int64)
        at[r] = i
    out = np.empty(ranks.shape[0], dtype=np.int64)
    count = 0
    for r in range(upper):
        if at[r] >= 0:
            out[count] = at[r]
            count += 1
    return out[:count]
