"""A compiled table seen as the serial executor's rows: how interpreted steps share it.

The local executor keeps a table as arrays (:class:`~.arrays.ArrayTable`) when compiled steps use
it, even when some interpreted step touches it too (TPC-DI's ``prospect``: the compiled
``apply_prospect`` writes every row each batch, the interpreted ``apply_customer`` sets IsCustomer
on a few through ``update_where``). The embedded serial executor then reads and writes that table
through a :class:`SharedRows`: the mapping from key to row dict its plain tables are made of, whose
rows are built from the arrays on each read and written back into them on each write.

Contract (what keeps the result equal to the serial executor's own):

1. A read (``get``, ``in``) sees the arrays as they are now: the kernels' writes of earlier steps
   of the batch included. A row handed out is a fresh dict; changing it changes nothing.
2. A write (``row[key] = ...``, ``pop``) first *remembers* the slot in the array table (once per
   batch, as a kernel's writes do), so the array table's net delta, :meth:`ArrayTable.restore` on a
   failed batch and the serial executor's own undo log (which writes back through this mapping)
   all see it. A write creates the key's slot if it has none.
3. ``keys_with(column, value)`` answers ``update_where`` through an index on each declared
   ``indexes=`` column, with the serial executor's rule: it may name keys that no longer hold the
   value (the caller checks each key's current row), never miss one that does. Writes through this
   mapping keep it exact; writes that bypass it (a kernel, a restored batch) must be announced with
   :meth:`stale`, after which the next lookup re-indexes every slot whose value differs from what
   was indexed (one vectorized comparison, then Python work only for the slots that changed).

Tables with one key column only (the analysis shares no other kind).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from etl_dataflows.executors.local.arrays import ArrayTable
from etl_dataflows.types import ColumnType

Key = tuple[Any, ...]
Row = dict[str, Any]

_PYTHON: dict[ColumnType, Any] = {
    "int64": int,
    "timestamp": int,
    "date": int,
    "float64": float,
    "bool": bool,
}


class SharedRows:
    """The rows of an :class:`ArrayTable` as a key -> row mapping (see the module docstring)."""

    def __init__(self, arrays: ArrayTable) -> None:
        table = arrays.table
        if len(table.key) != 1:
            raise ValueError(f"table {table.name!r}: only tables with one key column are shared")
        self.arrays = arrays
        self._key_name, self._key_type = table.key[0]
        self._surrogate = table.surrogate
        self._columns: list[tuple[str, ColumnType]] = list(table.columns)
        self.pool = arrays.pool
        self._indexes = {column: _ColumnIndex(self, column) for column in table.indexes}

    # -- slots ----------------------------------------------------------------------------------

    def _find(self, key: Key) -> int:
        """The slot of ``key`` holding a row, or -1."""
        slot = self.arrays.slot_of(key[0])
        if slot < 0 or not self.arrays.exists[slot]:
            return -1
        return slot

    def _slot(self, key: Key) -> int:
        """The slot of ``key``, made if the key has none."""
        value = key[0]
        if self._key_type == "string":
            keys: Any = pa.array([value], type=pa.string())
        else:
            keys = np.array([value], dtype=np.int64)
        return int(self.arrays.slots(keys, np.ones(1, dtype=np.bool_))[0])

    def _row(self, slot: int, key: Key) -> Row:
        arrays = self.arrays
        row: Row = {self._key_name: key[0]}
        if self._surrogate:
            row[self._surrogate] = int(arrays.sk[slot])
        for name, kind in self._columns:
            if not arrays.valid[name][slot]:
                row[name] = None
            elif kind == "string":
                row[name] = self.pool.string(int(arrays.values[name][slot]))
            else:
                row[name] = _PYTHON[kind](arrays.values[name][slot])
        return row

    def key_of(self, slot: int) -> Key:
        value = self.arrays.keys[slot]
        return (int(value),) if self._key_type == "int64" else (value,)

    # -- the mapping the serial executor uses -----------------------------------------------------

    def get(self, key: Key, default: Row | None = None) -> Row | None:
        slot = self._find(key)
        return default if slot < 0 else self._row(slot, key)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, tuple) and self._find(key) >= 0

    def __getitem__(self, key: Key) -> Row:
        row = self.get(key)
        if row is None:
            raise KeyError(key)
        return row

    def __setitem__(self, key: Key, row: Row) -> None:
        arrays = self.arrays
        slot = self._slot(key)
        arrays.remember_slot(slot)
        arrays.exists[slot] = True
        if self._surrogate:
            arrays.sk[slot] = row[self._surrogate]
        pool = arrays.pool
        for name, kind in self._columns:
            value = row.get(name)
            if value is None:
                arrays.valid[name][slot] = False
                arrays.values[name][slot] = 0
                continue
            arrays.valid[name][slot] = True
            arrays.values[name][slot] = pool.code(value) if kind == "string" else value
        for index in self._indexes.values():
            index.note(slot)

    def pop(self, key: Key, default: Row | None = None) -> Row | None:
        slot = self._find(key)
        if slot < 0:
            return default
        row = self._row(slot, key)
        self.arrays.remember_slot(slot)
        self.arrays.exists[slot] = False
        return row

    def __delitem__(self, key: Key) -> None:
        if self.pop(key) is None:
            raise KeyError(key)

    # -- update_where ---------------------------------------------------------------------------

    def stale(self) -> None:
        """Something wrote the arrays without this mapping (a kernel, a restored batch): the next
        lookup re-indexes what changed."""
        for index in self._indexes.values():
            index.fresh = False

    def keys_with(self, column: str, value: Any) -> list[Key]:
        """Keys that may hold ``value`` in the indexed ``column`` (a superset of those that do)."""
        return self._indexes[column].keys_with(value)


class _ColumnIndex:
    """Slots by value of one indexed column (see :meth:`SharedRows.keys_with`).

    A *base* built in one pass of numpy (the values of every row, sorted, beside their slots)
    and an *overlay* of slots indexed since (value -> slots), both allowed to name slots whose
    value has moved on (the caller checks). ``_indexed`` holds the value (code) each slot was
    last indexed under, so catching up after a write that bypassed the mapping visits only the
    slots whose value differs from it; when they are many, the base is rebuilt instead."""

    def __init__(self, rows: SharedRows, column: str) -> None:
        self._rows = rows
        self._column = column
        self._string = dict(rows.arrays.table.columns)[column] == "string"
        dtype = rows.arrays.values[column].dtype
        self._base_values = np.zeros(0, dtype=dtype)
        self._base_slots = np.zeros(0, dtype=np.int64)
        self._overlay: dict[Any, set[int]] = {}
        self._indexed = np.zeros(0, dtype=dtype)
        self._indexed_valid = np.zeros(0, dtype=np.bool_)
        self.fresh = False

    def _refresh(self) -> None:
        arrays = self._rows.arrays
        size = arrays.index.size
        if len(self._indexed) < size:
            grown = max(size, 2 * len(self._indexed), 1024)
            indexed = np.zeros(grown, dtype=self._indexed.dtype)
            indexed[: len(self._indexed)] = self._indexed
            indexed_valid = np.zeros(grown, dtype=np.bool_)
            indexed_valid[: len(self._indexed_valid)] = self._indexed_valid
            self._indexed, self._indexed_valid = indexed, indexed_valid
        values = arrays.values[self._column][:size]
        valid = arrays.valid[self._column][:size] & arrays.exists[:size]
        moved = np.flatnonzero(
            valid & (~self._indexed_valid[:size] | (values != self._indexed[:size]))
        )
        if len(moved) > len(self._base_slots) // 8 + _OVERLAY_MIN:
            slots = np.flatnonzero(valid)
            order = np.argsort(values[slots], kind="stable")
            self._base_slots = slots[order]
            self._base_values = values[self._base_slots]
            self._overlay = {}
            self._indexed[:size] = values
            self._indexed_valid[:size] = valid
        else:
            for slot in moved.tolist():
                self._add(slot, values[slot])
        self.fresh = True

    def _add(self, slot: int, raw: Any) -> None:
        key = raw.item()
        slots = self._overlay.get(key)
        if slots is None:
            self._overlay[key] = {slot}
        else:
            slots.add(slot)
        self._indexed[slot] = raw
        self._indexed_valid[slot] = True

    def note(self, slot: int) -> None:
        """Index ``slot`` under its current value (after a write through the mapping)."""
        arrays = self._rows.arrays
        if not self.fresh:
            return  # the next lookup re-indexes every moved slot, this one included
        if slot >= len(self._indexed):
            self._refresh()
            return
        if arrays.valid[self._column][slot]:
            self._add(slot, arrays.values[self._column][slot])

    def keys_with(self, value: Any) -> list[Key]:
        if not self.fresh:
            self._refresh()
        raw = self._rows.arrays.pool.find_one(value) if self._string else value
        if self._string and raw < 0:
            return []  # a string never seen is in no row
        lo = int(np.searchsorted(self._base_values, raw, side="left"))
        hi = int(np.searchsorted(self._base_values, raw, side="right"))
        slots = set(self._base_slots[lo:hi].tolist())
        slots |= self._overlay.get(raw, set())
        return [self._rows.key_of(slot) for slot in slots]


#: Slots moved since the base was built that go to the overlay, beyond an eighth of the base.
_OVERLAY_MIN = 1024
