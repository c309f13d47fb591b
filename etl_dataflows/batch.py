"""What goes into an executor (a batch of events) and what comes out (a batch result).

An :class:`EngineBatch` holds, per source of the dataflow, an Arrow table of events with the
source's declared columns plus ``_ts`` (int64 µs event time) and ``_pos`` (int64 position of the
event in its source). A :class:`BatchResult` holds everything the batch produced; staging commits
it in one transaction (state deltas, outputs, dead letters, aborts and the consumed offsets).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

DEAD_LETTER_SCHEMA = pa.schema(
    [
        ("step", pa.string()),
        ("source", pa.string()),
        ("pos", pa.int64()),
        ("ts", pa.int64()),
        ("reason", pa.string()),
        ("payload", pa.string()),
    ]
)
"""Rows the pipeline could not process: the step, the event's source and position, the reason,
and the row itself as JSON (so nothing is lost and it can be replayed)."""

ABORT_SCHEMA = pa.schema(
    [
        ("step", pa.string()),
        ("source", pa.string()),
        ("pos", pa.int64()),
        ("ts", pa.int64()),
        ("kind", pa.string()),
        ("reason", pa.string()),
    ]
)
"""Aborted transactions: ``kind`` is ``condition`` (a ``require`` failed: a business outcome) or
``error`` (bad data or a user function raised; the event is also dead-lettered)."""


@dataclass(frozen=True)
class EngineBatch:
    """One batch of events for a dataflow, keyed by source step id."""

    batch_id: int
    inputs: Mapping[str, pa.Table]

    @property
    def num_events(self) -> int:
        return sum(t.num_rows for t in self.inputs.values())


@dataclass(frozen=True)
class TableDelta:
    """The net change of one state table over a batch, in the table's image form.

    ``upserts`` holds the new image of every row that was created or changed; ``deletes`` holds
    the row ids (:meth:`~etl_dataflows.tables.BaseStateTable.row_id` columns) of rows that no
    longer exist. Both are sorted by row id, so equal changes compare equal.
    """

    upserts: pa.Table
    deletes: pa.Table

    @property
    def empty(self) -> bool:
        return bool(self.upserts.num_rows == 0 and self.deletes.num_rows == 0)


@dataclass
class StepStats:
    """Counts for one step in one batch."""

    rows_in: int = 0
    rows_out: int = 0
    dead_letters: int = 0
    committed: int = 0
    aborted: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


#: A figure of a :class:`StepDecision`: a count, a duration in ms, a flag, a name (``fell_back``)
#: or durations by phase (Spark's ``task_phases_ms``).
Figure = int | float | bool | str | dict[str, float]


@dataclass
class StepDecision:
    """How one transactional step ran in one batch (recorded so a benchmark or an operator can
    see the executor's choice and what it cost).

    ``strategy`` names what ran the step: the local executor's compiled strategies
    (``sequential``, ``waves``, ``chain_scan``, ``tstream``, ``chains``, ``lock``, ``pat``),
    ``interpreted`` for a step it runs on its embedded serial executor, and the Spark executor's
    ``one_pass``, ``supersteps`` and ``driver``. ``why`` says why in words. ``figures`` holds the
    statistics the choice saw and the measured timings, by name and in the order recorded; which
    names appear depends on the strategy (``transactions``, ``execute_ms``, ``levels``,
    ``fell_back``, ``passes``, ``crossing``, ``total_ms``, ...). ``local`` is, for Spark's
    ``driver``, the local executor's own decision for the transactions it ran on the driver.
    """

    step: str
    strategy: str
    why: str
    figures: dict[str, Figure] = field(default_factory=dict)
    local: StepDecision | None = None

    def figure(self, name: str) -> Figure | None:
        """The figure ``name``, or None when this strategy does not record it."""
        return self.figures.get(name)

    def as_dict(self) -> dict[str, Any]:
        """The JSON form benchmarks write: ``step``, ``strategy``, ``why``, the figures, and for
        a decision with a ``local`` one ``local_strategy`` and ``local`` (without its step)."""
        return {"step": self.step, **self._fields()}

    def _fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = {"strategy": self.strategy, "why": self.why, **self.figures}
        if self.local is not None:
            fields["local_strategy"] = self.local.strategy
            fields["local"] = self.local._fields()
        return fields


@dataclass
class BatchResult:
    """Everything one batch produced."""

    batch_id: int
    outputs: dict[str, pa.Table]
    dead_letters: pa.Table
    aborts: pa.Table
    deltas: dict[str, TableDelta]
    sequences: dict[str, int]
    stats: dict[str, StepStats] = field(default_factory=dict)
    decisions: list[StepDecision] = field(default_factory=list)

    @property
    def committed(self) -> int:
        return sum(s.committed for s in self.stats.values())

    @property
    def aborted(self) -> int:
        return sum(s.aborted for s in self.stats.values())
