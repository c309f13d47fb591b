"""The ``local`` executor: compiled transactions, chosen per batch, exact as the serial oracle.

Steps the compiler takes (:mod:`.analysis`) keep their tables as arrays (:mod:`.arrays`) and run a
generated numba kernel (:mod:`.codegen`), either as one sequential pass in timestamp order or as
parallel waves of conflict-free transactions; the choice is made per batch from cheap statistics
(:mod:`etl_dataflows.scheduling.decision`) and recorded in the batch result's ``decisions``. Other
steps run on an embedded serial executor (the oracle's own code) over the tables the compiler does
not take, and over the compiled tables they share with compiled steps through
:class:`~.shared_rows.SharedRows`. Either way the batch result equals the serial executor's.

The embedded serial executor is driven only through the batch protocol of
:class:`~etl_dataflows.executors.base.BaseExecutor` (``begin_batch``, ``run_transactions``,
``end_batch`` / ``rollback_batch``, each called from the same step of this executor's own protocol,
so a rollback undoes both halves) and :meth:`SerialExecutor.current_row` for pre-reads.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, ClassVar, cast

import numpy as np
import pyarrow as pa

from etl_dataflows.batch import StepDecision, TableDelta
from etl_dataflows.dataflow import CompiledDataflow, Dataflow
from etl_dataflows.exceptions import UnknownExecutor
from etl_dataflows.executors.base import BaseExecutor, TransactionOutcome
from etl_dataflows.executors.local.analysis import StepAnalysis, analyze, shared_tables
from etl_dataflows.executors.local.arrays import ArrayTable
from etl_dataflows.executors.local.codegen import generate_kernel
from etl_dataflows.executors.local.compiled_step import CompiledStep
from etl_dataflows.executors.local.shared_rows import SharedRows
from etl_dataflows.executors.local.strings import StringPool
from etl_dataflows.executors.local.window_arrays import WindowArrays
from etl_dataflows.executors.serial import SerialExecutor
from etl_dataflows.scheduling.decision import (
    FIXED_STRATEGIES,
    StepCosts,
    StepStatistics,
    Strategy,
    choose,
    cores,
    worth_planning,
)
from etl_dataflows.state import StateImage
from etl_dataflows.stateless import DeadLetters, empty_events
from etl_dataflows.tables import Table, WindowTable
from etl_dataflows.transaction import TransactionStep

logger = logging.getLogger(__name__)


class LocalExecutor(BaseExecutor):
    """Compiled and adaptive (see the module docstring).

    ``strategy`` fixes the strategy of every compiled step (for benchmarks and tests; one of
    :data:`~etl_dataflows.scheduling.decision.FIXED_STRATEGIES`, else :class:`UnknownExecutor`);
    ``workers`` caps the cores the waves use (default: all available).
    """

    name: ClassVar[str] = "local"
    variants: ClassVar[tuple[str, ...]] = FIXED_STRATEGIES
    variant_kind: ClassVar[str] = "strategy"
    #: Compile with the extensions of :mod:`.analysis` (strings, several key columns,
    #: pre-reads); the Spark executor distributes only the plain form.
    extended_compilation: ClassVar[bool] = True

    def __init__(
        self,
        flow: Dataflow | CompiledDataflow,
        state: StateImage | None = None,
        *,
        strategy: Strategy | None = None,
        workers: int | None = None,
    ) -> None:
        if strategy is not None and strategy not in FIXED_STRATEGIES:
            raise UnknownExecutor(
                f"the local executor has no strategy {strategy!r}; strategies: "
                f"{', '.join(FIXED_STRATEGIES)}"
            )
        self._forced = strategy
        self._workers = workers or cores()
        super().__init__(flow, state)

    @property
    def fixed_strategy(self) -> Strategy | None:
        """The strategy every compiled step is fixed to, or None (chosen per batch)."""
        return self._forced

    @classmethod
    def with_variant(
        cls, variant: str, flow: Dataflow | CompiledDataflow, state: StateImage | None = None
    ) -> LocalExecutor:
        """The local executor with every compiled step's strategy fixed to ``variant``."""
        return cls(flow, state, strategy=cast(Strategy, variant))

    # -- state ----------------------------------------------------------------------------------

    def _load_state(self, image: StateImage) -> None:
        self.compiled_tables, self.analysis = analyze(self.flow, self.extended_compilation)
        self.strings = StringPool()
        self._reserve_literals()
        self.arrays: dict[str, ArrayTable | WindowArrays] = {}
        for name in sorted(self.compiled_tables):
            table = self.flow.tables[name]
            arrays: ArrayTable | WindowArrays
            if isinstance(table, WindowTable):
                arrays = WindowArrays(table, pool=self.strings)
                start = 1
            else:
                assert isinstance(table, Table)
                arrays = ArrayTable(table, pool=self.strings)
                start = table.surrogate_start
            if name in image.tables:
                arrays.load(image.tables[name])
            arrays.sequence = max(arrays.sequence, image.sequences.get(name, start))
            self.arrays[name] = arrays
        rest = StateImage(
            {n: t for n, t in image.tables.items() if n not in self.compiled_tables},
            {n: v for n, v in image.sequences.items() if n not in self.compiled_tables},
        )
        #: Compiled tables that interpreted steps reach through the serial code (see .analysis).
        self.shared: dict[str, SharedRows] = {
            name: SharedRows(self._plain_arrays(name))
            for name in sorted(shared_tables(self.flow, self.compiled_tables, self.analysis))
        }
        self.serial = SerialExecutor(self.flow, rest, shared_rows=self.shared)
        # per step: the shared tables it touches (interpreted: counters to hand over; compiled:
        # writes the shared rows' indexes must catch up with)
        self._shares: dict[str, list[str]] = {
            step.id: sorted({op.table for op in step.operations if op.table in self.shared})
            for step in self.flow.transactional_steps()
        }
        self._steps: dict[str, CompiledStep] = {}
        self._cost: dict[str, StepCosts] = {}
        self._warm: set[tuple[str, str]] = set()
        self._compile_lock = threading.Lock()

    def _plain_arrays(self, name: str) -> ArrayTable:
        """The arrays of compiled plain table ``name`` (only those are shared)."""
        arrays = self.arrays[name]
        assert isinstance(arrays, ArrayTable)
        return arrays

    def _reserve_literals(self) -> None:
        """Give the string literals of every extended kernel their pool codes before any string
        of the state gets one. A kernel holds a literal as its code, so codes that depended on
        the state loaded would make a kernel's source, and so its name in the kernel cache,
        differ from one process to the next: a restarted service would compile every kernel
        again (tens of seconds on two cores) instead of loading it. Generating the sources here,
        in step order, on the empty pool makes the codes, and the sources, the same in every
        process."""
        for step in self.flow.transactional_steps():
            analysis = self.analysis[step.id]
            if analysis.compiled and analysis.extended:
                generate_kernel(self.flow, step, self.strings, analysis.pre_reads)

    def state_image(self) -> StateImage:
        image = self.serial.state_image()
        for name, arrays in self.arrays.items():
            image.tables[name] = arrays.image()
            image.sequences[name] = arrays.sequence
        return image

    def explain(self) -> dict[str, StepAnalysis]:
        """Per transactional step: compiled or not, and why not."""
        return dict(self.analysis)

    # -- batches --------------------------------------------------------------------------------

    def begin_batch(self) -> None:
        self.serial.begin_batch()
        for arrays in self.arrays.values():
            arrays.begin_batch()

    def rollback_batch(self) -> None:
        self.serial.rollback_batch()
        for arrays in self.arrays.values():
            arrays.restore()
        for rows in self.shared.values():
            rows.stale()

    def end_batch(self) -> tuple[dict[str, TableDelta], dict[str, int]]:
        deltas, sequences = self.serial.end_batch()
        for name, arrays in self.arrays.items():
            deltas[name] = arrays.end_batch()
            sequences[name] = arrays.sequence
        return deltas, sequences

    def compiled_step(self, step: TransactionStep) -> CompiledStep:
        """The compiled form of ``step`` (compiled on first use; the step must be one the
        analysis compiles, see :meth:`explain`)."""
        with self._compile_lock:  # the preparing thread may ask for it too
            return self._compiled_locked(step)

    def _compiled_locked(self, step: TransactionStep) -> CompiledStep:
        compiled = self._steps.get(step.id)
        if compiled is None:
            self._warm.discard(step.id)
            started = time.perf_counter()
            analysis = self.analysis[step.id]
            compiled = CompiledStep(
                self.flow,
                step,
                self.arrays,
                pool=self.strings if analysis.extended else None,
                pre_reads=analysis.pre_reads,
                reader=self._read_current,
            )
            self._steps[step.id] = compiled
            logger.info("compiled step=%s seconds=%.2f", step.id, time.perf_counter() - started)
        return compiled

    def warm_up(self) -> None:
        """Compile every compiled step's kernel now, on an empty batch (a service pays for it at
        start instead of in its first batch's latency)."""
        started = time.perf_counter()
        for step in self.flow.transactional_steps():
            if self.analysis[step.id].compiled:
                self.compiled_step(step).warm_up(empty_events(self.flow.schemas[step.input or ""]))
        logger.info("warmed up seconds=%.2f", time.perf_counter() - started)

    def _read_current(self, table: str, keys: list[tuple[Any, ...]]) -> list[dict[str, Any] | None]:
        """The current rows of ``keys`` in a table the serial part holds (for pre-reads)."""
        return self.serial.current_rows(self.flow.tables[table], keys)

    def prepare_transactions(self, step: TransactionStep, events: pa.Table) -> Any:
        if not self.analysis[step.id].compiled:
            return None
        return self.compiled_step(step).hoist(events)

    def run_transactions(
        self, step: TransactionStep, events: pa.Table, dead: DeadLetters, early: Any = None
    ) -> TransactionOutcome:
        if not self.analysis[step.id].compiled:
            started = time.perf_counter()
            shares = self._shares[step.id]
            for name in shares:  # the holder's counter is the table's
                self.serial.set_sequence(name, self.arrays[name].sequence)
            outcome = self.serial.run_transactions(step, events, dead)
            for name in shares:
                self.arrays[name].sequence = self.serial.sequence(name)
            outcome.decision = StepDecision(
                step.id,
                "interpreted",
                "; ".join(self.analysis[step.id].reasons[:3]),
                {
                    "transactions": events.num_rows,
                    "execute_ms": round((time.perf_counter() - started) * 1000, 3),
                },
            )
            return outcome
        step_started = time.perf_counter()
        compiled = self.compiled_step(step)
        prepared = compiled.bind(early if early is not None else compiled.hoist(events))
        n = prepared.n
        costs = self._cost.setdefault(step.id, StepCosts())
        declared = compiled.declared_cost_ns(prepared)
        stats = StepStatistics(
            transactions=n,
            operations=n * len(step.operations),
            cost_ns_per_txn=costs.sequential_ns(declared),
            generates_keys=compiled.generates_keys,
            scan_applies=compiled.scan_applies(prepared),
            scan_ns_per_txn=costs.scan_ns,
        )
        strategy, why = self._decide(stats, compiled, prepared)
        outputs, info = compiled.execute(prepared, strategy, self._workers)
        for name in self._shares[step.id]:
            self.shared[name].stale()

        finish_started = time.perf_counter()
        outcome = compiled.finish(prepared, outputs, dead)
        used = "sequential" if info.get("fell_back") else strategy
        if (step.id, used) not in self._warm:
            # The first run of a strategy includes compiling it: it says nothing of cost.
            self._warm.add((step.id, used))
            costs.tried.add(used)
        else:
            costs.observe(used, stats, declared, info["execute_ms"] / 1000, self._workers)
        outcome.decision = StepDecision(
            step.id,
            strategy,
            why,
            {
                **stats.as_dict(),
                "prepare_ms": round(prepared.prepare_seconds * 1000, 3),
                **info,
                "finish_ms": round((time.perf_counter() - finish_started) * 1000, 3),
                # the whole step: binding, choosing, the kernel and finishing (not a hoist
                # made ahead of time); what the pipeline's time by step counts
                "step_ms": round((time.perf_counter() - step_started) * 1000, 3),
            },
        )
        return outcome

    def _decide(
        self, stats: StepStatistics, compiled: CompiledStep, prepared: Any
    ) -> tuple[Strategy, str]:
        if compiled.has_windows:  # (entries are appended to one pool, in timestamp order)
            return "sequential", "a step with a window runs sequentially"
        # An extended step (see .analysis) runs sequentially or in waves only.
        extended = self.analysis[compiled.step.id].extended
        if self._forced is not None:
            if not extended or self._forced in ("sequential", "waves"):
                return self._forced, "fixed by configuration"
            return "sequential", f"{self._forced} does not take extended steps"
        if worth_planning(stats, self._workers):
            levels = compiled.levels(prepared)
            stats.levels = int(levels.max()) if len(levels) else 0
            widths = np.bincount(levels)[1:] if len(levels) else np.zeros(0, dtype=np.int64)
            stats.wave_rounds = int(np.sum(-(-widths // self._workers)))
        strategy, why = choose(stats, self._workers, self._cost[compiled.step.id].tried)
        if extended and strategy not in ("sequential", "waves"):
            return "sequential", f"extended step, not {strategy} ({why})"
        return strategy, why
