"""What one ``streamdi tpcdi run`` measured while it ran: :class:`RunRecord`.

The run fills the phases (with their own steps), the memory peak and the table counts; the audit
phase fills :attr:`RunRecord.audits` (an ``AuditResult`` per target) and :attr:`RunRecord.metric`.
:meth:`RunRecord.figures` hands the report writer of the audit side
(:func:`tpcdi.audit.report.write_run_report`) its :class:`~tpcdi.audit.report.RunFigures`: one
:class:`~tpcdi.audit.report.PhaseFigures` per phase, and the run's own details (steps, DW rows,
table counts, other targets' audits, notes) as ``extra``. The JSON it writes always has
``phases.historical|incremental1|incremental2.{seconds,rows}``, ``audit.{ok,fail,checks}``,
``tpc_di_rps`` and ``peak_mem_mb``.
"""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tpcdi.audit.checks import AuditResult
    from tpcdi.audit.metric import Metric
    from tpcdi.audit.report import RunFigures
    from tpcdi.run.feed_record import FeedRecord

#: The phases of a run (clause 7.2), in order.
PHASES = ("initialization", "historical", "incremental1", "incremental2", "audit")
#: The BatchID of each phase (clause 4.4.2); the audit phase has none.
BATCH_OF_PHASE = {"initialization": 0, "historical": 1, "incremental1": 2, "incremental2": 3}


@dataclass
class PhaseRecord:
    """One phase.

    ``rows`` are the source records of the phase's batch (what the metric divides by: DIGen's
    row count of Batch1/2/3 when the data set carries it, else the records read); ``dw_rows``
    the rows the phase wrote into the warehouse (first target); ``freshness_s`` for an
    incremental update the time from offering its files to the last row merged into every
    warehouse target; ``steps`` the seconds of the phase's own steps.
    """

    name: str
    batch_id: int | None
    started_at: datetime.datetime
    ended_at: datetime.datetime | None = None
    seconds: float = 0.0
    rows: int = 0
    dw_rows: int = 0
    freshness_s: float | None = None
    steps: dict[str, float] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "batch_id": self.batch_id,
            "started_at": self.started_at.isoformat(),
            "ended_at": None if self.ended_at is None else self.ended_at.isoformat(),
            "seconds": round(self.seconds, 3),
            "rows": self.rows,
            "dw_rows": self.dw_rows,
            "freshness_s": None if self.freshness_s is None else round(self.freshness_s, 3),
            "steps": {k: round(v, 3) for k, v in self.steps.items()},
            **({"details": self.details} if self.details else {}),
        }


@dataclass
class RunRecord:
    """A whole run; see the module docstring."""

    data_dir: str
    targets: list[str]
    sf: float | None = None
    executor: str = "local"
    spark_master: str = "local[2]"
    phases: dict[str, PhaseRecord] = field(default_factory=dict)
    peak_mem_mb: float = 0.0
    #: rows per DW table per target after the run
    table_rows: dict[str, dict[str, int]] = field(default_factory=dict)
    #: the audit result per target (``tpcdi.audit.checks.AuditResult``); empty when it did not run
    audits: dict[str, AuditResult] = field(default_factory=dict)
    metric: Metric | None = None
    #: the source rows per batch (RH, RI1, RI2 of clause 7.5)
    batch_rows: dict[int, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: the upgrade applied between the incremental updates (``--upgrade-between``), if any
    upgrade: dict[str, Any] | None = None
    #: the incremental updates day by day (:mod:`tpcdi.run.feed_record`)
    feed: FeedRecord | None = None

    @property
    def audit(self) -> AuditResult | None:
        """The first target's audit result."""
        return next(iter(self.audits.values()), None)

    @property
    def tpc_di_rps(self) -> int | None:
        return None if self.metric is None else self.metric.tpc_di_rps

    def figures(self) -> RunFigures:
        """The report writer's view of this run (see the module docstring)."""
        from tpcdi.audit.report import PhaseFigures, RunFigures

        phases = {
            name: PhaseFigures(p.seconds, p.rows, p.freshness_s)
            for name, p in self.phases.items()
            if name in ("historical", "incremental1", "incremental2")
        }
        return RunFigures(
            phases=phases,
            peak_mem_mb=self.peak_mem_mb,
            sf=self.sf,
            target="+".join(self.targets),
            metric=self.metric,
            audit=self.audit,
            extra={
                "run": self.details(),
                **({"feed": self.feed.as_json()} if self.feed is not None else {}),
            },
        )

    def details(self) -> dict[str, Any]:
        """What the report's own fields do not hold: every phase with its steps and DW rows,
        the audits of every target, the table counts, the notes."""
        return {
            "data_dir": self.data_dir,
            "targets": self.targets,
            "executor": self.executor,
            "spark_master": self.spark_master,
            "phases": {name: p.as_json() for name, p in self.phases.items()},
            "audits": {
                t: {"ok": a.ok, "fail": a.fail, "failed": [c.name for c in a.failed()]}
                for t, a in self.audits.items()
            },
            "table_rows": self.table_rows,
            "batch_rows": {str(k): v for k, v in self.batch_rows.items()},
            "notes": self.notes,
            "upgrade": self.upgrade,
        }


class PhaseTimer:
    """Times one phase into ``record`` (a :class:`PhaseRecord` under ``name``) and moves the
    progress bar ``bar`` (a tqdm bar) when it is done; :meth:`step` notes the seconds since the
    previous step under a step name."""

    def __init__(self, record: RunRecord, name: str, batch_id: int | None, bar: Any) -> None:
        self.phase = PhaseRecord(name, batch_id, datetime.datetime.now())
        record.phases[name] = self.phase
        self.bar = bar
        self._started = time.perf_counter()
        self._lap = self._started
        bar.set_postfix_str(name)

    def step(self, name: str) -> None:
        now = time.perf_counter()
        self.phase.steps[name] = self.phase.steps.get(name, 0.0) + now - self._lap
        self._lap = now

    def done(self) -> PhaseRecord:
        self.phase.ended_at = datetime.datetime.now()
        self.phase.seconds = time.perf_counter() - self._started
        self.bar.update(1)
        return self.phase
