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
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
import pyarrow as pa

from etl_dataflows.batch import TableDelta
from etl_dataflows.executors.local.strings import StringPool
from etl_dataflows.planning.keys import IntKeyIndex, StrKeyIndex, TupleKeyIndex
from etl_dataflows.state import image_schema, row_id_schema
from etl_dataflows.tables import Table
from etl_dataflows.types import ColumnType, arrow_type
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


def _to_arrow(values: np.ndarray, valid: np.ndarray, column_type: ColumnType) -> pa.Array:
    mask = ~valid
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
        self._before: dict[str, np.ndarray] = {}
        self._remembered = np.zeros(0, dtype=np.bool_)
        self._remembered_slots: list[np.ndarray] = []
        self._grow(capacity)

    # -- storage --------------------------------------------------------------------------------

    def _grow(self, needed: int) -> None:
        if needed <= self.capacity:
            return
        capacity = max(needed, self.capacity * 2, 1024)

        def grown(array: np.ndarray, fill: Any = 0) -> np.ndarray:
            out = (
                np.full(capacity, fill, dtype=array.dtype)
                if array.dtype != object
                else np.empty(capacity, dtype=object)
            )
            out[: len(array)] = array
            return out

        self.key_parts = [grown(part) for part in self.key_parts]
        self.exists = grown(self.exists, False)
        self.sk = grown(self.sk)
        self.values = {c: grown(v) for c, v in self.values.items()}
        self.valid = {c: grown(v, False) for c, v in self.valid.items()}
        self._remembered = grown(self._remembered, False)
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
            slots = self.index.slots(parts, valid)
        else:
            slots = self.index.slots(parts[0], valid)
        after = self.index.size
        if after > before:
            self._grow(after)
            fresh = (slots >= before) & (slots >= 0)
            for c, part in enumerate(parts):
                if isinstance(part, pa.Array | pa.ChunkedArray):
                    part = np.asarray(part.to_numpy(zero_copy_only=False))
                self.key_parts[c][slots[fresh]] = part[fresh]
        return slots

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

    def _key_order(self, slots: np.ndarray) -> np.ndarray:
        """The order of ``slots`` by key (every key column, in declaration order)."""
        if len(self.key_parts) == 1:
            keys = self.key_parts[0][slots]
            if self.key_type == "int64":
                return np.argsort(keys, kind="stable")
            return _string_order(keys)
        parts = {
            f"k{c}": pa.array(part[slots], type=arrow_type(kind))
            for c, (part, (_, kind)) in enumerate(zip(self.key_parts, self.table.key, strict=True))
        }
        parts["slot"] = pa.array(np.arange(len(slots), dtype=np.int64))
        ordered = pa.table(parts).sort_by(
            [(f"k{c}", "ascending") for c in range(len(self.key_parts))]
        )
        return np.asarray(ordered.column("slot").to_numpy(), dtype=np.int64)

    def _key_arrays(self, slots: np.ndarray) -> list[pa.Array]:
        return [
            pa.array(part[slots], type=arrow_type(kind))
            for part, (_, kind) in zip(self.key_parts, self.table.key, strict=True)
        ]

    def image_rows(self, slots: np.ndarray) -> pa.Table:
        """Image rows of ``slots`` sorted by key."""
        slots = slots[self._key_order(slots)]
        arrays: list[pa.Array] = self._key_arrays(slots)
        if self.table.surrogate:
            arrays.append(pa.array(self.sk[slots], type=pa.int64()))
        for column, kind in self.table.columns:
            values, valid = self.values[column][slots], self.valid[column][slots]
            arrays.append(column_to_arrow(values, valid, kind, self.pool))
        return pa.Table.from_arrays(arrays, schema=image_schema(self.table))

    def image(self) -> pa.Table:
        """The whole table in image form."""
        return self.image_rows(np.flatnonzero(self.exists[: self.index.size]))

    # -- change tracking ------------------------------------------------------------------------

    def begin_batch(self) -> None:
        self._remembered_slots = []
        self._before = {"exists": np.zeros(0, dtype=np.bool_)}
        self._sequence_before = self.sequence

    def remember(self, slots: np.ndarray) -> None:
        """Copy the current values of ``slots`` not yet remembered in this batch."""
        slots = _first_time(slots, self._remembered)
        if not len(slots):
            return
        self._remembered_slots.append(slots)
        parts = {"exists": self.exists[slots], "sk": self.sk[slots]}
        for c in self.values:
            parts["v:" + c] = self.values[c][slots]
            parts["m:" + c] = self.valid[c][slots]
        for name, part in parts.items():
            previous = self._before.get(name)
            self._before[name] = (
                part if previous is None or not len(previous) else np.concatenate([previous, part])
            )

    def _all_remembered(self) -> np.ndarray:
        if not self._remembered_slots:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate(self._remembered_slots)

    def end_batch(self) -> TableDelta:
        """The batch's net changes; forget the remembered values."""
        slots = self._all_remembered()
        self._remembered[slots] = False
        if not len(slots):
            return TableDelta(self.image_rows(slots), _empty_ids(self.table))
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
        self._before = {}
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
            self._remembered[slots] = False
        self.sequence = self._sequence_before
        self._remembered_slots = []
        self._before = {}

    def _id_rows(self, slots: np.ndarray) -> pa.Table:
        if not len(slots):
            return _empty_ids(self.table)
        slots = slots[self._key_order(slots)]
        return pa.Table.from_arrays(self._key_arrays(slots), schema=row_id_schema(self.table))


@numba.njit(cache=True, nogil=True)
def _first_time(slots: np.ndarray, seen: np.ndarray) -> np.ndarray:
    """The valid slots not yet in ``seen``, each once, marking them in ``seen``."""
    out = np.empty(slots.shape[0], dtype=np.int64)
    count = 0
    for s in slots:
        if s >= 0 and not seen[s]:
            seen[s] = True
            out[count] = s
            count += 1
    return out[:count]


def _empty_ids(table: Table) -> pa.Table:
    return row_id_schema(table).empty_table()


def _string_order(keys: np.ndarray) -> np.ndarray:
    return np.array(sorted(range(len(keys)), key=lambda i: keys[i]), dtype=np.int64)
