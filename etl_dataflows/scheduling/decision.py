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

Strategy = Literal["sequential", "waves", "chain_scan", "interpreted", "lock", "pat", "tstream"]


#: Costs measured on our 2-core machines with ``streamdi bench engine`` (recalibrate there): a wave
#: barrier of the thread pool, the planning pass per transaction, and the chain scan's cost per
#: transaction before this step has been measured (it is then measured like the others).
WAVE_BARRIER_NS = 12_000
PLAN_NS_PER_TXN = 40
SCAN_PRIOR_NS_PER_TXN = 600.0
#: A strategy never measured on a step is tried once if predicted within this factor of the best.
EXPLORE_WITHIN = 1.5


@dataclass
class StepStatistics:
    """What the decision sees for one step and one batch (all O(n) or O(1) to obtain)."""

    transactions: int
    operations: int
    cost_ns_per_txn: float
    generates_keys: bool
    scan_applies: bool = False
    scan_ns_per_txn: float | None = None
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


def predictions(stats: StepStatistics, workers: int) -> dict[Strategy, float]:
    """Predicted nanoseconds of the batch under every strategy that applies."""
    n = stats.transactions
    sequential = n * stats.cost_ns_per_txn
    out: dict[Strategy, float] = {"sequential": sequential}
    if stats.scan_applies:
        out["chain_scan"] = n * (stats.scan_ns_per_txn or SCAN_PRIOR_NS_PER_TXN)
    if stats.levels is not None:
        width = n / max(stats.levels, 1)
        parallel = min(workers, max(width, 1.0))
        out["waves"] = sequential / parallel + n * PLAN_NS_PER_TXN + stats.levels * WAVE_BARRIER_NS
    return out


def choose(
    stats: StepStatistics, workers: int, measured: set[str] | frozenset[str] = frozenset()
) -> tuple[Strategy, str]:
    """The cheapest predicted strategy, or one never measured on this step whose prediction is
    close enough to be worth measuring once; and why."""
    predicted = predictions(stats, workers)
    best = min(predicted, key=predicted.__getitem__)
    for strategy, cost in sorted(predicted.items(), key=lambda item: item[1]):
        if (
            strategy != best
            and strategy not in measured
            and cost <= EXPLORE_WITHIN * predicted[best]
        ):
            return strategy, f"measuring {strategy} once (predicted {cost / 1e6:.2f} ms)"
    shown = ", ".join(f"{k} {v / 1e6:.2f} ms" for k, v in sorted(predicted.items()))
    return best, f"cheapest predicted ({shown})"
