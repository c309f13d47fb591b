"""A fault campaign: the same seeded input run twice, without faults and under a seeded schedule
of faults, then compared row for row.

:func:`run_campaign`, in order:

1. Build the input (:func:`benchmarks.faults.ledger.ledger_offers`; TPC-DI:
   :func:`benchmarks.faults.tpcdi_workload.tpcdi_offers`, after the historical load both runs
   start from) and the schedule (:func:`benchmarks.faults.kinds.schedule`) from the seed.
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
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from benchmarks.faults import compare
from benchmarks.faults.kinds import FAULT_KINDS, Fault, FaultKind, schedule
from benchmarks.faults.ledger import Offer, input_faults, ledger_offers
from benchmarks.faults.run import LedgerRun, RunConfig, RunResult

Workload = Literal["ledger", "tpcdi"]
WORKLOADS: tuple[Workload, ...] = ("ledger", "tpcdi")


@dataclass
class CampaignOptions:
    """What to run: the workload, the seed, the input's size and pace, the faults, where to
    work. The ledger's input is ``offers`` offers of ``offer_size`` events; TPC-DI's is Batch2
    and Batch3 of a data set generated at ``sf``, cut into offers of ``offer_size`` events
    (``offers`` and ``reprocess`` do not apply: its planned pauses are the phases' ends)."""

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
    workload: Workload = "ledger"
    sf: float = 1.0
    #: Where TPC-DI data sets are generated (default: ``TPCDI__CACHE_DIR``).
    cache_dir: Path | None = None
    #: TPC-DI: start from the historical load a campaign with the same ``workdir``, ``sf`` and
    #: ``seed`` left there (to repeat a campaign without its slowest part).
    reuse_base: bool = False

    @classmethod
    def defaults(cls, workload: Workload = "ledger", **overrides: Any) -> CampaignOptions:
        """The full campaign of ``workload``: the ledger's 1,000 offers of 100 events; TPC-DI's
        SF 1 updates in offers of 20 events (about 670 offers: in offers of 25, about 530, a
        hundred faults left too little input after the last ones, and four missed)."""
        values: dict[str, Any] = {"workload": workload}
        if workload == "tpcdi":
            values.update(sf=1.0, offer_size=20, rate=8.0, reprocess=False)
        values.update(overrides)
        return cls(**values)

    @classmethod
    def quick_defaults(cls, workload: Workload = "ledger", **overrides: Any) -> CampaignOptions:
        """``--quick``: twelve faults (every kind at least once) over 150 offers (TPC-DI: its
        SF 0.1 updates in offers of 9 events, about 150 offers)."""
        values: dict[str, Any] = dict(
            faults=12, offers=150, offer_size=100, rate=10.0, quick=True, reprocess=False
        )
        if workload == "tpcdi":
            values.update(sf=0.1, offer_size=9)
        values.update(workload=workload, **overrides)
        return cls(**values)

    def command(self) -> str:
        """The ``streamdi bench faults`` command line that repeats this campaign."""
        args = ["streamdi bench faults"]
        if self.workload != "ledger":
            args.append(f"--workload {self.workload}")
        if self.quick:
            args.append("--quick")
        args += [f"--seed {self.seed}", f"--faults {self.faults}"]
        if self.workload == "tpcdi":
            args.append(f"--sf {self.sf:g}")
        else:
            args.append(f"--offers {self.offers}")
        args += [f"--offer-size {self.offer_size}", f"--rate {self.rate:g}"]
        if tuple(self.kinds) != FAULT_KINDS:
            args.append(f"--kinds {','.join(self.kinds)}")
        if self.workload == "ledger":
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
    #: The input actually offered (TPC-DI's depends on the data set).
    offers: int = 0
    events: int = 0
    #: TPC-DI: seconds of the historical load both runs start from (not in either run's time).
    prepare_seconds: float | None = None
    #: TPC-DI: the faulted run's audit per warehouse (every check's verdict and numbers).
    audits: dict[str, Any] = field(default_factory=dict)

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
            "workload": options.workload,
            "command": options.command(),
            "seed": options.seed,
            "quick": options.quick,
            "sf": options.sf if options.workload == "tpcdi" else None,
            "offers": self.offers or options.offers,
            "offer_size": options.offer_size,
            "events": self.events or options.offers * options.offer_size,
            "rate": options.rate,
            "passed": self.passed,
            "seconds": round(self.seconds, 1),
            "prepare_seconds": (
                None if self.prepare_seconds is None else round(self.prepare_seconds, 1)
            ),
            "audits": {
                target: {"ok": a.get("ok"), "fail": a.get("fail")}
                for target, a in sorted(self.audits.items())
            },
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


@contextmanager
def campaign_workdir(options: CampaignOptions) -> Iterator[Path]:
    """The folder both runs work in: ``options.workdir`` (kept), or a temporary one removed at
    the end unless ``options.keep``."""
    own = options.workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="streamdi-faults-")) if own else options.workdir
    assert workdir is not None
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        yield workdir
    finally:
        if own and not options.keep:
            shutil.rmtree(workdir, ignore_errors=True)


def run_configs(
    options: CampaignOptions,
    workdir: Path,
    offers: list[Offer],
    faults: list[Fault],
    reprocess_at: int | None = None,
) -> tuple[RunConfig, RunConfig]:
    """The reference run's and the faulted run's configurations: the same input, reprocess
    offer and seed; the faulted run has the faults, kills the first attempt of each planned
    step, and puts staging on a disk of its own when ``disk_full`` is among the kinds."""
    reference = RunConfig(
        "reference", workdir, offers, options.rate, reprocess_at=reprocess_at, seed=options.seed
    )
    faulted = RunConfig(
        "faulted",
        workdir,
        offers,
        options.rate,
        faults=faults,
        reprocess_at=reprocess_at,
        reprocess_fault=True,
        seed=options.seed,
        disk_mb=options.disk_mb if "disk_full" in options.kinds else None,
    )
    return reference, faulted


def run_campaign(options: CampaignOptions, *, say: Any = print) -> CampaignResult:
    """Run the campaign of ``options`` (see the module docstring)."""
    if options.workload == "tpcdi":
        return run_tpcdi_campaign(options, say=say)
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
    with campaign_workdir(options) as workdir:
        reference_config, faulted_config = run_configs(
            options, workdir, offers, faults, reprocess_at
        )
        # 2.
        say(f"reference run: {options.offers} offers of {options.offer_size} events, no faults")
        reference = LedgerRun(reference_config).execute()
        say(f"reference run: {reference.seconds:.0f} s")
        # 3.
        say(f"faulted run: {len(faults)} faults")
        faulted = LedgerRun(faulted_config).execute()
        say(f"faulted run: {faulted.seconds:.0f} s")
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
        offers=len(offers),
        events=options.offers * options.offer_size,
    )


def run_tpcdi_campaign(options: CampaignOptions, *, say: Any = print) -> CampaignResult:
    """The campaign of the TPC-DI workload (:mod:`benchmarks.faults.tpcdi_workload`), in the
    steps of the module docstring, after one more at the start: the historical load both runs
    copy (:func:`~benchmarks.faults.tpcdi_workload.prepare_base`)."""
    from benchmarks.faults.tpcdi_run import TpcdiRun
    from benchmarks.faults.tpcdi_workload import BATCHES, prepare_base, tpcdi_offers
    from streamdi.settings import load_settings

    started = time.monotonic()
    load_before = os.getloadavg()
    cache = options.cache_dir or load_settings().tpcdi.cache_dir
    with campaign_workdir(options) as workdir:
        say(f"historical load of TPC-DI SF {options.sf:g} (both warehouses), once for both runs")
        base = prepare_base(
            workdir / "base",
            options.sf,
            options.seed,
            cache,
            workdir / "base.log",
            reuse=options.reuse_base,
        )
        say(f"historical load: {base.seconds:.0f} s")
        # 1.
        workload = tpcdi_offers(base.data, options.offer_size)
        offers = workload.offers
        pauses = frozenset(workload.first_offer[b] for b in BATCHES[1:])
        faults = schedule(
            options.seed, options.faults, len(offers), options.kinds, skip=pauses, stops=pauses
        )
        reference_config, faulted_config = run_configs(options, workdir, offers, faults)
        # 2.
        events = sum(o.events.num_rows for o in offers if not isinstance(o.events, list))
        say(f"reference run: Batch{BATCHES[0]}..{BATCHES[-1]}, {len(offers)} offers, no faults")
        reference = TpcdiRun(reference_config, base, workload)
        reference_result = reference.execute()
        say(f"reference run: {reference_result.seconds:.0f} s")
        # 3.
        say(f"faulted run: {len(faults)} faults")
        faulted = TpcdiRun(faulted_config, base, workload)
        faulted_result = faulted.execute()
        say(f"faulted run: {faulted_result.seconds:.0f} s")
    # 4.
    differences = compare.compare(reference_result.snapshot, faulted_result.snapshot)
    # 5.
    notes = {"rejected lines": workload.rejects} if workload.rejects else {}
    return CampaignResult(
        options,
        reference_result,
        faulted_result,
        differences,
        notes,
        time.monotonic() - started,
        load_before,
        os.getloadavg(),
        [f.to_json() for f in faults],
        offers=len(offers),
        events=events,
        prepare_seconds=base.seconds,
        audits=faulted.audits,
    )
