"""Transaction-level precedence: which transactions of a batch may run at the same time.

Two transactions conflict when they touch the same key (of the same table). Running them in
timestamp order and everything else in any order gives the serial result, because a transaction's
reads and writes only meet those of conflicting transactions. ``level(t) = 1 + max(level of the
transactions that touched one of t's keys before t)``; all transactions of one level touch disjoint
keys, so a level is a *wave* that can run in parallel. Built by one compiled pass in timestamp order
over the operations' slot arrays (O(operations)); the number of levels is at least the longest chain
of operations on one key.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def _levels(
    order: np.ndarray, slots: np.ndarray, offsets: np.ndarray, last: np.ndarray
) -> np.ndarray:
    n = order.shape[0]
    levels = np.zeros(n, dtype=np.int64)
    for k in range(n):
        i = order[k]
        level = 0
        for j in range(slots.shape[0]):
            s = slots[j, i]
            if s >= 0:
                g = s + offsets[j]
                if last[g] > level:
                    level = last[g]
        level += 1
        levels[i] = level
        for j in range(slots.shape[0]):
            s = slots[j, i]
            if s >= 0:
                last[s + offsets[j]] = level
    for k in range(n):
        i = order[k]
        for j in range(slots.shape[0]):
            s = slots[j, i]
            if s >= 0:
                last[s + offsets[j]] = 0
    return levels


class LevelPlanner:
    """Computes transaction levels, reusing one scratch array across batches (not thread-safe:
    one planner per step)."""

    def __init__(self) -> None:
        self._last = np.zeros(0, dtype=np.int64)

    def levels(
        self,
        order: np.ndarray,
        slots: Sequence[np.ndarray],
        table_of_op: Sequence[int],
        capacities: Sequence[int],
    ) -> np.ndarray:
        """The level of every transaction (1-based; see the module docstring)."""
        bases = np.concatenate([[0], np.cumsum(capacities)]).astype(np.int64)
        offsets = np.array([bases[t] for t in table_of_op], dtype=np.int64)
        total = int(bases[-1])
        if self._last.shape[0] < total:
            self._last = np.zeros(total, dtype=np.int64)
        stacked = np.vstack(slots) if slots else np.zeros((0, len(order)), dtype=np.int64)
        result: np.ndarray = _levels(order, stacked, offsets, self._last)
        return result


def waves_of(levels: np.ndarray, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Transactions grouped by level (in timestamp order inside a level) and the wave bounds."""
    ranked = levels[order]
    by_level = order[np.argsort(ranked, kind="stable")]
    counts = np.bincount(levels, minlength=1)[1:] if len(levels) else np.zeros(0, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return by_level.astype(np.int64), starts


_POOL: list[tuple[int, ThreadPoolExecutor]] = []  # (its worker count, the pool)
#: A wave narrower than this runs on the calling thread (dispatch would cost more than it saves).
MIN_PARALLEL_WAVE = 8


def _pool(workers: int) -> ThreadPoolExecutor:
    if not _POOL or _POOL[0][0] < workers:
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="streamdi-wave")
        _POOL[:] = [(workers, pool)]
    return _POOL[0][1]


def run_waves(
    run_range: Callable[..., None],
    wave_txns: np.ndarray,
    wave_starts: np.ndarray,
    args: Sequence[Any],
    workers: int,
) -> None:
    """Run every wave, splitting wide waves across ``workers`` threads (``run_range`` releases
    the GIL); a wave ends before the next starts."""
    pool = _pool(workers) if workers > 1 else None
    for w in range(len(wave_starts) - 1):
        lo, hi = int(wave_starts[w]), int(wave_starts[w + 1])
        if pool is None or hi - lo < MIN_PARALLEL_WAVE:
            run_range(wave_txns, lo, hi, *args)
            continue
        bounds = np.linspace(lo, hi, workers + 1).astype(np.int64)
        futures = [
            pool.submit(run_range, wave_txns, int(a), int(b), *args)
            for a, b in itertools.pairwise(bounds)
            if b > a
        ]
        for future in futures:
            future.result()


def run_locked(
    run_tickets: Callable[..., None],
    order: np.ndarray,
    plan: Any,
    lock_ahead: bool,
    args: Sequence[Any],
    workers: int,
) -> None:
    """Run a batch on ``workers`` threads under the lock plan (the lock-based baselines): every
    worker claims transactions in timestamp order and waits for its turn on each lock."""
    served = np.zeros(max(plan.count, 1), dtype=np.int64)
    claim = np.zeros(1, dtype=np.int64)
    insert_turn = np.zeros(1, dtype=np.int64)
    next_turn = np.zeros(max(plan.count, 1), dtype=np.int64)
    turns = np.zeros_like(plan.turns) if lock_ahead else plan.turns
    call = (
        order,
        plan.ptr,
        plan.resources,
        turns,
        served,
        claim,
        insert_turn,
        next_turn,
        lock_ahead,
        *args,
    )
    if workers <= 1:
        run_tickets(*call)
        return
    pool = _pool(workers)
    futures = [pool.submit(run_tickets, *call) for _ in range(workers)]
    for future in futures:
        future.result()
