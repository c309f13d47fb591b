"""A fault campaign: the same seeded input run twice, without faults and under a seeded schedule
of faults, then compared row for row.

:func:`run_campaign`, in order:

1. Build the input (:func:`benchmarks.faults.ledger.ledger_offers`) and the schedule
   (:func:`benchmarks.faults.kinds.schedule`) from the seed.
2. The reference run (:class:`~benchmarks.faults.run.LedgerRun`, no faults; the reprocess at
   its offer, not killed).
3. The faulted run: the same input, the schedule's faults, the reprocess's first attempt killed.
4. Compare every relation of staging and both warehouses (:mod:`benchmarks.faults.compare`).
5. Summarize (:class:`CampaignResult`): faults landed per kind, recovery p50/p99, every
   difference and every other finding (a recovery that never came, a serve that did not exit 0
   on SIGTERM, a process left behind). The campaign passes only with none of either.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.faults import compare
from benchmarks.faults.kinds import FAULT_KINDS, FaultKind, schedule
from benchmarks.faults.ledger import input_faults, ledger_offers
from benchmarks.faults.run import LedgerRun, RunConfig, RunResult


@dataclass
class CampaignOptions:
    """What to run: the seed, the input's size and pace, the faults, where to work."""

    seed: int = 1
    faults: int = 100
    offers: int = 1_000
    offer_size: int = 100
    rate: float = 8.0
    kinds: tuple[FaultKind, ...] = FAULT_KINDS
    reprocess: bool = True
    quick: bool = False
    workdir: Path | None = None
    keep: bool = False
    disk_mb: int = 256

    @classmethod
    def quick_defaults(cls, **overrides: Any) -> CampaignOptions:
        """``--quick``: twelve faults (every kind at least once) over 150 offers."""
        values: dict[str, Any] = dict(
            faults=12, offers=150, offer_size=100, rate=10.0, quick=True, reprocess=False
        )
        values.update(overrides)
        return cls(**values)

    def command(self) -> str:
        """The ``streamdi bench faults`` command line that repeats this campaign."""
        args = ["streamdi bench faults"]
        if self.quick:
            args.append("--quick")
        args += [
            f"--seed {self.seed}",
            f"--faults {self.faults}",
            f"--offers {self.offers}",
            f"--offer-size {self.offer_size}",
            f"--rate {self.rate:g}",
        ]
        if tuple(self.kinds) != FAULT_KINDS:
            args.append(f"--kinds {','.join(self.kinds)}")
        args.append("--reprocess" if self.reprocess else "--no-reprocess")
        return " ".join(args)


@dataclass
class CampaignResult:
    """The campaign's outcome (see the module docstring); :meth:`to_json` is the report's data."""

    options: CampaignOptions
    reference: RunResult
    faulted: RunResult
    differences: list[compare.Difference]
    input_faults: dict[str, int]
    seconds: float
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float]
    schedule: list[dict[str, Any]] = field(default_factory=list)

    @property
    def findings(self) -> list[str]:
        return [f"reference: {f}" for f in self.reference.findings] + [
            f"faulted: {f}" for f in self.faulted.findings
        ]

    @property
    def passed(self) -> bool:
        return not self.differences and not self.findings

    def recoveries(self) -> list[float]:
        return [r.seconds for r in self.faulted.recoveries if r.seconds is not None]

    def by_kind(self) -> dict[str, dict[str, Any]]:
        """Per kind: scheduled, landed, and the recovery p50/p99 of its landed faults."""
        recovery = {r.fault: r.seconds for r in self.faulted.recoveries}
        out: dict[str, dict[str, Any]] = {}
        for injection in self.faulted.injections:
            kind = injection.fault.kind
            entry = out.setdefault(kind, {"scheduled": 0, "landed": 0, "recoveries": []})
            entry["scheduled"] += 1
            entry["landed"] += int(injection.landed)
            seconds = recovery.get(injection.fault.index)
            if injection.landed and seconds is not None:
                entry["recoveries"].append(seconds)
        arming = sum(1 for i in self.faulted.injections if i.arming_kill)
        if arming:
            entry = out.setdefault("serve_kill", {"scheduled": 0, "landed": 0, "recoveries": []})
            entry["landed"] += arming
            entry["arming"] = arming
        for entry in out.values():
            seconds = entry.pop("recoveries")
            entry["recovery_p50_s"] = percentile(seconds, 50)
            entry["recovery_p99_s"] = percentile(seconds, 99)
        return dict(sorted(out.items()))

    def landed(self) -> int:
        return sum(e["landed"] for e in self.by_kind().values())

    def to_json(self) -> dict[str, Any]:
        options = self.options
        faulted, reference = self.faulted, self.reference
        t0 = faulted.started
        recovery = {r.fault: r for r in faulted.recoveries}
        compared = compare.totals(reference.snapshot)
        recoveries = self.recoveries()
        return {
            "workload": "ledger",
            "command": options.command(),
            "seed": options.seed,
            "quick": options.quick,
            "offers": options.offers,
            "offer_size": options.offer_size,
            "events": options.offers * options.offer_size,
            "rate": options.rate,
            "passed": self.passed,
            "seconds": round(self.seconds, 1),
            "machine": {
                "cpus": os.cpu_count(),
                "load_before": [round(x, 2) for x in self.load_before],
                "load_after": [round(x, 2) for x in self.load_after],
            },
            "input_faults": self.input_faults,
            "faults": {
                "scheduled": len(faulted.injections),
                "landed": self.landed(),
                "by_kind": self.by_kind(),
            },
            "recovery": {
                "count": len(recoveries),
                "p50_s": percentile(recoveries, 50),
                "p99_s": percentile(recoveries, 99),
                "max_s": max(recoveries) if recoveries else None,
            },
            "runs": {
                name: {
                    "seconds": round(run.seconds, 1),
                    "serve_exit": run.serve_exit,
                    "merge_exit": run.merge_exit,
                    "serve_starts": sum(1 for e in run.events if e.what == "serve started"),
                    "postgres_restarts": sum(1 for e in run.events if e.what == "postgres started"),
                    "push_attempts": run.push_attempts,
                    "push_conflicts": run.push_conflicts,
                    "push_retries_by_status": {str(k): v for k, v in run.push_retries.items()},
                    "reprocess_codes": run.reprocess_codes,
                    "load": [round(x, 2) for x in run.load],
                }
                for name, run in (("reference", reference), ("faulted", faulted))
            },
            "injections": [
                {
                    "index": i.fault.index,
                    "kind": i.fault.kind,
                    "point": i.fault.point,
                    "at_offer": i.fault.at_offer,
                    "started_s": round(i.started - t0, 3),
                    "ended_s": round(i.ended - t0, 3),
                    "landed": i.landed,
                    "arming_kill": i.arming_kill,
                    "detail": i.detail,
                    "recovery_s": (
                        recovery[i.fault.index].seconds if i.fault.index in recovery else None
                    ),
                }
                for i in faulted.injections
            ],
            "unplanned_exits": [
                {"at_s": round(e.at - t0, 3), "code": e.code, "armed": e.armed}
                for e in faulted.unplanned
            ],
            "schedule": self.schedule,
            "compared": {
                "relations": len(compared),
                "rows": sum(compared.values()),
                "per_relation": compared,
            },
            "differences": [
                {
                    "relation": d.relation,
                    "missing": d.missing,
                    "extra": d.extra,
                    "missing_examples": d.missing_examples,
                    "extra_examples": d.extra_examples,
                    "note": d.note,
                }
                for d in self.differences
            ],
            "findings": self.findings,
        }


def percentile(values: list[float], q: float) -> float | None:
    """The ``q``-th percentile (linear), or None without values."""
    if not values:
        return None
    return round(float(np.percentile(np.asarray(values, dtype=np.float64), q)), 3)


def run_campaign(options: CampaignOptions, *, say: Any = print) -> CampaignResult:
    """Run the campaign of ``options`` (see the module docstring)."""
    started = time.monotonic()
    load_before = os.getloadavg()
    # 1.
    offers = ledger_offers(options.seed, options.offers, options.offer_size)
    reprocess_at = options.offers // 2 if options.reprocess else None
    faults = schedule(
        options.seed,
        options.faults,
        options.offers,
        options.kinds,
        skip=frozenset() if reprocess_at is None else frozenset({reprocess_at}),
    )
    own = options.workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="streamdi-faults-")) if own else options.workdir
    assert workdir is not None
    workdir.mkdir(parents=True, exist_ok=True)
    disk_mb = options.disk_mb if "disk_full" in options.kinds else None
    try:
        # 2.
        say(f"reference run: {options.offers} offers of {options.offer_size} events, no faults")
        reference = LedgerRun(
            RunConfig(
                "reference",
                workdir,
                offers,
                options.rate,
                reprocess_at=reprocess_at,
                seed=options.seed,
            )
        ).execute()
        say(f"reference run: {reference.seconds:.0f} s")
        # 3.
        say(f"faulted run: {len(faults)} faults")
        faulted = LedgerRun(
            RunConfig(
                "faulted",
                workdir,
                offers,
                options.rate,
                faults=faults,
                reprocess_at=reprocess_at,
                reprocess_fault=True,
                seed=options.seed,
                disk_mb=disk_mb,
            )
        ).execute()
        say(f"faulted run: {faulted.seconds:.0f} s")
    finally:
        if own and not options.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    # 4.
    differences = compare.compare(reference.snapshot, faulted.snapshot)
    # 5.
    return CampaignResult(
        options,
        reference,
        faulted,
        differences,
        input_faults(offers),
        time.monotonic() - started,
        load_before,
        os.getloadavg(),
        [f.to_json() for f in faults],
    )
