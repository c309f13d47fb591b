"""Choosing where a batch of a compiled step runs: on the driver, in one Spark pass, or in
supersteps — from the batch's routing and costs measured on earlier batches.

A plan runs ``k`` Spark passes (MorphStream's strategy table for Spark, DESIGN §5):

* ``k = 0`` — **driver**: the local executor runs the whole batch (small batches, or many crossing
  transactions: every pass costs a Spark job);
* ``k = 1`` with no crossing transaction — **one pass**: every partition runs its transactions;
* otherwise — **supersteps**: pass ``s`` runs the local transactions of depth ``s`` in their
  partitions, after the driver ran the crossing ones of depth ``s``; whatever is deeper than the
  last pass (the *tail*) runs on the driver afterwards, in timestamp order
  (:mod:`.routing` explains why this is exact).

The predicted time of a plan is ``passes * pass + shipped * ship + slowest partitions * task +
driver transactions * driver``, with the four costs learned per step (EWMA) from what earlier
batches measured, starting from priors measured on our 2-core machines. The driver's memory for
one batch is estimated from the step's compiled layout (:func:`bytes_per_transaction`); a plan whose
largest driver run exceeds the memory budget is not taken while another fits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import numpy as np

from etl_dataflows.executors.local.compiled_step import CompiledStep
from etl_dataflows.executors.spark.routing import Routing

Placement = Literal["driver", "spark", "supersteps"]
#: The placements the Spark executor can be fixed to (``spark:<placement>``).
PLACEMENTS: tuple[Placement, ...] = get_args(Placement)

#: Priors (``streamdi bench spark`` on 2 cores, local[2]): a pass's fixed cost (job scheduling,
#: result transport), the driver's routing, shipping and merging per transaction sent to Spark,
#: and the local executor's time per transaction; a task's time per transaction starts as
#: ``TASK_OVER_DRIVER`` times the driver's (the same kernel, plus loading and finishing). All are
#: replaced by measurements batch by batch.
PASS_SECONDS = 0.25
SHIP_NS_PER_TXN = 600.0
DRIVER_NS_PER_TXN = 600.0
TASK_OVER_DRIVER = 1.5


@dataclass
class SparkCosts:
    """Costs one step's batches have measured (see the module docstring)."""

    pass_seconds: float = PASS_SECONDS
    ship_ns: float = SHIP_NS_PER_TXN
    driver_ns: float = DRIVER_NS_PER_TXN
    measured_task_ns: float | None = None
    weight: float = 0.3

    @property
    def task_ns(self) -> float:
        if self.measured_task_ns is None:
            return TASK_OVER_DRIVER * self.driver_ns
        return self.measured_task_ns

    def _blend(self, old: float, new: float) -> float:
        return (1 - self.weight) * old + self.weight * new

    def observe_driver(self, transactions: int, seconds: float) -> None:
        if transactions >= 1_000:
            self.driver_ns = self._blend(self.driver_ns, seconds * 1e9 / transactions)

    def observe_pass(
        self, transactions: int, job_seconds: float, slowest_task: float, total_task: float
    ) -> None:
        self.pass_seconds = self._blend(self.pass_seconds, max(job_seconds - slowest_task, 0.0))
        if transactions >= 1_000:
            sample = total_task * 1e9 / transactions
            known = self.measured_task_ns
            self.measured_task_ns = sample if known is None else self._blend(known, sample)

    def observe_ship(self, transactions: int, seconds: float) -> None:
        if transactions >= 1_000:
            self.ship_ns = self._blend(self.ship_ns, seconds * 1e9 / transactions)


@dataclass
class Plan:
    """``passes`` Spark passes (0: the driver runs everything) and why."""

    passes: int
    why: str
    predicted_ms: dict[str, float] = field(default_factory=dict)
    driver_bytes: int = 0
    #: Transactions deeper than the last pass (they run on the driver afterwards).
    tail: int = 0

    @property
    def strategy(self) -> str:
        if self.passes == 0:
            return "driver"
        return "one_pass" if self.passes == 1 and not self.tail else "supersteps"


def bytes_per_transaction(compiled: CompiledStep) -> int:
    """Estimated driver memory per transaction when the local executor runs a batch of this step:
    the hoisted columns (value, validity, error), one slot per operation, the kernel's outputs, the
    timestamp order, the values remembered for the deltas, and the output row."""
    kernel = compiled.kernel
    hoisted = 10 * len(kernel.hoisted)
    slots = 8 * len(compiled.step.operations)
    outputs = 14 + 9 * len(kernel.kernel_outputs) + 8
    remembered = sum(
        10 + 9 * len(compiled.flow.tables[op.table].columns)
        for op in compiled.step.operations
        if op.kind != "read"
    )
    output_row = 8 * (len(compiled.out_schema) + 3)
    return hoisted + slots + outputs + remembered + output_row


def worth_routing(
    transactions: int,
    costs: SparkCosts,
    partitions: int,
    bytes_per_txn: int,
    memory_budget: int | None,
) -> bool:
    """Whether any Spark plan could beat the driver (checked before routing, which costs a pass
    over the batch): the best case — no crossing transaction, the work split evenly — against the
    driver alone. A batch over the memory budget is always routed."""
    if memory_budget is not None and transactions * bytes_per_txn > memory_budget:
        return True
    best = (
        costs.pass_seconds
        + transactions * (costs.ship_ns + costs.task_ns / max(partitions, 1)) / 1e9
    )
    return best < transactions * costs.driver_ns / 1e9


def choose_plan(
    routing: Routing,
    costs: SparkCosts,
    *,
    max_supersteps: int,
    bytes_per_txn: int,
    memory_budget: int | None,
    placement: Placement | None,
) -> Plan:
    """The cheapest predicted plan that keeps the driver within its memory budget (see the
    module docstring); ``placement="spark"`` excludes the driver-only plan, ``"supersteps"`` takes
    as many passes as allowed."""
    locals_at = routing.local_counts()
    cross_at = routing.cross_counts()
    depth = routing.max_depth
    n = routing.n
    deepest = min(depth + 1, max_supersteps)
    candidates: dict[int, tuple[float, int, int]] = {}  # passes -> (seconds, driver rows, tail)
    if placement is None:
        candidates[0] = (n * costs.driver_ns / 1e9, n, 0)
    shipped = 0
    slowest = 0.0
    passes_run = 0
    crossing_on_driver = 0
    largest_driver_run = 0
    for k in range(1, deepest + 1):
        s = k - 1
        if s >= 1:
            crossing_on_driver += int(cross_at[s])
            largest_driver_run = max(largest_driver_run, int(cross_at[s]))
        shipped += int(locals_at[s].sum())
        slowest += float(locals_at[s].max()) * costs.task_ns / 1e9
        passes_run += 1 if locals_at[s].sum() else 0
        tail = int(locals_at[k:].sum() + cross_at[k:].sum())
        seconds = (
            passes_run * costs.pass_seconds
            + shipped * costs.ship_ns / 1e9
            + slowest
            + (crossing_on_driver + tail) * costs.driver_ns / 1e9
        )
        candidates[k] = (seconds, max(largest_driver_run, tail), tail)
    predicted = {
        ("driver" if k == 0 else f"spark_{k}"): round(v[0] * 1000, 3) for k, v in candidates.items()
    }

    def fits(k: int) -> bool:
        return memory_budget is None or candidates[k][1] * bytes_per_txn <= memory_budget

    fitting = [k for k in candidates if fits(k)]
    if placement == "supersteps":
        best = deepest
        why = "as many supersteps as allowed (fixed by configuration)"
    elif fitting:
        best = min(fitting, key=lambda k: (candidates[k][0], k))
        why = (
            "cheapest predicted"
            if len(fitting) == len(candidates)
            else ("cheapest predicted within the driver's memory budget")
        )
    else:
        best = min(candidates, key=lambda k: (candidates[k][1], candidates[k][0]))
        why = "no plan fits the memory budget: the smallest driver share"
    if placement == "spark":
        why = f"Spark placement fixed by configuration; {why}"
    if best and depth + 1 > max_supersteps:
        why += f" (depth {depth} exceeds {max_supersteps} supersteps: the rest runs on the driver)"
    seconds, driver_rows, tail = candidates[best]
    return Plan(best, why, predicted, driver_rows * bytes_per_txn, tail)


def plan_statistics(routing: Routing) -> dict[str, Any]:
    """What the decision saw, for the batch's recorded decision."""
    return {
        "transactions": routing.n,
        "partitions": routing.partitions,
        "crossing": int(np.count_nonzero(routing.cross)),
        "depth": routing.max_depth,
        "route_ms": round(routing.seconds * 1000, 3),
    }
