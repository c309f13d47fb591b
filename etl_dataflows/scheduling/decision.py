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

Strategy = Literal[
    "sequential", "waves", "chains", "chain_scan", "interpreted", "lock", "pat", "tstream"
]
#: The strategies the local executor can be fixed to (``LocalExecutor(strategy=...)``,
#: ``local:<strategy>``); ``interpreted`` is not one: it is what a step the compiler does not
#: take gets, whatever is fixed.
FIXED_STRATEGIES: tuple[Strategy, ...] = (
    "sequential",
    "waves",
    "chains",
    "chain_scan",
    "lock",
    "pat",
    "tstream",
)


#: Costs measured on our 2-core machines with ``streamdi bench engine`` (recalibrate there): a wave
#: barrier of the thread pool, the planning pass per transaction, and the chain scan's cost per
#: transaction before this step has been measured (it is then measured like the others).
WAVE_BARRIER_NS = 60_000
PLAN_NS_PER_TXN = 40
#: chains: lock turns planned by sorting, then per transaction an atomic claim, waits and
#: releases on shared counters (measured ~1.7 µs of thread time per transaction on SL).
CHAIN_PLAN_NS_PER_TXN = 150
CHAIN_NS_PER_TXN = 1_700
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
    #: Transactions one worker runs in a row when waves are spread over the workers:
    #: sum over levels of ceil(level width / workers) (skew leaves many narrow waves).
    wave_rounds: int | None = None

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
        rounds = stats.wave_rounds if stats.wave_rounds is not None else n / parallel
        out["waves"] = (
            rounds * stats.cost_ns_per_txn + n * PLAN_NS_PER_TXN + stats.levels * WAVE_BARRIER_NS
        )
        # No barriers: bounded by the work per worker and by the longest chain of conflicts.
        critical = stats.levels * stats.cost_ns_per_txn
        overhead = n * (PLAN_NS_PER_TXN + CHAIN_PLAN_NS_PER_TXN + CHAIN_NS_PER_TXN / workers)
        out["chains"] = max(sequential / workers, critical) + overhead
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


class StepCosts:
    """What one step's batches have measured, for :func:`predictions`.

    The cost of a transaction is modelled as ``base + declared``: ``declared`` is the user-function
    cost of the operations that run in this batch (known from the template and the batch, O(n)),
    ``base`` the rest of the compiled work, learned (EWMA) from every batch by inverting the
    prediction of the strategy that ran. The chain scan's cost per transaction is learned directly.
    """

    def __init__(self, weight: float = 0.3) -> None:
        self.base_ns = 50.0
        self.scan_ns: float | None = None
        self.tried: set[str] = set()
        self._weight = weight

    def sequential_ns(self, declared_ns: float) -> float:
        return self.base_ns + declared_ns

    def observe(
        self, strategy: str, stats: StepStatistics, declared_ns: float, seconds: float, workers: int
    ) -> None:
        """Learn from a batch that ran ``strategy`` in ``seconds``."""
        self.tried.add(strategy)
        n = stats.transactions
        if n == 0:
            return
        elapsed = seconds * 1e9
        if strategy == "chain_scan":
            sample = elapsed / n
            self.scan_ns = sample if self.scan_ns is None else self._blend(self.scan_ns, sample)
            return
        if strategy == "sequential":
            per_txn = elapsed / n
        elif strategy == "waves" and stats.levels and stats.wave_rounds:
            fixed: float = n * PLAN_NS_PER_TXN + stats.levels * WAVE_BARRIER_NS
            per_txn = (elapsed - fixed) / stats.wave_rounds
        elif strategy == "chains" and stats.levels:
            fixed = n * (PLAN_NS_PER_TXN + CHAIN_PLAN_NS_PER_TXN + CHAIN_NS_PER_TXN / workers)
            per_txn = (elapsed - fixed) / max(n / workers, stats.levels)
        else:
            return
        self.base_ns = self._blend(self.base_ns, max(1.0, per_txn - declared_ns))

    def _blend(self, old: float, new: float) -> float:
        return (1 - self._weight) * old + self._weight * new
