"""What the incremental updates of a run measured, day by day: :class:`DayRecord` per update
(an incremental batch: one day of a daily feed, or DIGen's Batch2/Batch3) and the
:class:`FeedRecord` of them all, with its summary.

Every time is in seconds. A day's *freshness* in a target is the time from the day's last event
offered to Kafka (its collector done) to the day's batches merged into that target's tables;
``drop_to_visible_s`` counts from the moment the day's files were dropped (the offer's start).
``spent`` is where the pipeline's time went while the day ran (the differences of
:meth:`runtime.pipeline.Pipeline.timings`: Kafka polls, assembling, engine, staging commit,
staging reads for migration, load and merge per target), next to the run's own steps
(``collect`` = reading the files and producing them to Kafka, ``validation`` = batch validation
and PCR, ``audit`` = a sampled day's audit).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class DayRecord:
    """One incremental update (BatchID ``batch_id``, its files dated ``date``)."""

    batch_id: int
    date: datetime.date
    #: seconds after the first update's start when this one's files were dropped
    dropped_at_s: float = 0.0
    events: int = 0
    rejects: int = 0
    #: from the drop to the last event offered to Kafka
    collect_s: float = 0.0
    #: from the last event offered to every event committed to staging
    staged_s: float = 0.0
    #: per target: from the last event offered to merged (the day's freshness)
    freshness_s: dict[str, float] = field(default_factory=dict)
    #: from the drop to the PCR (the phase's wall time, sampled audit excluded)
    phase_s: float = 0.0
    #: the run's steps (collect, status, validation, audit ...) and the pipeline's time by where
    steps: dict[str, float] = field(default_factory=dict)
    spent: dict[str, float] = field(default_factory=dict)
    staging_bytes: int = 0
    state_rows: int = 0
    rss_bytes: int = 0
    #: a sampled day's audit per target: ok, fail, failed check names, seconds
    audit: dict[str, dict[str, Any]] | None = None

    @property
    def drop_to_visible_s(self) -> dict[str, float]:
        return {t: self.collect_s + f for t, f in self.freshness_s.items()}


def _quantiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    a = np.asarray(values, dtype=float)
    return {
        "p50": round(float(np.percentile(a, 50)), 3),
        "p99": round(float(np.percentile(a, 99)), 3),
        "max": round(float(a.max()), 3),
        "mean": round(float(a.mean()), 3),
    }


@dataclass
class FeedRecord:
    """Every incremental update of a run, in order, and how it was offered: ``day_seconds``
    (None: as fast as possible) and the sampled audits' spacing ``audit_every``."""

    targets: list[str]
    day_seconds: float | None = None
    audit_every: int = 0
    days: list[DayRecord] = field(default_factory=list)
    #: seconds from the first update's start to the last update's PCR
    seconds: float = 0.0
    #: days whose drop came later than their slot because the day before ran over
    late_days: int = 0

    @property
    def events(self) -> int:
        return sum(d.events for d in self.days)

    def freshness(self, target: str) -> list[float]:
        return [d.freshness_s[target] for d in self.days if target in d.freshness_s]

    def summary(self) -> dict[str, Any]:
        """Freshness quantiles per target, throughput, time by where, sizes, audits."""
        days = self.days
        staged = sum(d.collect_s + d.staged_s for d in days)
        spent: dict[str, float] = {}
        for d in days:
            for k, v in {**d.spent, **{f"run.{s}": t for s, t in d.steps.items()}}.items():
                spent[k] = spent.get(k, 0.0) + v
        audits = [d for d in days if d.audit]
        return {
            "days": len(days),
            "events": self.events,
            "rejects": sum(d.rejects for d in days),
            "seconds": round(self.seconds, 3),
            "events_per_s": round(self.events / self.seconds, 1) if self.seconds > 0 else None,
            "ingest_events_per_s": round(self.events / staged, 1) if staged > 0 else None,
            "freshness_s": {t: _quantiles(self.freshness(t)) for t in self.targets},
            "drop_to_visible_s": {
                t: _quantiles([d.drop_to_visible_s[t] for d in days if t in d.freshness_s])
                for t in self.targets
            },
            "staged_s": _quantiles([d.staged_s for d in days]),
            "phase_s": _quantiles([d.phase_s for d in days]),
            "spent_s": {k: round(v, 3) for k, v in sorted(spent.items())},
            "staging_mb": {
                "first": round(days[0].staging_bytes / 2**20, 1) if days else None,
                "last": round(days[-1].staging_bytes / 2**20, 1) if days else None,
                "max": round(max((d.staging_bytes for d in days), default=0) / 2**20, 1),
            },
            "state_rows": {
                "first": days[0].state_rows if days else None,
                "last": days[-1].state_rows if days else None,
            },
            "rss_mb_max": round(max((d.rss_bytes for d in days), default=0) / 2**20, 1),
            "day_seconds": self.day_seconds,
            "late_days": self.late_days,
            "audited_days": [d.batch_id - 1 for d in audits],
            "audits_passed": all(
                a.get("fail", 1) == 0 for d in audits for a in (d.audit or {}).values()
            ),
        }

    def as_json(self) -> dict[str, Any]:
        """The summary and the per-day series (one list per measure, in day order)."""
        days = self.days
        return {
            "summary": self.summary(),
            "per_day": {
                "batch_id": [d.batch_id for d in days],
                "date": [d.date.isoformat() for d in days],
                "dropped_at_s": [round(d.dropped_at_s, 3) for d in days],
                "events": [d.events for d in days],
                "collect_s": [round(d.collect_s, 4) for d in days],
                "staged_s": [round(d.staged_s, 4) for d in days],
                "freshness_s": {t: [round(v, 4) for v in self.freshness(t)] for t in self.targets},
                "phase_s": [round(d.phase_s, 4) for d in days],
                "staging_bytes": [d.staging_bytes for d in days],
                "state_rows": [d.state_rows for d in days],
                "rss_bytes": [d.rss_bytes for d in days],
                "spent_s": {
                    k: [round(d.spent.get(k, 0.0), 4) for d in days]
                    for k in sorted({k for d in days for k in d.spent})
                },
                "steps_s": {
                    k: [round(d.steps.get(k, 0.0), 4) for d in days]
                    for k in sorted({k for d in days for k in d.steps})
                },
            },
            "audits": {str(d.batch_id): d.audit for d in days if d.audit},
        }
