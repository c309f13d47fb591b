"""Bootstrapping a warehouse added after staging released batches, on PostgreSQL and DuckDB, the
peer being the other one; and ``streamdi migrate push`` killed with SIGKILL in the middle of a
bootstrap (in a relation's COPY / Arrow load, in its last transaction, after it before staging
heard of it), then run again: every target must end equal, row for row, to a migration of the
same batches without any crash (a recount), the bootstrapped one's ledger saying its snapshot
once and each later batch once, and staging must release only what both hold."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from migration.bootstrap import read_record
from migration.migrator import Migrator, build_targets
from migration.schema import WarehouseLayout
from migration.targets.base import BaseTarget
from staging.handoff import StagedDeltas
from staging.store import StagingStore
from streamdi.settings import load_settings
from tests.integration.migration.conftest import PostgresServer, migrate_env, run_migrate
from tests.migration_shop import shop_dataflow, stage_shop

pytestmark = pytest.mark.postgres

SPEC = "tests.migration_shop:shop_dataflow"
RELATIONS = ("customers", "accounts", "prices", "activity")
EVENTS = 150
PEER_HOLDS = 8  # batches the peer loaded (and staging released) before the new target came
STAGED = 12  # then staged, the new target added


@pytest.fixture(scope="module")
def reference(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[int, dict[str, list[tuple[Any, ...]]]]:
    """What a migration without crashes and without bootstrap makes of batches 1..12 and 1..14:
    every row of every table (the recount the bootstrapped targets must equal)."""
    root = tmp_path_factory.mktemp("bootstrap-reference")
    flow = shop_dataflow().build()
    out: dict[int, dict[str, list[tuple[Any, ...]]]] = {}
    for last in (STAGED, STAGED + 2):
        store = stage_shop(root / f"staging-{last}.duckdb", range(1, last + 1), events=EVENTS)
        settings = load_settings(
            migration={"targets": "duckdb", "duckdb_path": str(root / f"wh-{last}.duckdb")}
        )
        migrator = Migrator(
            StagedDeltas(store), build_targets(settings, WarehouseLayout(flow)), settings.migration
        )
        migrator.migrate(merge="force")
        duck = migrator.targets["duckdb"]
        out[last] = {name: duck.table_rows(name) for name in RELATIONS}
        assert all(out[last].values())
        migrator.close()
        store.close()
    return out


@dataclass
class Setup:
    staging: Path
    dsn: str
    warehouse: Path
    env: dict[str, str]


def _setup(tmp_path: Path, postgres: PostgresServer, peer: str) -> Setup:
    """Batches 1..8 migrated into ``peer`` alone (and released from staging), 9..12 staged; the
    environment now configures both targets."""
    staging = tmp_path / "staging.duckdb"
    dsn, warehouse = postgres.database(), tmp_path / "wh.duckdb"
    stage_shop(staging, range(1, PEER_HOLDS + 1), events=EVENTS).close()
    alone = migrate_env(tmp_path, staging, dsn, warehouse, MIGRATION__TARGETS=peer)
    first = run_migrate(["migrate", "push", SPEC, "--merge"], alone)
    assert first.returncode == 0, first.stderr
    stage_shop(staging, range(PEER_HOLDS + 1, STAGED + 1), events=EVENTS).close()
    env = migrate_env(
        tmp_path,
        staging,
        dsn,
        warehouse,
        MIGRATION__TARGETS="duckdb,postgres",
        MIGRATION__MAX_BATCHES_PER_LOAD="4",
    )
    return Setup(staging, dsn, warehouse, env)


def _targets(setup: Setup) -> dict[str, BaseTarget]:
    settings = load_settings(
        postgres={"dsn": setup.dsn},
        migration={"targets": "duckdb,postgres", "duckdb_path": str(setup.warehouse)},
    )
    return build_targets(settings, WarehouseLayout(shop_dataflow().build()))


def _staging(setup: Setup) -> tuple[dict[str, int], int]:
    store = StagingStore(setup.staging, shop_dataflow())
    try:
        staged = StagedDeltas(store)
        return staged.acks(), staged.released_through()
    finally:
        store.close()


def assert_ledger(target: BaseTarget, last: int, *, bootstrapped: bool) -> None:
    """``target`` (open) holds every batch up to ``last`` once and nothing unmerged: pushed
    batch by batch, or, ``bootstrapped``, the bootstrap's row then the batches pushed after it,
    its record ``caught_up``."""
    ledger = [(b, v) for b, _, v in target.ledger_rows()]
    if bootstrapped:
        through = ledger[0][0]
        assert ledger[0][1] == "bootstrap"
        assert ledger[1:] == [(b, "push") for b in range(through + 1, last + 1)]
        record = read_record(target)
        assert record is not None and record.state == "caught_up"
    else:
        assert [b for b, _ in ledger] == list(range(1, last + 1))
    assert target.delta_rows() == 0


def _check_final(
    setup: Setup, new: str, reference: dict[str, list[tuple[Any, ...]]], last: int
) -> None:
    for name, target in _targets(setup).items():
        target.open()
        assert_ledger(target, last, bootstrapped=name == new)
        for relation in RELATIONS:
            assert target.table_rows(relation) == reference[relation], f"{name}.{relation}"
        target.close()
    acks, released = _staging(setup)
    assert acks == {"duckdb": last, "postgres": last}
    assert released == last


@pytest.mark.parametrize("new", ["postgres", "duckdb"])
def test_a_target_added_later_is_bootstrapped_from_staging_and_its_peer(
    tmp_path: Path,
    postgres: PostgresServer,
    reference: dict[int, dict[str, list[tuple[Any, ...]]]],
    new: str,
) -> None:
    peer = "duckdb" if new == "postgres" else "postgres"
    setup = _setup(tmp_path, postgres, peer)
    done = run_migrate(["migrate", "push", SPEC, "--merge", "--json", "-"], setup.env)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout[done.stdout.index("{") :])
    boot = answer["targets"][new]["bootstrap"]
    assert (boot["state"], boot["peer"], boot["peer_watermark"], boot["sinks_from"]) == (
        "caught_up",
        peer,
        PEER_HOLDS,
        1,
    )
    assert boot["relations"]["activity"]["source"] == f"{peer} through batch 8, then staging"
    _check_final(setup, new, reference[STAGED], STAGED)
    status = run_migrate(["migrate", "status", SPEC], setup.env)
    assert status.returncode == 0, status.stderr
    assert f"bootstrapped at staging batch {STAGED}" in status.stdout
    assert "caught up" in status.stdout


CASES = [
    # (new target, --crash-at, relations its record marks after the crash, staged meanwhile)
    # killed in the Arrow load of its second relation; staging moves on before the restart,
    # which resumes at a new snapshot and brings the first relation up to it with its deltas
    ("duckdb", "bootstrap-copy:duckdb:2", 1, True),
    # killed in its last transaction (ledger row written, not committed): all relations marked
    ("postgres", "bootstrap-ledger:postgres", 4, True),
    # killed in the COPY of its sink (read from the DuckDB peer): resumes at the same snapshot
    pytest.param("postgres", "bootstrap-copy:postgres:4", 3, False, marks=pytest.mark.slow),
    # killed after its last COMMIT, before staging's acknowledgement: nothing to redo
    pytest.param("duckdb", "bootstrapped:duckdb", 4, False, marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("new", "crash", "marked", "more"), CASES)
def test_a_killed_bootstrap_restarts_or_resumes_exactly_once(
    tmp_path: Path,
    postgres: PostgresServer,
    reference: dict[int, dict[str, list[tuple[Any, ...]]]],
    new: str,
    crash: str,
    marked: int,
    more: bool,
) -> None:
    peer = "duckdb" if new == "postgres" else "postgres"
    setup = _setup(tmp_path, postgres, peer)
    crashed = run_migrate(["migrate", "push", SPEC, "--no-merge", "--crash-at", crash], setup.env)
    assert crashed.returncode == -9, crashed.stderr
    target = _targets(setup)[new]
    target.open()
    record = read_record(target)
    assert record is not None and len(record.relations) == marked
    if crash.startswith("bootstrapped"):
        assert target.watermark() == STAGED and record.state == "loaded"
    else:  # it never looks caught up before it is
        assert target.watermark() == 0 and record.state == "copying"
    target.close()
    acks, released = _staging(setup)
    assert acks.get(new, 0) == 0 and released == PEER_HOLDS  # staging kept every batch for it
    if more:  # (each command costs seconds: only the cases of the default run ask)
        status = run_migrate(["migrate", "status", SPEC, "--json", "-"], setup.env)
        assert status.returncode == 0, status.stderr
        boot = json.loads(status.stdout)["targets"][new]["bootstrap"]
        assert (boot["state"], boot["relations_copied"], boot["relations_total"]) == (
            "copying",
            marked,
            len(RELATIONS),
        )
        text = run_migrate(["migrate", "status", SPEC], setup.env).stdout
        assert f"BOOTSTRAPPING: {marked} of {len(RELATIONS)} relations copied" in text
    last = STAGED
    if more:  # staging moves on before the restart
        stage_shop(setup.staging, range(STAGED + 1, STAGED + 3), events=EVENTS).close()
        last = STAGED + 2

    again = run_migrate(["migrate", "push", SPEC, "--merge"], setup.env)
    assert again.returncode == 0, again.stderr
    _check_final(setup, new, reference[last], last)
