"""Choosing how to run a transactional step, batch by batch.

MorphStream decides three dimensions per batch from statistics of the task precedence graph; on our
two cores, with compiled transactions, the choice that matters is between

* ``sequential`` — the compiled pass over the batch in timestamp order: no planning at all, a few
  nanoseconds of overhead per transaction; the one to beat whenever transactions are cheap;
* ``waves`` — transaction levels of the precedence graph run wave by wave, the transactions of a
  wave in parallel on every core: it pays a planning pass and a barrier per wave, and wins when
  transactions are costly (user functions) and the waves are wide;
* ``interpreted`` — steps the compiler cannot take run on the serial executor's code.

The statistics are O(n) to compute: transactions, operations, the estimated cost per transaction
(declared user-function cost plus a measured per-transaction time of this step's recent batches),
whether the step generates surrogate keys (whose values depend on the global commit order, so waves
cannot run them), and, only when waves are considered, the number of levels.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any, Literal

Strategy = Literal["sequential", "waves", "interpreted", "lock", "pat", "tstream"]


#: Fixed costs measured on our 2-core machines (see the engine benchmark): a wave barrier of the
#: numba thread pool, and the planning pass per transaction.
WAVE_BARRIER_NS = 12_000
PLAN_NS_PER_TXN = 40


@dataclass
class StepStatistics:
    """What the decision sees for one step and one batch."""

    transactions: int
    operations: int
    cost_ns_per_txn: float
    generates_keys: bool
    levels: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


def cores() -> int:
    """Cores the executor may use."""
    return (
        max(1, len(os.sched_getaffinity(0)))
        if hasattr(os, "sched_getaffinity")
        else (os.cpu_count() or 1)
    )


def worth_planning(stats: StepStatistics, workers: int) -> bool:
    """Whether waves could beat the sequential pass at all (checked before any planning)."""
    if workers < 2 or stats.transactions < 64:
        return False
    sequential = stats.transactions * stats.cost_ns_per_txn
    best_case = sequential / workers + stats.transactions * PLAN_NS_PER_TXN + WAVE_BARRIER_NS
    return best_case < 0.8 * sequential


def choose(stats: StepStatistics, workers: int) -> tuple[Strategy, str]:
    """The strategy for a planned batch (``stats.levels`` known) and why."""
    if stats.levels is None:
        return "sequential", "transactions are cheap: planning cannot pay for itself"
    n = stats.transactions
    sequential = n * stats.cost_ns_per_txn
    width = n / max(stats.levels, 1)
    parallel = min(workers, max(width, 1.0))
    waves = sequential / parallel + n * PLAN_NS_PER_TXN + stats.levels * WAVE_BARRIER_NS
    if waves < 0.9 * sequential:
        return "waves", f"{stats.levels} waves of {width:.0f} transactions on average beat one pass"
    return "sequential", f"{stats.levels} waves of {width:.0f} transactions are too narrow to pay"
