"""Upgrading a run to a new version of its dataflow: staging first, then every warehouse.

:func:`plan_run` compares the dataflow with what staging recorded (and says, per configured
warehouse, which version it holds); :func:`apply_upgrade` runs the switch while no pipeline runs
(``streamdi upgrade apply``; ``streamdi run --upgrade`` calls it before the pipeline starts, so
the switch is at the last committed batch and the pause is this call):

1. Switch staging (:func:`staging.upgrade.upgrade_staging`): one transaction, at the last
   committed batch ``W``; refused, with the plan, when a change cannot apply in place.
2. Open staging with the new dataflow and run one migration round into every configured
   warehouse: each reachable one switches at its own watermark as it opens
   (:mod:`migration.evolution`), then loads what it lacks. A warehouse that cannot be reached
   switches the next time the migration reaches it; nothing is lost meanwhile (staging keeps
   the batches it has not acknowledged).

A crash leaves each store on the old or the new version; running the upgrade again (or the
pipeline with ``--upgrade``) finishes it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from etl_dataflows.dataflow import CompiledDataflow
from etl_dataflows.evolution.plan import UpgradePlan
from migration.migrator import Migrator, build_targets
from migration.schema import WarehouseLayout
from staging.handoff import StagedDeltas
from staging.store import StagingStore
from staging.upgrade import StagingSwitch, plan_staging, upgrade_staging
from streamdi.settings import StreamdiSettings
from warehouse.exceptions import WarehouseUnavailable

logger = logging.getLogger(__name__)


@dataclass
class TargetState:
    """What a warehouse holds of the dataflow, as an upgrade plan shows it."""

    target: str
    fingerprint: str | None = None
    version: int | None = None
    watermark: int = 0
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "fingerprint": self.fingerprint,
            "version": self.version,
            "watermark": self.watermark,
            "error": self.error,
        }


@dataclass
class RunPlan:
    """The upgrade plan of a run: staging's (``plan``, against its recorded ``version``) and
    what each configured warehouse holds."""

    plan: UpgradePlan
    version: int
    targets: list[TargetState] = field(default_factory=list)

    def render(self) -> str:
        lines = [f"staging holds version {self.version}", self.plan.render()]
        for t in self.targets:
            if t.error is not None:
                lines.append(
                    f"warehouse {t.target}: not reachable ({t.error}); it switches when "
                    "the migration reaches it"
                )
            elif t.fingerprint is None:
                lines.append(f"warehouse {t.target}: holds nothing of the dataflow yet")
            else:
                lines.append(
                    f"warehouse {t.target}: version {t.version} (fingerprint {t.fingerprint}) "
                    f"through batch {t.watermark}; switches at its next migration round"
                )
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "staging_version": self.version,
            **self.plan.to_json(),
            "targets": [t.to_json() for t in self.targets],
        }


@dataclass
class UpgradeReport:
    """What :func:`apply_upgrade` did: staging's switch and each warehouse's round."""

    staging: StagingSwitch
    targets: dict[str, str] = field(default_factory=dict)
    """Per warehouse: ``switched to version N`` / ``at version N`` or the error."""

    def to_json(self) -> dict[str, Any]:
        s = self.staging
        return {
            "staging": {
                "version": None if s.version is None else s.version.version,
                "watermark": s.watermark,
                "rows_converted": s.rows,
                "segments_rewritten": s.segments,
                "seconds": round(s.seconds, 3),
                "plan": s.plan.to_json(),
            },
            "targets": dict(self.targets),
        }

    def render(self) -> str:
        s = self.staging
        if s.version is None:
            head = "staging: already at this version"
        else:
            head = (
                f"staging: switched to version {s.version.version} after batch {s.watermark} "
                f"({s.rows:,} rows converted, {s.segments} segment files rewritten, "
                f"{s.seconds:.2f} s)"
            )
        return "\n".join([head, *(f"warehouse {n}: {m}" for n, m in sorted(self.targets.items()))])


def plan_run(
    flow: CompiledDataflow, settings: StreamdiSettings, *, allow_drop: bool = False
) -> RunPlan:
    """The plan of upgrading the run's staging file to ``flow``, and each warehouse's state."""
    plan, recorded = plan_staging(settings.staging_path, flow, allow_drop=allow_drop)
    result = RunPlan(plan, recorded.version)
    layout = WarehouseLayout(flow, settings.migration.schema_name)
    for name, target in build_targets(settings, layout).items():
        state = TargetState(name)
        try:
            fingerprint, version, watermark = target.recorded()
            state.fingerprint, state.version, state.watermark = fingerprint, version, watermark
        except WarehouseUnavailable as exc:
            state.error = str(exc)
        finally:
            target.close()
        result.targets.append(state)
    return result


def apply_upgrade(
    flow: CompiledDataflow,
    settings: StreamdiSettings,
    *,
    allow_drop: bool = False,
    hook: Callable[[str], None] | None = None,
) -> UpgradeReport:
    """Switch staging, then every reachable warehouse, per the module docstring. ``hook`` is
    called at the protocols' dangerous points (:data:`staging.upgrade.UpgradeHook`, and
    ``target-switching``) by the kill -9 tests."""
    # 1.
    switch = upgrade_staging(
        settings.staging_path,
        flow,
        allow_drop=allow_drop,
        memory_limit=settings.staging.memory_limit,
        hook=hook,
    )
    report = UpgradeReport(switch)
    # 2.
    report.targets.update(migrate_once(flow, settings, hook=hook))
    return report


def open_staging(flow: CompiledDataflow, settings: StreamdiSettings) -> StagingStore:
    """The run's staging file opened with ``flow`` for a command that runs while no pipeline
    does (no background merging: the command closes it when done)."""
    return StagingStore(
        settings.staging_path,
        flow,
        memory_limit=settings.staging.memory_limit,
        threads=settings.staging.threads,
        background_merge=False,
    )


def migrate_once(
    flow: CompiledDataflow,
    settings: StreamdiSettings,
    *,
    hook: Callable[[str], None] | None = None,
) -> dict[str, str]:
    """One migration round from the run's staging (opened with ``flow``; no pipeline may run on
    it) into every configured warehouse: each reachable one switches to staging's version as it
    opens and loads what it lacks. Per warehouse, what it holds now or why it could not be
    reached (it catches up when the migration reaches it; staging keeps what it has not
    acknowledged). ``hook``: the warehouses' upgrade hook (kill -9 tests)."""
    if not settings.migration.target_names:
        return {}
    out: dict[str, str] = {}
    with open_staging(flow, settings) as store:
        layout = WarehouseLayout(flow, settings.migration.schema_name, history=store.history)
        targets = build_targets(settings, layout)
        for target in targets.values():
            target.upgrade_hook = hook
        migrator = Migrator(StagedDeltas(store), targets, settings.migration)
        try:
            round_ = migrator.migrate(via="pull")
            for name, result in round_.targets.items():
                out[name] = (
                    f"not reachable ({result.error}); catches up when the migration reaches it"
                    if result.error is not None
                    else f"at version {store.version}, through batch {result.watermark}"
                )
        finally:
            migrator.close()
    return out
