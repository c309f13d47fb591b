"""The executor interface and the batch driver every executor shares.

An executor owns the dataflow's state while it runs. :meth:`BaseExecutor.run_batch` walks the
steps in topological order; stateless steps run in :mod:`etl_dataflows.stateless` (identical for
all executors), and each transactional step is handed to the executor's
:meth:`BaseExecutor.run_transactions`. Executors differ only there, and every one must give
exactly the serial executor's result: the same committed set, final state and outputs.

Contract of :meth:`run_batch`, in order:

1. Check and cast each source's events (bad rows become dead letters).
2. Run the steps in topological order; a transactional step's transactions run in event-time order
   (``_ts``, ties by input row order), each committing or aborting as a whole.
3. Return the :class:`~etl_dataflows.batch.BatchResult`: sink outputs, dead letters, aborts, the net
   state delta per table, sequence values and per-step counts.

If a step raises (:class:`~etl_dataflows.exceptions.StepFailed`, a bug), the executor restores the
state it had before the batch and re-raises: a batch is applied entirely or not at all.

The batch protocol (the seam an executor implements, and that a composing executor such as the
``local`` one drives on an embedded executor for the steps it does not compile):

1. :meth:`BaseExecutor.begin_batch` once, before any change: start tracking changes.
2. :meth:`BaseExecutor.run_transactions` once per transactional step, in topological order. Each
   transaction commits or aborts as a whole inside this call; an aborted one leaves no trace (the
   executor undoes it itself), so a step's outcome never needs rolling back for an abort.
3. Either :meth:`BaseExecutor.end_batch` (the net deltas and sequence values since step 1; change
   tracking stops) or, if anything in between raised, :meth:`BaseExecutor.rollback_batch`, which
   undoes every change since step 1, of every step, committed transactions included.

Exactly one of ``end_batch`` or ``rollback_batch`` follows each ``begin_batch``; nothing else may
change the state in between. :meth:`BaseExecutor.prepare_transactions` may run at any time (on
another thread, for the next batch): it reads no state.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pyarrow as pa

from etl_dataflows.batch import (
    ABORT_SCHEMA,
    BatchResult,
    EngineBatch,
    StepDecision,
    StepStats,
    TableDelta,
)
from etl_dataflows.dataflow import (
    CompiledDataflow,
    Dataflow,
    FilterStep,
    FlatMapStep,
    MapStep,
    MergeStep,
    SinkStep,
    SourceStep,
    Step,
    ValidateStep,
    step_inputs,
)
from etl_dataflows.exceptions import BatchInputError, UnknownExecutor
from etl_dataflows.executors.collection import collection_held
from etl_dataflows.state import StateImage
from etl_dataflows.stateless import (
    DeadLetters,
    empty_events,
    prepare_source,
    run_filter,
    run_flat_map,
    run_map,
    run_merge,
    run_validate,
)
from etl_dataflows.transaction import TransactionStep

logger = logging.getLogger(__name__)


@dataclass
class AbortRecord:
    """One aborted transaction (see :data:`~etl_dataflows.batch.ABORT_SCHEMA`)."""

    step: str
    source: str
    pos: int
    ts: int
    kind: str
    reason: str


@dataclass
class TransactionOutcome:
    """What a transactional step produced for one batch."""

    output: pa.Table
    committed: int
    aborts: list[AbortRecord] | pa.Table = field(default_factory=list)
    decision: StepDecision | None = None

    @property
    def aborted(self) -> int:
        return len(self.aborts) if isinstance(self.aborts, list) else int(self.aborts.num_rows)


class BaseExecutor(ABC):
    """Runs batches of one dataflow against state it owns; see the module docstring."""

    name: ClassVar[str]
    #: What ``<name>:<variant>`` may name in :func:`~etl_dataflows.executors.create_executor`
    #: (a fixed strategy, a placement): none unless the executor has some.
    variants: ClassVar[tuple[str, ...]] = ()
    #: What a variant is, for error messages (``strategy``, ``placement``).
    variant_kind: ClassVar[str] = "variant"

    def __init__(self, flow: Dataflow | CompiledDataflow, state: StateImage | None = None) -> None:
        self.flow = flow.build() if isinstance(flow, Dataflow) else flow
        with collection_held():  # (millions of objects without cycles: .collection)
            self._load_state(state or StateImage.empty(self.flow.tables))

    @classmethod
    def with_variant(
        cls, variant: str, flow: Dataflow | CompiledDataflow, state: StateImage | None = None
    ) -> BaseExecutor:
        """This executor fixed to ``variant`` (one of :attr:`variants`; an executor that has
        variants overrides this)."""
        raise UnknownExecutor(f"the {cls.name} executor has no {cls.variant_kind} {variant!r}")

    # -- what an executor implements ----------------------------------------------------------

    @abstractmethod
    def _load_state(self, image: StateImage) -> None:
        """Replace the executor's state with ``image``."""

    @abstractmethod
    def state_image(self) -> StateImage:
        """The current state in canonical form."""

    @abstractmethod
    def begin_batch(self) -> None:
        """Step 1 of the batch protocol (module docstring): start tracking changes, for the
        deltas :meth:`end_batch` returns and for :meth:`rollback_batch`."""

    @abstractmethod
    def run_transactions(
        self, step: TransactionStep, events: pa.Table, dead: DeadLetters, early: Any = None
    ) -> TransactionOutcome:
        """Step 2 of the batch protocol: run one transaction per event in event-time order (see
        the module docstring); aborted transactions are undone here and reported in the outcome
        (``error`` aborts also as dead letters in ``dead``). ``early`` is what
        :meth:`prepare_transactions` returned for this step and batch (or None when the step's
        input was not ready early)."""

    @abstractmethod
    def end_batch(self) -> tuple[dict[str, TableDelta], dict[str, int]]:
        """Step 3 of the batch protocol: the net deltas per table since :meth:`begin_batch` and
        the sequence values; the changes stay and tracking stops."""

    @abstractmethod
    def rollback_batch(self) -> None:
        """Step 3 when the batch failed: undo every change since :meth:`begin_batch` (every
        step's committed transactions and the sequences); tracking stops."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (threads, sessions); the default has none."""

    def warm_up(self) -> None:  # noqa: B027 - optional hook
        """Do the one-time work of the first batch now (compiling); the default has none."""

    # -- the driver ------------------------------------------------------------------------------

    def run_batch(self, batch: EngineBatch) -> BatchResult:
        """Run one batch through the whole dataflow (see the module docstring)."""
        return self.run_prepared(self.prepare_batch(batch))

    def run_stream(self, batches: Iterable[EngineBatch]) -> Iterator[BatchResult]:
        """Run batches in order, preparing batch k+1 on a second thread while the caller handles
        the result of batch k (commits it, say).

        Preparing touches no state (checking and casting the events, the stateless steps that do
        not depend on a transactional step, and the executor's own per-batch work such as the local
        executor's column-at-a-time expressions), so the results equal :meth:`run_batch`'s, batch
        by batch. Batch k+1 is prepared after batch k has run, not while it runs: both are mostly
        short Python and Arrow calls that hold the GIL, and side by side each waits for the other
        (slower than no second thread at all: docs/benchmarks.md); a caller's commit mostly waits
        on I/O or C code and leaves the GIL free.
        """
        iterator = iter(batches)
        first = next(iterator, None)
        if first is None:
            return
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="streamdi-prepare") as pool:
            future = pool.submit(self.prepare_batch, first)
            for following in iterator:
                result = self.run_prepared(future.result())
                future = pool.submit(self.prepare_batch, following)
                yield result
            yield self.run_prepared(future.result())

    def _pure_steps(self) -> set[str]:
        """Steps that depend on no transactional step (they can run before the state is ready)."""
        if not hasattr(self, "_pure"):
            pure: set[str] = set()
            for step in self.flow.steps:
                if isinstance(step, TransactionStep | SinkStep):
                    continue
                if all(upstream in pure for upstream in step_inputs(step)):
                    pure.add(step.id)
            self._pure = pure
        return self._pure

    def prepare_transactions(self, step: TransactionStep, events: pa.Table) -> Any:
        """Per-batch work of a transactional step that needs no state (it reads none, so it may
        run on another thread while a batch runs); what it returns is handed to
        :meth:`run_transactions` as ``early``. The default has none."""
        return None

    def prepare_batch(self, batch: EngineBatch) -> PreparedBatch:
        """The stateless part of a batch (see :meth:`run_stream`). A step that fails here fails
        the batch when it runs, with nothing applied."""
        flow = self.flow
        unknown = sorted(set(batch.inputs) - set(flow.sources))
        if unknown:
            raise BatchInputError(
                f"batch {batch.batch_id} has events for unknown sources {unknown}; the dataflow "
                f"{flow.name!r} reads {list(flow.sources)}"
            )
        prepared = PreparedBatch(batch, DeadLetters(flow.sources, [s.id for s in flow.steps]))
        pure = self._pure_steps()
        try:
            for step in flow.steps:
                if step.id in pure:
                    prepared.produced[step.id] = self._run_stateless(step, prepared)
                elif isinstance(step, TransactionStep) and step.input in pure:
                    events = prepared.produced[step.input]
                    prepared.early[step.id] = self.prepare_transactions(step, events)
        except BaseException as exc:  # raised when the batch runs, like any step failure
            prepared.error = exc
        return prepared

    def _run_stateless(self, step: Step, prepared: PreparedBatch) -> pa.Table:
        flow, dead, produced = self.flow, prepared.dead, prepared.produced
        schema = flow.schemas[step.id]
        st = prepared.stats.setdefault(step.id, StepStats())
        before_dead = len(dead)
        if isinstance(step, SourceStep):
            events = prepared.batch.inputs.get(step.id)
            if events is None:
                out = empty_events(schema)
            else:
                st.rows_in = events.num_rows
                out = prepare_source(flow, step.id, events, dead)
        elif isinstance(step, MergeStep):
            ins = [produced[i] for i in step.inputs]
            st.rows_in = sum(t.num_rows for t in ins)
            out = run_merge(step, ins, schema)
        else:
            assert step.input is not None
            table = produced[step.input]
            st.rows_in = table.num_rows
            in_schema = flow.schemas[step.input]
            if isinstance(step, MapStep):
                out = run_map(step, table, schema, dead)
            elif isinstance(step, FilterStep):
                out = run_filter(step, table, in_schema, dead)
            elif isinstance(step, ValidateStep):
                out = run_validate(step, table, in_schema, dead)
            else:
                assert isinstance(step, FlatMapStep)
                out = run_flat_map(step, table, schema, dead)
        st.rows_out = out.num_rows
        st.dead_letters = len(dead) - before_dead
        return out

    def run_prepared(self, prepared: PreparedBatch) -> BatchResult:
        """Run a prepared batch: the transactional steps and everything downstream of them."""
        if prepared.error is not None:
            raise prepared.error
        flow, batch = self.flow, prepared.batch
        dead, produced, stats = prepared.dead, prepared.produced, prepared.stats
        aborts: list[pa.Table] = []
        decisions: list[StepDecision] = []
        outputs: dict[str, pa.Table] = {}
        self.begin_batch()
        try:
            for step in flow.steps:
                if step.id in produced:
                    continue
                if isinstance(step, SinkStep):
                    assert step.input is not None
                    out = produced[step.input]
                    st = stats.setdefault(step.id, StepStats())
                    st.rows_in = st.rows_out = out.num_rows
                    outputs[step.id] = produced[step.id] = out
                elif isinstance(step, TransactionStep):
                    assert step.input is not None
                    table = produced[step.input]
                    st = stats.setdefault(step.id, StepStats())
                    st.rows_in = table.num_rows
                    before_dead = len(dead)
                    outcome = self.run_transactions(step, table, dead, prepared.early.get(step.id))
                    st.rows_out = outcome.output.num_rows
                    st.dead_letters = len(dead) - before_dead
                    st.committed = outcome.committed
                    st.aborted = outcome.aborted
                    aborts.append(
                        outcome.aborts
                        if isinstance(outcome.aborts, pa.Table)
                        else _abort_table(outcome.aborts)
                    )
                    if outcome.decision is not None:
                        decisions.append(outcome.decision)
                    produced[step.id] = outcome.output
                else:
                    produced[step.id] = self._run_stateless(step, prepared)
            deltas, sequences = self.end_batch()
        except BaseException:
            self.rollback_batch()
            raise
        logger.debug(
            "ran batch_id=%s events=%s dead_letters=%s aborts=%s",
            batch.batch_id,
            batch.num_events,
            len(dead),
            sum(t.num_rows for t in aborts),
        )
        return BatchResult(
            batch_id=batch.batch_id,
            outputs={name: outputs[name] for name in flow.sinks if name in outputs},
            dead_letters=dead.table(),
            aborts=pa.concat_tables(aborts) if aborts else _abort_table([]),
            deltas=deltas,
            sequences=sequences,
            stats={s.id: stats[s.id] for s in flow.steps if s.id in stats},
            decisions=decisions,
        )


@dataclass
class PreparedBatch:
    """A batch whose stateless part has run (see :meth:`BaseExecutor.run_stream`)."""

    batch: EngineBatch
    dead: DeadLetters
    produced: dict[str, pa.Table] = field(default_factory=dict)
    stats: dict[str, StepStats] = field(default_factory=dict)
    early: dict[str, Any] = field(default_factory=dict)
    error: BaseException | None = None


def _abort_table(aborts: list[AbortRecord]) -> pa.Table:
    columns: dict[str, list[Any]] = {f.name: [] for f in ABORT_SCHEMA}
    for record in aborts:
        for name in columns:
            columns[name].append(getattr(record, name))
    return pa.Table.from_arrays(
        [pa.array(columns[f.name], type=f.type) for f in ABORT_SCHEMA], schema=ABORT_SCHEMA
    )
