"""Lock requests of a batch, for the lock-based baselines.

Each transaction needs a lock on every resource it touches: a key (a table slot), or with
``unit="partition"`` the partition of that key (S-Store's partition locks); a transaction that may
draw a surrogate key also needs the table's sequence, so keys are drawn in timestamp order. A
resource grants its lock to transactions in timestamp order; a transaction's *turn* on a resource is
its position in that order. Built by sorting arrays (one pass, no Python object per request).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

LockUnit = Literal["key", "partition"]


@dataclass
class LockPlan:
    """CSR lock requests: transaction ``i`` needs ``resources[ptr[i]:ptr[i+1]]`` (dense ids), at
    the ``turns`` given (its position among the resource's requests in timestamp order)."""

    ptr: np.ndarray
    resources: np.ndarray
    turns: np.ndarray
    count: int


def lock_requests(
    order: np.ndarray,
    resources: Sequence[np.ndarray],
    group_of: Sequence[int],
    capacities: Sequence[int],
    unit: LockUnit,
    partitions: int,
) -> LockPlan:
    """Lock requests of every transaction (see the module docstring).

    ``resources[j][i]``: the slot transaction ``i`` touches in resource group ``group_of[j]`` (a
    table, or a table's sequence), -1 for none; ``capacities`` per group.
    """
    n = len(order)
    bases = np.concatenate([[0], np.cumsum(capacities)]).astype(np.int64)
    txns, ids = [], []
    for slot, group in zip(resources, group_of, strict=True):
        rows = np.flatnonzero(slot >= 0)
        if not len(rows):
            continue
        if unit == "key" or capacities[group] == 1:
            ids.append(slot[rows] + bases[group] + (partitions if unit == "partition" else 0))
        else:
            ids.append(slot[rows] % partitions)
        txns.append(rows)
    if not txns:
        empty = np.zeros(0, np.int64)
        return LockPlan(np.zeros(n + 1, dtype=np.int64), empty, empty, 0)
    txn = np.concatenate(txns).astype(np.int64)
    resource = np.concatenate(ids).astype(np.int64)
    width = int(resource.max()) + 1
    pairs = np.unique(txn * width + resource)
    txn, resource = pairs // width, pairs % width
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(txn, minlength=n), out=ptr[1:])
    dense_ids, dense = np.unique(resource, return_inverse=True)
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n, dtype=np.int64)
    by_resource = np.lexsort((rank[txn], dense))
    starts = np.searchsorted(dense[by_resource], dense[by_resource], side="left")
    turns = np.empty(len(dense), dtype=np.int64)
    turns[by_resource] = np.arange(len(dense), dtype=np.int64) - starts
    return LockPlan(ptr, dense.astype(np.int64), turns, len(dense_ids))
