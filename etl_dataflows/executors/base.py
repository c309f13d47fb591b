"""The executor interface and the batch driver every executor shares.

An executor owns the dataflow's state while it runs. :meth:`BaseExecutor.run_batch` walks the
steps in topological order; stateless steps run in :mod:`etl_dataflows.stateless` (identical for
all executors), and each transactional step is handed to the executor's
:meth:`BaseExecutor._run_transactions`. Executors differ only there, and every one must give
exactly the serial executor's result: the same committed set, final state and outputs.

Contract of :meth:`run_batch`, in order:

1. Check and cast each source's events (bad rows become dead letters).
2. Run the steps in topological order; a transactional step's transactions run in event-time order
   (``_ts``, ties by input row order), each committing or aborting as a whole.
3. Return the :class:`~etl_dataflows.batch.BatchResult`: sink outputs, dead letters, aborts, the net
   state delta per table, sequence values and per-step counts.

If a step raises (:class:`~etl_dataflows.exceptions.StepFailed`, a bug), the executor restores the
state it had before the batch and re-raises: a batch is applied entirely or not at all.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pyarrow as pa

from etl_dataflows.batch import ABORT_SCHEMA, BatchResult, EngineBatch, StepStats, TableDelta
from etl_dataflows.dataflow import (
    CompiledDataflow,
    Dataflow,
    FilterStep,
    FlatMapStep,
    MapStep,
    MergeStep,
    SinkStep,
    SourceStep,
    ValidateStep,
)
from etl_dataflows.exceptions import BatchInputError
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
    decision: dict[str, Any] | None = None

    @property
    def aborted(self) -> int:
        return len(self.aborts) if isinstance(self.aborts, list) else int(self.aborts.num_rows)


class BaseExecutor(ABC):
    """Runs batches of one dataflow against state it owns; see the module docstring."""

    name: ClassVar[str]

    def __init__(self, flow: Dataflow | CompiledDataflow, state: StateImage | None = None) -> None:
        self.flow = flow.build() if isinstance(flow, Dataflow) else flow
        self._load_state(state or StateImage.empty(self.flow.tables))

    # -- what an executor implements ----------------------------------------------------------

    @abstractmethod
    def _load_state(self, image: StateImage) -> None:
        """Replace the executor's state with ``image``."""

    @abstractmethod
    def state_image(self) -> StateImage:
        """The current state in canonical form."""

    @abstractmethod
    def _begin_batch(self) -> None:
        """Start tracking changes (for deltas and for rollback of a failed batch)."""

    @abstractmethod
    def _run_transactions(
        self, step: TransactionStep, events: pa.Table, dead: DeadLetters
    ) -> TransactionOutcome:
        """Run one transaction per event in event-time order; see the module docstring."""

    @abstractmethod
    def _end_batch(self) -> tuple[dict[str, TableDelta], dict[str, int]]:
        """Finish the batch: the net deltas per table and the sequence values."""

    @abstractmethod
    def _rollback_batch(self) -> None:
        """Undo every change since :meth:`_begin_batch`."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (threads, sessions); the default has none."""

    # -- the driver ------------------------------------------------------------------------------

    def run_batch(self, batch: EngineBatch) -> BatchResult:
        """Run one batch through the whole dataflow (see the module docstring)."""
        flow = self.flow
        unknown = sorted(set(batch.inputs) - set(flow.sources))
        if unknown:
            raise BatchInputError(
                f"batch {batch.batch_id} has events for unknown sources {unknown}; the dataflow "
                f"{flow.name!r} reads {list(flow.sources)}"
            )
        dead = DeadLetters(flow.sources)
        aborts: list[pa.Table] = []
        stats: dict[str, StepStats] = {}
        decisions: list[dict[str, Any]] = []
        produced: dict[str, pa.Table] = {}
        outputs: dict[str, pa.Table] = {}
        self._begin_batch()
        try:
            for step in flow.steps:
                schema = flow.schemas[step.id]
                st = stats.setdefault(step.id, StepStats())
                before_dead = len(dead)
                if isinstance(step, SourceStep):
                    events = batch.inputs.get(step.id)
                    if events is None:
                        out = empty_events(schema)
                    else:
                        st.rows_in = events.num_rows
                        out = prepare_source(flow, step.id, events, dead)
                elif isinstance(step, MergeStep):
                    ins = [produced[i] for i in step.inputs]
                    st.rows_in = sum(t.num_rows for t in ins)
                    out = run_merge(step, ins, schema)
                elif isinstance(step, SinkStep):
                    assert step.input is not None
                    out = produced[step.input]
                    st.rows_in = out.num_rows
                    outputs[step.id] = out
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
                    elif isinstance(step, FlatMapStep):
                        out = run_flat_map(step, table, schema, dead)
                    else:
                        assert isinstance(step, TransactionStep)
                        outcome = self._run_transactions(step, table, dead)
                        out = outcome.output
                        st.committed = outcome.committed
                        st.aborted = outcome.aborted
                        aborts.append(
                            outcome.aborts
                            if isinstance(outcome.aborts, pa.Table)
                            else _abort_table(outcome.aborts)
                        )
                        if outcome.decision is not None:
                            decisions.append({"step": step.id, **outcome.decision})
                st.rows_out = out.num_rows
                st.dead_letters = len(dead) - before_dead
                produced[step.id] = out
            deltas, sequences = self._end_batch()
        except BaseException:
            self._rollback_batch()
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
            outputs=outputs,
            dead_letters=dead.table(),
            aborts=pa.concat_tables(aborts) if aborts else _abort_table([]),
            deltas=deltas,
            sequences=sequences,
            stats=stats,
            decisions=decisions,
        )


def _abort_table(aborts: list[AbortRecord]) -> pa.Table:
    columns: dict[str, list[Any]] = {f.name: [] for f in ABORT_SCHEMA}
    for record in aborts:
        for name in columns:
            columns[name].append(getattr(record, name))
    return pa.Table.from_arrays(
        [pa.array(columns[f.name], type=f.type) for f in ABORT_SCHEMA], schema=ABORT_SCHEMA
    )
