"""State of a keyed table as dense arrays, one row (slot) per key ever seen.

Columns are numpy arrays with a validity mask each (False = null); ``exists`` says whether the key
currently has a row, ``sk`` holds surrogate keys. Slots come from a
:class:`~etl_dataflows.planning.keys.KeyIndex` and never move; a deleted row keeps its slot with
``exists`` False.

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
from etl_dataflows.planning.keys import IntKeyIndex, StrKeyIndex
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


class ArrayTable:
    """A :class:`~etl_dataflows.tables.Table` held as arrays (see the module docstring)."""

    def __init__(self, table: Table, capacity: int = 1024) -> None:
        if len(table.key) != 1:
            raise ValueError(
                f"array state needs a single key column, {table.name!r} has {len(table.key)}"
            )
        self.table = table
        self.key_name, self.key_type = table.key[0]
        self.index: IntKeyIndex | StrKeyIndex = (
            IntKeyIndex(capacity) if self.key_type == "int64" else StrKeyIndex()
        )
        self.capacity = 0
        self.keys: np.ndarray = np.empty(0, dtype=np.int64 if self.key_type == "int64" else object)
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

        self.keys = grown(self.keys)
        self.exists = grown(self.exists, False)
        self.sk = grown(self.sk)
        self.values = {c: grown(v) for c, v in self.values.items()}
        self.valid = {c: grown(v, False) for c, v in self.valid.items()}
        self._remembered = grown(self._remembered, False)
        self.capacity = capacity

    def slots(self, keys: np.ndarray | pa.Array, valid: np.ndarray) -> np.ndarray:
        """Slots of ``keys`` (new keys get new, empty slots); -1 where ``valid`` is False."""
        before = self.index.size
        slots = self.index.slots(keys, valid)
        after = self.index.size
        if after > before:
            self._grow(after)
            fresh = (slots >= before) & (slots >= 0)
            if isinstance(keys, pa.Array):
                keys = np.asarray(keys.to_numpy(zero_copy_only=False))
            self.keys[slots[fresh]] = keys[fresh]
        return slots

    # -- images ---------------------------------------------------------------------------------

    def load(self, image: pa.Table) -> None:
        """Replace the contents with the rows of an image table."""
        n = image.num_rows
        key_column = image.column(self.key_name)
        if self.key_type == "int64":
            keys: Any = np.asarray(key_column.to_numpy(), dtype=np.int64)
        else:
            keys = key_column.combine_chunks() if n else pa.array([], type=pa.string())
        slots = self.slots(keys, np.ones(n, dtype=np.bool_))
        self.exists[slots] = True
        if self.table.surrogate:
            self.sk[slots] = np.asarray(
                image.column(self.table.surrogate).to_numpy(), dtype=np.int64
            )
            if n:
                self.sequence = max(self.sequence, int(self.sk[slots].max()) + 1)
        for column, kind in self.table.columns:
            values, valid = column_from_arrow(image.column(column), kind)
            self.values[column][slots] = values
            self.valid[column][slots] = valid

    def image_rows(self, slots: np.ndarray) -> pa.Table:
        """Image rows of ``slots`` sorted by key."""
        keys = self.keys[slots]
        order = np.argsort(keys) if self.key_type == "int64" else _string_order(keys)
        slots = slots[order]
        arrays: list[pa.Array] = [pa.array(self.keys[slots], type=arrow_type(self.key_type))]
        if self.table.surrogate:
            arrays.append(pa.array(self.sk[slots], type=pa.int64()))
        for column, kind in self.table.columns:
            arrays.append(_to_arrow(self.values[column][slots], self.valid[column][slots], kind))
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
        keys = self.keys[slots]

        order = np.argsort(keys, kind="stable") if self.key_type == "int64" else _string_order(keys)
        return pa.Table.from_arrays(
            [pa.array(keys[order], type=arrow_type(self.key_type))],
            schema=row_id_schema(self.table),
        )


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
