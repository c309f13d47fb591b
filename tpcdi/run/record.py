"""What one ``streamdi tpcdi run`` measured: :class:`RunRecord`, shared with the report writer.

The run fills the phases, the memory peak and the table counts; the audit phase fills
:attr:`RunRecord.audit` (an ``AuditResult`` of :mod:`tpcdi.audit.checks`) and
:attr:`RunRecord.tpc_di_rps`; :meth:`RunRecord.as_json` is the machine-readable result. Its keys
always include ``phases.historical|incremental1|incremental2.{seconds,rows}``,
``audit.{ok,fail,checks}``, ``tpc_di_rps`` and ``peak_mem_mb``.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

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
    #: the audit result (``tpcdi.audit.checks.AuditResult``) or None when it did not run
    audit: Any = None
    tpc_di_rps: float | None = None
    #: DIGen's source row counts per batch (RH, RI1, RI2) when known
    batch_rows: dict[int, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def phase(self, name: str) -> PhaseRecord:
        return self.phases[name]

    def audit_json(self) -> dict[str, Any]:
        audit = self.audit
        if audit is None:
            return {"ok": 0, "fail": 0, "checks": [], "ran": False}
        checks = [
            {"name": c.name, "ok": bool(c.ok), "detail": getattr(c, "detail", "")}
            for c in getattr(audit, "checks", [])
        ]
        return {"ok": int(audit.ok), "fail": int(audit.fail), "checks": checks, "ran": True}

    def as_json(self) -> dict[str, Any]:
        """The machine-readable result (see the module docstring)."""
        return {
            "data_dir": self.data_dir,
            "sf": self.sf,
            "targets": self.targets,
            "executor": self.executor,
            "spark_master": self.spark_master,
            "phases": {name: p.as_json() for name, p in self.phases.items()},
            "audit": self.audit_json(),
            "tpc_di_rps": self.tpc_di_rps,
            "peak_mem_mb": round(self.peak_mem_mb, 1),
            "table_rows": self.table_rows,
            "batch_rows": {str(k): v for k, v in self.batch_rows.items()},
            "notes": self.notes,
        }
