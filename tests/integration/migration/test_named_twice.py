"""The migrator's own guard: a round that names a target twice (``Migrator.migrate(["postgres",
"postgres"])``) treats it once. It used to merge it twice at once, on two threads of the
migrator's pool sharing the target's one connection: psycopg2 interleaved the two transactions'
statements on it and both threads waited forever, holding the migrator's lock (every later round,
``GET /migration`` and the service's shutdown waited behind them). The fuzz test found it as a
``POST /migration/pull`` hanging past 120 s. The API now refuses such a request before any round
(422 ``invalid_request`` naming the target: tests/unit/api/test_app.py); the migrator keeps its
guard for every other caller."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from migration.migrator import MigrationReport, Migrator, build_targets
from migration.schema import WarehouseLayout
from staging.handoff import StagedDeltas
from streamdi.settings import load_settings
from tests.integration.migration.conftest import PostgresServer, query
from tests.migration_shop import stage_shop

pytestmark = pytest.mark.postgres

#: Seconds a round may take before the test calls it hung (it takes well under one).
HUNG_S = 60


class MergeProbe:
    """The migrator's hook: how many threads were inside one target's merge at once (each stays
    a moment, so that a second one would meet it)."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.inside = 0
        self.most = 0
        self.merges = 0
        self._lock = threading.Lock()

    def __call__(self, phase: str, name: str) -> None:
        if phase != "merge" or name != self.target:
            return
        with self._lock:
            self.inside += 1
            self.merges += 1
            self.most = max(self.most, self.inside)
        time.sleep(0.5)
        with self._lock:
            self.inside -= 1


@pytest.mark.parametrize("name", ["postgres", "duckdb"])
def test_a_pull_naming_a_target_twice_merges_it_once_and_returns(
    tmp_path: Path, postgres: PostgresServer, name: str
) -> None:
    dsn = postgres.database()
    settings = load_settings(
        streamdi={"state_dir": str(tmp_path)},
        postgres={"dsn": dsn},
        migration={"targets": "duckdb,postgres", "release_ms": 0, "parallel_targets": True},
    )
    store = stage_shop(tmp_path / "staging.duckdb", range(1, 7), events=150)
    layout = WarehouseLayout(store.flow, settings.migration.schema_name)
    probe = MergeProbe(name)
    migrator = Migrator(
        StagedDeltas(store), build_targets(settings, layout), settings.migration, hook=probe
    )
    migrator.migrate(via="push", merge="never")  # deltas to merge, in both targets

    reports: list[MigrationReport] = []
    errors: list[BaseException] = []

    def pull() -> None:
        try:
            reports.append(migrator.migrate([name, name], via="pull", merge="force"))
        except BaseException as exc:
            errors.append(exc)

    puller = threading.Thread(target=pull, name="pull-twice", daemon=True)
    puller.start()
    puller.join(HUNG_S)
    if puller.is_alive():
        pytest.fail(
            f"a pull naming {name} twice did not return in {HUNG_S} s: a deadlock (the target "
            f"was used by {probe.most} threads at once)"
        )
    assert not errors, errors
    assert probe.most == 1, f"{name} was merged by {probe.most} threads at once"
    assert probe.merges == 1
    (report,) = reports
    assert list(report.targets) == [name]
    assert report.targets[name].merge is not None and report.targets[name].error is None
    if name == "postgres":
        merges = query(dsn, f"SELECT count(*) FROM {layout.merges_name}")[0][0]
        assert merges == 1
    migrator.close()
    store.close()
