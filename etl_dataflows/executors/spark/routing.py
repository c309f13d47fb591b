"""Where the transactions of a batch run: their keys' partitions, which ones cross partitions, and
how deep they sit behind crossing ones.

On the driver, for one compiled step and one batch:

1. The event-only key and ``when`` expressions give every operation's key, and the driver's key
   index gives each key its slot (the same slots the local executor uses; new keys get new, empty
   slots). Operations sharing a table and a key expression share the lookup (a *key group*).
2. A key belongs to partition ``slot mod P``; a transaction that may draw a surrogate key also
   touches its table's sequence, which belongs to partition 0 (keys are drawn in timestamp order,
   one counter per table). A transaction is *local* when everything it touches is in one partition
   (its *home*), *crossing* otherwise (MorphStream's cross-partition parametric dependency).
3. The *depth* of a transaction is the number of crossing transactions on the longest chain of
   conflicts (same key or same sequence, timestamp order) that ends at it, itself included. One
   compiled pass in timestamp order computes it (O(operations)).

Why depth gives an exact schedule (:mod:`.plan`): conflicting transactions ``u`` before ``t``
have ``depth(u) <= depth(t)``, and ``<`` when ``t`` crosses. So running, for s = 0, 1, ..., the
crossing transactions of depth s (on the driver, in timestamp order) and then the local ones of
depth s (in their home partitions, each in timestamp order) applies every key's operations in
timestamp order, which is all the serial result depends on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numba
import numpy as np
import pyarrow as pa

from etl_dataflows.executors.local.arrays import ArrayTable
from etl_dataflows.executors.local.compiled_step import CompiledStep, HoistedValues

#: The partition that owns every table's surrogate-key sequence.
SEQUENCE_OWNER = 0


@dataclass
class KeyGroup:
    """Operations of a step on one table with one key expression: the slot per transaction (-1
    where none of them runs or the key is null)."""

    table: str
    hoisted: int
    slots: np.ndarray


@dataclass
class Routing:
    """The routing of one batch of one step (see the module docstring)."""

    n: int
    partitions: int
    order: np.ndarray
    groups: list[KeyGroup]
    home: np.ndarray
    cross: np.ndarray
    depth: np.ndarray
    seconds: float

    @property
    def max_depth(self) -> int:
        return int(self.depth.max()) if self.n else 0

    def local_counts(self) -> np.ndarray:
        """Local transactions per (depth, partition)."""
        rows = self.depth[~self.cross] * self.partitions + self.home[~self.cross]
        size = (self.max_depth + 1) * self.partitions
        counts = np.bincount(rows, minlength=size)[:size]
        return counts.reshape(self.max_depth + 1, self.partitions)

    def cross_counts(self) -> np.ndarray:
        """Crossing transactions per depth."""
        return np.bincount(self.depth[self.cross], minlength=self.max_depth + 1)

    def touched_slots(self, table: str, rows: np.ndarray, capacity: int) -> np.ndarray:
        """The distinct slots of ``table`` that transactions ``rows`` touch, in slot order
        (``capacity``: the table's slot count)."""
        seen = np.zeros(capacity, dtype=np.bool_)
        for group in self.groups:
            if group.table == table:
                slots = group.slots[rows]
                seen[slots[slots >= 0]] = True
        return np.flatnonzero(seen)


def _active(hoisted: HoistedValues) -> np.ndarray:
    active: np.ndarray = hoisted.valid & hoisted.values.astype(np.bool_) & ~hoisted.errors
    return active


def route(
    compiled: CompiledStep,
    arrays: dict[str, ArrayTable],
    hoisted: dict[int, HoistedValues],
    ts: np.ndarray,
    partitions: int,
    scratch: DepthScratch,
) -> Routing:
    """Route one batch (see the module docstring); ``hoisted`` holds at least the step's key and
    ``when`` expressions, by hoisted index."""
    started = time.perf_counter()
    kernel, step = compiled.kernel, compiled.step
    n = len(ts)
    actives: list[np.ndarray] = []
    needed: dict[tuple[str, int], np.ndarray] = {}
    for op in step.operations:
        when = kernel.when_hoist[op.index]
        active = np.ones(n, dtype=np.bool_) if when is None else _active(hoisted[when])
        actives.append(active)
        group = (op.table, kernel.key_hoist[op.index])
        needed[group] = needed[group] | active if group in needed else active
    slots_of: dict[tuple[str, int], np.ndarray] = {}
    for (table_name, k), active in needed.items():
        key = hoisted[k]
        usable = key.valid & ~key.errors & active
        table = arrays[table_name]
        if not usable.any():
            slots_of[(table_name, k)] = np.full(n, -1, dtype=np.int64)
        elif table.key_type == "string":
            masked = [v if ok else None for v, ok in zip(key.values, usable, strict=True)]
            slots_of[(table_name, k)] = table.slots(pa.array(masked, type=pa.string()), usable)
        else:
            slots_of[(table_name, k)] = table.slots(key.values, usable)
    groups = [KeyGroup(name, k, slots) for (name, k), slots in slots_of.items()]

    # Resources: every key group, then one sequence per table whose keys an operation may draw.
    capacities = {name: arrays[name].capacity for name in kernel.tables}
    bases: dict[str, int] = {}
    total = 0
    for name in kernel.tables:
        bases[name] = total
        total += capacities[name]
    draws: dict[str, np.ndarray] = {}
    for op in step.operations:
        if compiled.draws_keys[op.index]:
            slots = slots_of[(op.table, kernel.key_hoist[op.index])]
            drawing = actives[op.index] & (slots >= 0)
            draws[op.table] = draws[op.table] | drawing if op.table in draws else drawing
    owners: list[np.ndarray] = []
    resources: list[np.ndarray] = []
    for key_group in groups:
        touched = key_group.slots >= 0
        owners.append(np.where(touched, key_group.slots % partitions, -1))
        resources.append(np.where(touched, key_group.slots + bases[key_group.table], -1))
    for offset, (_, drawing) in enumerate(sorted(draws.items())):
        owners.append(np.where(drawing, SEQUENCE_OWNER, -1))
        resources.append(np.where(drawing, total + offset, -1))
    total += len(draws)

    home = np.full(n, -1, dtype=np.int64)
    for owner in owners:
        home = np.where(home < 0, owner, home)
    idle = home < 0
    home[idle] = np.arange(n, dtype=np.int64)[idle] % partitions
    cross = np.zeros(n, dtype=np.bool_)
    for owner in owners:
        cross |= (owner >= 0) & (owner != home)

    if n < 2 or bool(np.all(ts[1:] >= ts[:-1])):
        order = np.arange(n, dtype=np.int64)
    else:
        order = np.argsort(ts, kind="stable").astype(np.int64)
    stacked = np.vstack(resources) if resources else np.full((1, n), -1, dtype=np.int64)
    depth: np.ndarray = _depths(order, stacked, cross, scratch.take(total))
    return Routing(n, partitions, order, groups, home, cross, depth, time.perf_counter() - started)


class DepthScratch:
    """A zeroed array reused across batches by the depth pass (it leaves it zeroed)."""

    def __init__(self) -> None:
        self._last = np.zeros(0, dtype=np.int32)

    def take(self, size: int) -> np.ndarray:
        if self._last.shape[0] < size:
            self._last = np.zeros(max(size, 2 * self._last.shape[0]), dtype=np.int32)
        return self._last


@numba.njit(cache=True, nogil=True)
def _depths(
    order: np.ndarray, resources: np.ndarray, cross: np.ndarray, last: np.ndarray
) -> np.ndarray:
    n = order.shape[0]
    depth = np.zeros(n, dtype=np.int64)
    for k in range(n):
        i = order[k]
        d = 0
        for j in range(resources.shape[0]):
            r = resources[j, i]
            if r >= 0 and last[r] > d:
                d = last[r]
        if cross[i]:
            d += 1
        depth[i] = d
        for j in range(resources.shape[0]):
            r = resources[j, i]
            if r >= 0:
                last[r] = d
    for k in range(n):
        i = order[k]
        for j in range(resources.shape[0]):
            r = resources[j, i]
            if r >= 0:
                last[r] = 0
    return depth
