"""Exactly once into both warehouses across real crashes: ``streamdi migrate push`` is killed with
SIGKILL in the middle of a COPY / Arrow load, once a load's rejects are in (transaction open),
after a target's commit but before staging's acknowledgement, and in the middle of a merge; it is
run again, and every target must end with exactly the rows of a migration without crashes, each
batch once in its ledger, each dead letter and abort once (replays marked), and staging must
release only what every target acknowledged."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from etl_dataflows.dataflow import CompiledDataflow
from migration.migrator import Migrator, build_targets
from migration.schema import WarehouseLayout
from migration.targets.base import BaseTarget
from staging.handoff import StagedDeltas
from staging.store import StagingStore
from streamdi.settings import load_settings
from tests.integration.migration.conftest import (
    PostgresServer,
    copy_staging,
    migrate_env,
    run_migrate,
)
from tests.migration_shop import shop_dataflow, stage_shop
from tests.unit.migration.test_rejects import staged_rejects, target_rejects

pytestmark = pytest.mark.postgres

SPEC = "tests.migration_shop:shop_dataflow"
BATCHES = 12
PER_LOAD = 4
RELATIONS = ("customers", "accounts", "prices", "activity")


@dataclass
class Staged:
    path: Path
    reference: dict[str, list[tuple[Any, ...]]]
    rejects: tuple[Any, ...]


def _targets(
    flow: CompiledDataflow, dsn: str, warehouse: Path, names: str
) -> dict[str, BaseTarget]:
    settings = load_settings(
        postgres={"dsn": dsn}, migration={"targets": names, "duckdb_path": str(warehouse)}
    )
    return build_targets(settings, WarehouseLayout(flow))


@pytest.fixture(scope="module")
def staged(tmp_path_factory: pytest.TempPathFactory, postgres: PostgresServer) -> Staged:
    """A staging file of 12 shop batches (rejects included), and what a migration without crashes
    makes of it."""
    root = tmp_path_factory.mktemp("crash")
    source = root / "staging.duckdb"
    stage_shop(source, range(1, BATCHES + 1), events=150, rejects=True).close()
    work = copy_staging(source, root / "reference.duckdb")
    flow = shop_dataflow().build()
    store = StagingStore(work, flow)
    settings = load_settings(
        postgres={"dsn": postgres.database()},
        migration={"targets": "duckdb,postgres", "duckdb_path": str(root / "reference-wh.duckdb")},
    )
    migrator = Migrator(
        StagedDeltas(store), build_targets(settings, WarehouseLayout(flow)), settings.migration
    )
    migrator.migrate(merge="force")
    pg, duck = migrator.targets["postgres"], migrator.targets["duckdb"]
    reference = {name: pg.table_rows(name) for name in RELATIONS}
    assert reference == {name: duck.table_rows(name) for name in RELATIONS}
    assert all(reference[name] for name in RELATIONS)
    rejects = staged_rejects(store)
    assert target_rejects(pg) == target_rejects(duck) == rejects
    assert len(rejects[0]) == 2 * BATCHES and any(r[11] is not None for r in rejects[0])
    migrator.close()
    store.close()
    return Staged(source, reference, rejects)


def _acks(staging: Path) -> tuple[dict[str, int], int]:
    store = StagingStore(staging, shop_dataflow())
    try:
        staged = StagedDeltas(store)
        return staged.acks(), staged.released_through()
    finally:
        store.close()


def _check_final(targets: dict[str, BaseTarget], staging: Path, staged: Staged) -> None:
    for target in targets.values():
        target.open()
        assert [b for b, _, _ in target.ledger_rows()] == list(range(1, BATCHES + 1))
        assert target.delta_rows() == 0
        for name in RELATIONS:
            assert target.table_rows(name) == staged.reference[name], f"{target.name}.{name}"
        assert target_rejects(target) == staged.rejects, f"{target.name}: rejects"
        target.close()
    acks, released = _acks(staging)
    assert acks == dict.fromkeys(targets, BATCHES)
    assert released == BATCHES


CASES = [
    # (target, --crash-at, batches per load, what the crashed run left behind: target ledger,
    # staging ack).
    # Staging acknowledgements are written at the release (step 5 of a round), so a crash before
    # it leaves none; the restarted round reads the truth from the target's ledger.
    ("postgres", "copy:postgres:2", PER_LOAD, PER_LOAD, 0),
    ("duckdb", "copy:duckdb:2", PER_LOAD, PER_LOAD, 0),
    # killed once the load's rejects are in (its transaction open): like a kill mid-COPY, which
    # the default run covers; the unit tests fail a load there in-process
    pytest.param("postgres", "rejects:postgres:2", PER_LOAD, PER_LOAD, 0, marks=pytest.mark.slow),
    pytest.param("duckdb", "rejects:duckdb:2", PER_LOAD, PER_LOAD, 0, marks=pytest.mark.slow),
    ("postgres", "committed:postgres:2", PER_LOAD, 2 * PER_LOAD, 0),
    ("duckdb", "committed:duckdb:2", PER_LOAD, 2 * PER_LOAD, 0),
    ("postgres", "merge:postgres:1", PER_LOAD, BATCHES, 0),
    ("duckdb", "merge:duckdb:1", PER_LOAD, BATCHES, 0),
    ("duckdb", "acked:duckdb:1", PER_LOAD, BATCHES, BATCHES),
    # one load of every batch, merged in its own transaction (the round's last load, a merge
    # due), killed in that merge: nothing of the load is left, neither ledger nor delta rows
    ("postgres", "merge:postgres:1", BATCHES, 0, 0),
    ("duckdb", "merge:duckdb:1", BATCHES, 0, 0),
]


@pytest.mark.parametrize(("target", "crash", "per_load", "ledger_after", "ack_after"), CASES)
def test_killed_migration_resumes_exactly_once(
    tmp_path: Path,
    postgres: PostgresServer,
    staged: Staged,
    target: str,
    crash: str,
    per_load: int,
    ledger_after: int,
    ack_after: int,
) -> None:
    staging = copy_staging(staged.path, tmp_path / "staging.duckdb")
    dsn, warehouse = postgres.database(), tmp_path / "wh.duckdb"
    env = migrate_env(
        tmp_path,
        staging,
        dsn,
        warehouse,
        MIGRATION__TARGETS=target,
        MIGRATION__MAX_BATCHES_PER_LOAD=str(per_load),
    )
    merge = "--merge" if crash.startswith("merge") else "--no-merge"
    crashed = run_migrate(["migrate", "push", SPEC, merge, "--crash-at", crash], env)
    assert crashed.returncode == -9, crashed.stderr
    targets = _targets(shop_dataflow().build(), dsn, warehouse, target)
    t = targets[target]
    t.open()
    assert t.watermark() == ledger_after  # the crash hit where it was meant to
    if crash.startswith("merge"):
        # the merge rolled back; a merge of the load's own transaction took the load with it
        assert t.merged_through()[0] == 0 and (t.delta_rows() > 0) == (ledger_after > 0)
    t.close()
    acks, released = _acks(staging)
    assert acks.get(target, 0) == ack_after
    assert released == 0  # a round releases at its end, which the crash never reached

    again = run_migrate(["migrate", "push", SPEC, "--merge"], env)
    assert again.returncode == 0, again.stderr
    _check_final(targets, staging, staged)


def test_a_batch_one_target_holds_goes_to_the_other_exactly_once(
    tmp_path: Path, postgres: PostgresServer, staged: Staged
) -> None:
    staging = copy_staging(staged.path, tmp_path / "staging.duckdb")
    dsn, warehouse = postgres.database(), tmp_path / "wh.duckdb"
    # one target after the other, so that duckdb has committed a load when postgres dies in
    # its own (with the targets loading at once, which one gets there first is a race: see
    # the next test)
    env = migrate_env(
        tmp_path,
        staging,
        dsn,
        warehouse,
        MIGRATION__TARGETS="duckdb,postgres",
        MIGRATION__MAX_BATCHES_PER_LOAD=str(PER_LOAD),
        MIGRATION__PARALLEL_TARGETS="false",
    )
    flow = shop_dataflow().build()

    def watermarks() -> dict[str, int]:
        targets = _targets(flow, dsn, warehouse, "duckdb,postgres")
        out = {}
        for name, t in targets.items():
            t.open()
            out[name] = t.watermark()
            t.close()
        return out

    # duckdb loads batches 1..4 first and commits them; postgres dies in its COPY of them
    crashed = run_migrate(
        ["migrate", "push", SPEC, "--no-merge", "--crash-at", "copy:postgres:1"], env
    )
    assert crashed.returncode == -9, crashed.stderr
    assert watermarks() == {"duckdb": PER_LOAD, "postgres": 0}
    acks, released = _acks(staging)
    assert acks == {} and released == 0  # postgres has not got them: staging keeps them
    # then postgres commits 1..4 and 5..8 and dies before staging hears of it
    crashed = run_migrate(
        ["migrate", "push", SPEC, "--no-merge", "--crash-at", "committed:postgres:2"], env
    )
    assert crashed.returncode == -9, crashed.stderr
    assert watermarks() == {"duckdb": 2 * PER_LOAD, "postgres": 2 * PER_LOAD}
    acks, released = _acks(staging)
    assert acks == {} and released == 0

    again = run_migrate(["migrate", "pull", SPEC], env)
    assert again.returncode == 0, again.stderr
    _check_final(
        _targets(shop_dataflow().build(), dsn, warehouse, "duckdb,postgres"),
        staging,
        staged,
    )


@pytest.mark.parametrize(
    "crash",
    [
        "copy:postgres:1",
        pytest.param("committed:duckdb:2", marks=pytest.mark.slow),
        pytest.param("merge:postgres:1", marks=pytest.mark.slow),
    ],
)
def test_targets_loading_at_once_are_each_loaded_exactly_once_after_a_crash(
    tmp_path: Path, postgres: PostgresServer, staged: Staged, crash: str
) -> None:
    """Both targets load (and merge) at once, a thread each; kill -9 in one target's load,
    commit or merge leaves each target at a batch boundary of its own, and the next round
    brings both to every batch exactly once."""
    staging = copy_staging(staged.path, tmp_path / "staging.duckdb")
    dsn, warehouse = postgres.database(), tmp_path / "wh.duckdb"
    env = migrate_env(
        tmp_path,
        staging,
        dsn,
        warehouse,
        MIGRATION__TARGETS="duckdb,postgres",
        MIGRATION__MAX_BATCHES_PER_LOAD=str(PER_LOAD),
        MIGRATION__PARALLEL_TARGETS="true",
    )
    merge = "--merge" if crash.startswith("merge") else "--no-merge"
    crashed = run_migrate(["migrate", "push", SPEC, merge, "--crash-at", crash], env)
    assert crashed.returncode == -9, crashed.stderr
    targets = _targets(shop_dataflow().build(), dsn, warehouse, "duckdb,postgres")
    for t in targets.values():
        t.open()
        assert t.watermark() % PER_LOAD == 0  # whole loads only
        t.close()
    again = run_migrate(["migrate", "push", SPEC, "--merge"], env)
    assert again.returncode == 0, again.stderr
    _check_final(targets, staging, staged)
