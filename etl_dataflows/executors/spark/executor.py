"""The ``spark`` executor: the local executor with a "where to run" dimension on PySpark.

The driver keeps the authoritative state between batches (the local executor's arrays), so
driver-side runs, deltas, rollback and state images are the local executor's. Per batch and per
compiled transactional step:

1. **Route** (:mod:`.routing`): keys to partitions, crossing transactions, depths.
2. **Plan** (:mod:`.plan`): the driver (small batches, or many crossing transactions), one Spark
   pass (no crossing transaction), or supersteps; recorded in the batch's ``decisions``.
3. **Run** the plan, in this order: for s = 0, 1, ...: the crossing transactions of depth s on the
   driver (abort decisions for transactions spanning partitions are made there, where all their
   keys are), then one Spark pass — each partition's local transactions of depth s with the state
   rows of their keys, as Arrow (:mod:`.task`); their net changes come back and are written into
   the driver's arrays (remembered first, for the batch's deltas and rollback). The tail deeper than
   the last pass runs on the driver.
4. **Merge**: outputs and aborts of every part in timestamp order (ties by input row), dead
   letters for the error aborts in that order: exactly what the local executor (and the serial
   oracle) produce.

Steps the local executor cannot compile run interpreted on the driver (the serial executor's code).
If a Spark pass fails the batch fails and is rolled back, like any step failure; a session that
cannot start raises :class:`~.exceptions.SparkUnavailable`.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable, Iterator
from typing import Any, ClassVar, cast

import numpy as np
import pyarrow as pa

from etl_dataflows.batch import StepDecision
from etl_dataflows.dataflow import CompiledDataflow, Dataflow
from etl_dataflows.exceptions import UnknownExecutor
from etl_dataflows.executors.base import TransactionOutcome
from etl_dataflows.executors.local import LocalExecutor
from etl_dataflows.executors.local.arrays import ArrayTable
from etl_dataflows.executors.local.compiled_step import CompiledStep, HoistedValues, Hoisting
from etl_dataflows.executors.spark.jobs import PassTiming, ShippedFlow, run_pass
from etl_dataflows.executors.spark.plan import (
    PLACEMENTS,
    Placement,
    Plan,
    SparkCosts,
    bytes_per_transaction,
    choose_plan,
    plan_statistics,
    worth_routing,
)
from etl_dataflows.executors.spark.routing import SEQUENCE_OWNER, DepthScratch, Routing, route
from etl_dataflows.executors.spark.session import SparkConfig, current_config, spark_session
from etl_dataflows.executors.spark.task import (
    SLOT,
    PartitionResult,
    PartitionWork,
    emitted_and_failed,
    group_name,
    state_rows,
    write_state,
)
from etl_dataflows.state import StateImage
from etl_dataflows.stateless import DeadLetters, event_rows
from etl_dataflows.transaction import TransactionStep
from etl_dataflows.types import META_COLUMNS, TS

logger = logging.getLogger(__name__)

#: A part of a batch that ran somewhere: its output and output rows, its aborts and their rows.
Part = tuple[pa.Table, np.ndarray, pa.Table, np.ndarray]


class SparkExecutor(LocalExecutor):
    """Local execution plus Spark passes (see the module docstring).

    ``placement`` fixes where compiled steps run: ``"driver"``; ``"spark"``, at least one Spark
    pass whatever the batch size (the cheapest number of passes); ``"supersteps"``, as many passes
    as the configuration allows. None: the configuration's ``placement`` (``auto`` chooses per
    batch). ``config`` overrides the process's Spark configuration (:mod:`.session`).
    """

    name: ClassVar[str] = "spark"
    variants: ClassVar[tuple[str, ...]] = PLACEMENTS
    variant_kind: ClassVar[str] = "placement"
    #: Spark tasks run the plain compiled form only (other steps stay on the serial code).
    extended_compilation: ClassVar[bool] = False

    @property
    def plain_arrays(self) -> dict[str, ArrayTable]:
        """The driver's arrays: plain tables only, since the plain form compiles no window."""
        assert all(isinstance(a, ArrayTable) for a in self.arrays.values())
        return cast(dict[str, ArrayTable], self.arrays)

    def __init__(
        self,
        flow: Dataflow | CompiledDataflow,
        state: StateImage | None = None,
        *,
        placement: Placement | None = None,
        config: SparkConfig | None = None,
    ) -> None:
        if placement is not None and placement not in PLACEMENTS:
            raise UnknownExecutor(
                f"the spark executor has no placement {placement!r}; placements: "
                f"{', '.join(PLACEMENTS)}"
            )
        self._placement = placement
        self._config = config
        self._spark_costs: dict[str, SparkCosts] = {}
        self._passes_seen: set[str] = set()
        self._scratch = DepthScratch()
        self._local: dict[str, np.ndarray] = {}
        super().__init__(flow, state)
        self._shipped = ShippedFlow(self.flow, uuid.uuid4().hex)

    @classmethod
    def with_variant(
        cls, variant: str, flow: Dataflow | CompiledDataflow, state: StateImage | None = None
    ) -> SparkExecutor:
        """The Spark executor with its placement fixed to ``variant``."""
        return cls(flow, state, placement=cast(Placement, variant))

    @property
    def config(self) -> SparkConfig:
        return self._config or current_config()

    @property
    def placement(self) -> Placement | None:
        if self._placement is not None:
            return self._placement
        chosen = self.config.placement
        if chosen == "auto":
            return None
        if chosen not in ("driver", "spark", "supersteps"):
            raise ValueError(f"unknown Spark placement {chosen!r}")
        return chosen  # type: ignore[return-value]

    def partitions(self) -> int:
        """Tasks per pass: the configured number, else the cores of a local master, else the
        cluster's default parallelism."""
        config = self.config
        if config.partitions:
            return config.partitions
        if config.is_local:
            return config.cores()
        return int(spark_session().sparkContext.defaultParallelism)

    def close(self) -> None:
        self._shipped.release()
        super().close()

    # -- choosing -------------------------------------------------------------------------------

    def _goes_to_driver(self, step: TransactionStep, n: int) -> str | None:
        """Why the step runs on the driver without routing, or None."""
        if not self.analysis[step.id].compiled:
            return "not compiled: runs interpreted on the driver"
        placement = self.placement
        if placement == "driver":
            return "driver placement fixed by configuration"
        if n == 0:
            return "empty batch"
        if placement is None and n < self.config.min_transactions:
            return f"small batch (under {self.config.min_transactions} transactions)"
        return None

    def _driver_wins(self, step: TransactionStep, compiled: CompiledStep, n: int) -> str | None:
        """Why even the best Spark plan cannot beat the driver on this batch, or None (only in
        ``auto`` placement; see :func:`.plan.worth_routing`)."""
        if self.placement is not None:
            return None
        costs = self._spark_costs.setdefault(step.id, SparkCosts())
        bytes_per_txn = bytes_per_transaction(compiled)
        if worth_routing(n, costs, self.partitions(), bytes_per_txn, self.config.memory_budget):
            return None
        return (
            "Spark cannot win even without crossing transactions (measured costs: pass "
            f"{costs.pass_seconds * 1000:.0f} ms, ship {costs.ship_ns:.0f} ns, task "
            f"{costs.task_ns:.0f} ns, driver {costs.driver_ns:.0f} ns per transaction)"
        )

    def prepare_transactions(self, step: TransactionStep, events: pa.Table) -> Any:
        n = events.num_rows
        if self._goes_to_driver(step, n) is not None:
            return super().prepare_transactions(step, events)
        compiled = self.compiled_step(step)
        if self._driver_wins(step, compiled, n) is not None:
            return super().prepare_transactions(step, events)
        return self.routing_hoists(compiled, events)

    def routing_hoists(self, compiled: CompiledStep, events: pa.Table) -> dict[int, HoistedValues]:
        """The event-only key and ``when`` values routing needs (the rest is hoisted in the
        tasks, where user functions run in parallel)."""
        kernel = compiled.kernel
        wanted = {*kernel.key_hoist, *(w for w in kernel.when_hoist if w is not None)}
        return compiled.hoist_values(events, sorted(wanted))

    def run_transactions(
        self, step: TransactionStep, events: pa.Table, dead: DeadLetters, early: Any = None
    ) -> TransactionOutcome:
        n = events.num_rows
        why = self._goes_to_driver(step, n)
        if why is not None:
            return self._on_driver(step, events, dead, early, why, {"transactions": n})
        compiled = self.compiled_step(step)
        costs = self._spark_costs.setdefault(step.id, SparkCosts())
        bytes_per_txn = bytes_per_transaction(compiled)
        partitions = self.partitions()
        why = self._driver_wins(step, compiled, n)
        if why is not None:
            return self._on_driver(step, events, dead, early, why, {"transactions": n})
        hoisted = early if isinstance(early, dict) else None
        if hoisted is None:
            if isinstance(early, Hoisting):
                hoisted = dict(enumerate(early.hoisted))
            else:
                hoisted = self.routing_hoists(compiled, events)
        ts = np.asarray(events.column(TS).to_numpy(), dtype=np.int64)
        routing = route(compiled, self.plain_arrays, hoisted, ts, partitions, self._scratch)
        plan = choose_plan(
            routing,
            costs,
            max_supersteps=self.config.max_supersteps,
            bytes_per_txn=bytes_per_txn,
            memory_budget=self.config.memory_budget,
            placement=self.placement,
        )
        stats = {**plan_statistics(routing), "predicted_ms": plan.predicted_ms}
        if plan.passes == 0:
            return self._on_driver(step, events, dead, early, plan.why, stats)
        return self._on_spark(step, compiled, events, dead, routing, plan, stats)

    # -- the driver -----------------------------------------------------------------------------

    def _on_driver(
        self,
        step: TransactionStep,
        events: pa.Table,
        dead: DeadLetters,
        early: Any,
        why: str,
        stats: dict[str, Any],
    ) -> TransactionOutcome:
        started = time.perf_counter()
        outcome = super().run_transactions(
            step, events, dead, early if isinstance(early, Hoisting) else None
        )
        seconds = time.perf_counter() - started
        if self.analysis[step.id].compiled:
            self._spark_costs.setdefault(step.id, SparkCosts()).observe_driver(
                events.num_rows, seconds
            )
        outcome.decision = StepDecision(
            step.id,
            "driver",
            why,
            {**stats, "total_ms": round(seconds * 1000, 3)},
            local=outcome.decision,
        )
        return outcome

    def _driver_part(self, compiled: CompiledStep, events: pa.Table, rows: np.ndarray) -> Part:
        """Run transactions ``rows`` of the batch on the driver, in timestamp order."""
        prepared = compiled.prepare(events.take(pa.array(rows, type=pa.int64())))
        outputs, _ = compiled.execute(prepared, "sequential")
        outcome = compiled.finish(prepared, outputs, DeadLetters(self.flow.sources))
        emitted, failed = emitted_and_failed(prepared, outputs)
        assert isinstance(outcome.aborts, pa.Table)
        output = outcome.output.drop_columns(list(META_COLUMNS))
        return output, rows[emitted], outcome.aborts, rows[failed]

    # -- Spark ----------------------------------------------------------------------------------

    def _on_spark(
        self,
        step: TransactionStep,
        compiled: CompiledStep,
        events: pa.Table,
        dead: DeadLetters,
        routing: Routing,
        plan: Plan,
        stats: dict[str, Any],
    ) -> TransactionOutcome:
        self._start_session()  # outside the clock (once per process)
        started = time.perf_counter()
        costs = self._spark_costs[step.id]
        parts: list[Part] = []
        timings: list[PassTiming] = []
        driver_seconds = ship_seconds = 0.0
        shipped_txns = 0
        local = ~routing.cross
        for s in range(plan.passes):
            if s >= 1:
                rows = np.flatnonzero(routing.cross & (routing.depth == s))
                if len(rows):
                    driver_started = time.perf_counter()
                    parts.append(self._driver_part(compiled, events, rows))
                    driver_seconds += time.perf_counter() - driver_started
            at_depth = local & (routing.depth == s)
            groups = [
                np.flatnonzero(at_depth & (routing.home == p)) for p in range(routing.partitions)
            ]
            groups = [rows for rows in groups if len(rows)]
            if not groups:
                continue
            ship_started = time.perf_counter()
            touched: list[dict[str, np.ndarray]] = []

            def works(
                groups: list[np.ndarray] = groups, touched: list[Any] = touched
            ) -> Iterator[PartitionWork]:
                for rows in groups:  # one partition's work alive at a time
                    work, slots = self._work(step, compiled, events, routing, rows)
                    touched.append(slots)
                    yield work

            results, timing = self._run_pass(step.id, works())
            self._apply(results, touched)
            for result in results:
                parts.append((result.output, result.output_rows, result.aborts, result.abort_rows))
                logger.debug("spark task step=%s timings=%s", step.id, result.timings)
            timings.append(timing)
            transactions = sum(len(rows) for rows in groups)
            shipped_txns += transactions
            ship_seconds += (time.perf_counter() - ship_started) - timing.job_seconds
            if step.id in self._passes_seen:  # the first pass starts the workers: not a cost
                costs.observe_pass(
                    transactions, timing.job_seconds, timing.slowest_task, timing.total_task
                )
            self._passes_seen.add(step.id)
        tail = np.flatnonzero(routing.depth >= plan.passes)
        if len(tail):
            driver_started = time.perf_counter()
            parts.append(self._driver_part(compiled, events, tail))
            driver_seconds += time.perf_counter() - driver_started
        merge_started = time.perf_counter()
        outcome = self._merge(step, events, parts, dead)
        merge_seconds = time.perf_counter() - merge_started
        costs.observe_ship(shipped_txns, ship_seconds + merge_seconds)
        driver_txns = int(np.count_nonzero(routing.cross & (routing.depth < plan.passes))) + len(
            tail
        )
        if driver_txns:
            costs.observe_driver(driver_txns, driver_seconds)
        figures = {
            **stats,
            "passes": len(timings),
            "spark_transactions": shipped_txns,
            "driver_transactions": driver_txns,
            "ship_ms": round(ship_seconds * 1000, 3),
            "broadcast_ms": round(sum(t.broadcast_seconds for t in timings) * 1000, 3),
            "job_ms": round(sum(t.job_seconds for t in timings) * 1000, 3),
            "task_ms": round(sum(t.total_task for t in timings) * 1000, 3),
            "slowest_task_ms": round(sum(t.slowest_task for t in timings) * 1000, 3),
            "task_phases_ms": {
                phase: round(sum(t.phases.get(phase, 0.0) for t in timings) * 1000, 3)
                for phase in ("fetch", "load", "prepare", "execute", "finish", "changes")
            },
            "driver_ms": round(driver_seconds * 1000, 3),
            "merge_ms": round(merge_seconds * 1000, 3),
            "total_ms": round((time.perf_counter() - started) * 1000, 3),
        }
        outcome.decision = StepDecision(step.id, plan.strategy, plan.why, figures)
        logger.info(
            "spark batch step=%s strategy=%s passes=%s spark_transactions=%s "
            "driver_transactions=%s total_ms=%.0f",
            step.id,
            plan.strategy,
            len(timings),
            shipped_txns,
            driver_txns,
            figures["total_ms"],
        )
        return outcome

    def _start_session(self) -> None:
        spark_session()

    def _run_pass(
        self, step: str, works: Iterable[PartitionWork]
    ) -> tuple[list[PartitionResult], PassTiming]:
        """One Spark pass: task ``i`` runs the ``i``-th work (:func:`.jobs.run_pass`)."""
        return run_pass(self._shipped, step, works)

    def _work(
        self,
        step: TransactionStep,
        compiled: CompiledStep,
        events: pa.Table,
        routing: Routing,
        rows: np.ndarray,
    ) -> tuple[PartitionWork, dict[str, np.ndarray]]:
        """One partition's transactions with the state of the keys they touch, and those keys'
        slots in the driver's arrays (local slot ``i`` is driver slot ``touched[table][i]``)."""
        state: dict[str, pa.Table] = {}
        sequences: dict[str, int] = {}
        touched: dict[str, np.ndarray] = {}
        local_of: dict[str, np.ndarray] = {}
        for name in compiled.kernel.tables:
            arrays = self.plain_arrays[name]
            slots = routing.touched_slots(name, rows, arrays.capacity)
            touched[name] = slots
            state[name] = state_rows(arrays, slots)
            sequences[name] = arrays.sequence
            local = self._local_slots(name, arrays.capacity)
            local[slots] = np.arange(len(slots), dtype=np.int64)
            local_of[name] = local
        columns = {}
        for group in routing.groups:
            slots = group.slots[rows]
            mapped = local_of[group.table][np.maximum(slots, 0)]
            local = np.where(slots >= 0, mapped, -1)  # int32: half the bytes on the wire
            columns[group_name(group.table, group.hoisted)] = local.astype(np.int32)
        work = PartitionWork(
            step.id,
            events.take(pa.array(rows, type=pa.int64())),
            rows,
            pa.table(columns),
            state,
            sequences,
        )
        return work, touched

    def _local_slots(self, table: str, capacity: int) -> np.ndarray:
        """A scratch array of ``capacity`` entries per table (only entries just written are
        read)."""
        scratch = self._local.get(table)
        if scratch is None or scratch.shape[0] < capacity:
            scratch = np.empty(max(capacity, 1024), dtype=np.int64)
            self._local[table] = scratch
        return scratch

    def _apply(self, results: list[PartitionResult], touched: list[dict[str, np.ndarray]]) -> None:
        """Write the partitions' changed rows into the driver's arrays (remembering the values
        they replace, for the batch's deltas and rollback) and advance the sequences (only
        partition 0 may draw keys)."""
        for name, arrays in self.plain_arrays.items():
            before = arrays.sequence
            drawn: list[int] = []
            for result, slots_of in zip(results, touched, strict=True):
                changes = result.changes.get(name)
                if changes is None:
                    continue
                drawn.append(result.sequences[name])
                if changes.num_rows:
                    local = np.asarray(changes.column(SLOT).to_numpy(), dtype=np.int64)
                    slots = slots_of[name][local]
                    arrays.remember(slots)
                    write_state(arrays, slots, changes)
            moved = [value for value in drawn if value != before]
            if len(moved) > 1:
                raise AssertionError(
                    f"surrogate keys of {name!r} drawn in several partitions "
                    f"(only partition {SEQUENCE_OWNER} may draw)"
                )
            if moved:
                arrays.sequence = moved[0]

    def _merge(
        self, step: TransactionStep, events: pa.Table, parts: list[Part], dead: DeadLetters
    ) -> TransactionOutcome:
        """The step's outcome from its parts, in timestamp order (ties by input row)."""
        output = pa.concat_tables([p[0] for p in parts], promote_options="permissive")
        output_rows = np.concatenate([p[1] for p in parts]).astype(np.int64)
        ts = np.asarray(events.column(TS).to_numpy(), dtype=np.int64)
        order = np.lexsort((output_rows, ts[output_rows]))
        output = output.take(pa.array(order, type=pa.int64()))
        taken = pa.array(output_rows[order], type=pa.int64())
        for name in META_COLUMNS:  # the event's own columns, from the driver's copy
            output = output.append_column(name, events.column(name).take(taken))
        aborts = pa.concat_tables([p[2] for p in parts])
        abort_rows = np.concatenate([p[3] for p in parts]).astype(np.int64)
        abort_ts = np.asarray(aborts.column("ts").to_numpy(), dtype=np.int64)
        order = np.lexsort((abort_rows, abort_ts))
        aborts = aborts.take(pa.array(order, type=pa.int64()))
        abort_rows = abort_rows[order]
        kinds = aborts.column("kind").to_pylist()
        errors = [i for i, kind in enumerate(kinds) if kind == "error"]
        if errors:
            reasons = aborts.column("reason").to_pylist()
            taken = events.take(pa.array(abort_rows[errors], type=pa.int64()))
            payloads = event_rows(taken, self.flow.schemas[step.input or ""])
            for payload, i in zip(payloads, errors, strict=True):
                dead.add_row(step.id, payload, reasons[i])
        committed = events.num_rows - aborts.num_rows
        return TransactionOutcome(
            output=output.combine_chunks(), committed=committed, aborts=aborts.combine_chunks()
        )
