"""What a migrator tells its observers (:mod:`migration.progress`), on a real DuckDB warehouse:
each load's acknowledgement in order, merges, a target that cannot be opened; an observer that
raises never stops a round."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from migration.migrator import Migrator, build_targets
from migration.progress import TargetProgress
from migration.schema import WarehouseLayout
from staging.handoff import StagedDeltas
from staging.store import StagingStore
from streamdi.settings import load_settings
from tests.migration_shop import stage_shop


def _migrator(store: StagingStore, tmp: Path, **migration: Any) -> Migrator:
    settings = load_settings(
        streamdi={"state_dir": str(tmp)},
        migration={"targets": "duckdb", "max_batches_per_load": 3, "release_ms": 0, **migration},
    )
    layout = WarehouseLayout(store.flow, settings.migration.schema_name)
    return Migrator(StagedDeltas(store), build_targets(settings, layout), settings.migration)


def test_observers_hear_every_acknowledgement_and_merge(tmp_path: Path) -> None:
    store = stage_shop(tmp_path / "staging.duckdb", range(1, 9), events=60)
    migrator = _migrator(store, tmp_path)
    heard: list[TargetProgress] = []

    def broken(progress: TargetProgress) -> None:
        raise RuntimeError("an observer that fails")

    migrator.observers.extend([broken, heard.append])
    try:
        report = migrator.migrate(via="push", merge="never")
        assert report.targets["duckdb"].watermark == 8 and not report.failed
        acks = [p.acknowledged for p in heard if p.acknowledged is not None]
        assert acks[0] == 0 and acks[-3:] == [3, 6, 8]  # opened empty, then each load
        assert acks == sorted(acks)
        assert all(p.target == "duckdb" and p.reachable and p.error is None for p in heard)
        assert [p.at for p in heard] == sorted(p.at for p in heard)
        first = heard[0]  # the first open reads the merge point too
        assert first.merged_through == 0
        heard.clear()
        migrator.merge()
        assert [(p.merged_through, p.acknowledged) for p in heard] == [(8, None)]
        heard.clear()
        status = migrator.status()
        assert status["targets"]["duckdb"]["merged_through"] == 8
        assert [(p.acknowledged, p.merged_through) for p in heard] == [(8, 8)]
    finally:
        migrator.close()
        store.close()


def test_a_target_that_cannot_be_opened_is_told_unreachable(tmp_path: Path) -> None:
    store = stage_shop(tmp_path / "staging.duckdb", range(1, 3), events=20)
    (tmp_path / "a-directory").mkdir()
    migrator = _migrator(store, tmp_path, duckdb_path=str(tmp_path / "a-directory"))
    heard: list[TargetProgress] = []
    migrator.observers.append(heard.append)
    try:
        report = migrator.migrate(via="push")
        assert report.failed == ["duckdb"]
        assert heard and all(not p.reachable and p.error for p in heard)
        assert all(p.acknowledged is None and p.merged_through is None for p in heard)
    finally:
        migrator.close()
        store.close()
