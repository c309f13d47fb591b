"""Rejects into a real PostgreSQL and a DuckDB file at once: the dead letters and aborts of every
batch arrive once each in both (COPY and Arrow keep quotes, commas, newlines, empty strings and
nulls apart), replays mark them, a load that fails midway on PostgreSQL leaves none of its
rejects and its retry brings them once, and a PostgreSQL target made before the rejects tables
existed gets them at open. The kill -9 cases are in ``test_crash.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg2
import pytest

from migration.migrator import Migrator, build_targets
from migration.schema import WarehouseLayout
from staging.handoff import StagedDeltas
from staging.store import StagingStore
from streamdi.settings import StreamdiSettings, load_settings
from tests.integration.migration.conftest import PostgresServer, query
from tests.migration_shop import stage_shop
from tests.unit.migration.test_rejects import (
    LoadFailed,
    assert_rejects_equal_staging,
    target_rejects,
)

pytestmark = pytest.mark.postgres


def _settings(tmp: Path, dsn: str) -> StreamdiSettings:
    return load_settings(
        streamdi={"state_dir": str(tmp)},
        postgres={"dsn": dsn},
        migration={"targets": "duckdb,postgres", "max_batches_per_load": 3, "release_ms": 0},
    )


def _migrator(store: StagingStore, settings: StreamdiSettings, **kwargs: Any) -> Migrator:
    layout = WarehouseLayout(store.flow, settings.migration.schema_name)
    return Migrator(
        StagedDeltas(store), build_targets(settings, layout), settings.migration, **kwargs
    )


def test_rejects_reach_both_warehouses_once_each(tmp_path: Path, postgres: PostgresServer) -> None:
    dsn = postgres.database()
    settings = _settings(tmp_path, dsn)
    path = tmp_path / "staging.duckdb"
    store = stage_shop(path, range(1, 7), events=80, rejects=True)
    seen = {"n": 0}

    def fail_postgres_second_load(phase: str, target: str) -> None:
        if phase == "rejects" and target == "postgres":
            seen["n"] += 1
            if seen["n"] == 2:  # batches 4..6: rejects appended, ledger rows not yet
                raise LoadFailed

    migrator = _migrator(store, settings, hook=fail_postgres_second_load)
    with pytest.raises(LoadFailed):
        migrator.migrate(merge="never")
    pg = migrator.targets["postgres"]
    assert pg.watermark() == 3
    dead, aborts = target_rejects(pg)
    assert {r[1] for r in dead} == {1, 2, 3} and {a[0] for a in aborts} == {1, 2, 3}
    migrator.close()

    migrator = _migrator(store, settings)
    report = migrator.migrate(merge="never")
    assert {n: r.watermark for n, r in report.targets.items()} == {"duckdb": 6, "postgres": 6}
    migrator.close()
    store.close()

    # another round: replays of dead letters loaded in the first one
    store = stage_shop(path, range(7, 11), events=80, rejects=True)
    migrator = _migrator(store, settings)
    migrator.migrate(via="pull", merge="force")
    pg, duck = migrator.targets["postgres"], migrator.targets["duckdb"]
    for target in (pg, duck):
        assert_rejects_equal_staging(target, store)
        dead, aborts = target_rejects(target)
        assert len(dead) == 20 and sum(aborts.values()) == 20
        assert {r[0]: r[11] for r in dead if r[11] is not None} == {
            1 + 2 * (b - 4): b for b in range(4, 11)
        }
        assert [b for b, _, _ in target.ledger_rows()] == list(range(1, 11))
    assert target_rejects(pg) == target_rejects(duck)
    # an empty string and a null stay apart through COPY
    assert query(dsn, "SELECT count(*) FROM shop.dead_letters WHERE payload = ''") == [(5,)]
    assert query(dsn, "SELECT count(*) FROM shop.dead_letters WHERE payload IS NULL") == [(5,)]
    # PostgreSQL keys the dead letters by id
    keys = query(
        dsn,
        "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
        "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = 'shop.dead_letters'::regclass "
        "AND i.indisprimary",
    )
    assert keys == [("id",)]
    migrator.close()
    store.close()


def test_an_older_postgres_target_gets_the_rejects_tables_at_open(
    tmp_path: Path, postgres: PostgresServer
) -> None:
    dsn = postgres.database()
    settings = _settings(tmp_path, dsn)
    path = tmp_path / "staging.duckdb"
    store = stage_shop(path, range(1, 4), events=60, rejects=True)
    migrator = _migrator(store, settings)
    migrator.migrate(["postgres"], merge="never")
    migrator.close()
    # what a target of the layout before this change holds: the same tables but these two
    con = psycopg2.connect(dsn)
    con.autocommit = True
    with con.cursor() as cur:
        cur.execute("DROP TABLE shop.dead_letters, shop.aborts")
    con.close()
    store.close()

    store = stage_shop(path, range(4, 7), events=60, rejects=True)
    migrator = _migrator(store, settings)
    report = migrator.migrate(["postgres"], merge="never")
    assert report.targets["postgres"].start == 3 and report.targets["postgres"].watermark == 6
    dead, aborts = target_rejects(migrator.targets["postgres"])
    assert {r[1] for r in dead} == {4, 5, 6} and {a[0] for a in aborts} == {4, 5, 6}
    assert all(r[11] is None for r in dead)  # 4..6 replay dead letters of 1..3: not here
    migrator.close()
    store.close()
