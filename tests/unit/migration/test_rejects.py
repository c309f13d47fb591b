"""Rejects reach the warehouse (DuckDB file, no service needed): staged range reads carry the dead
letters, aborts and replays of their batches; every load appends them in its transaction, once
each, across rounds, a failed load and a load tried again; a replayed dead letter shows as
replayed; a target made before the rejects tables existed gets them at open."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.schema import CreateTable

from etl_dataflows import Dataflow
from migration.exceptions import WarehouseLayoutError
from migration.migrator import Migrator, build_targets
from migration.schema import WarehouseLayout, create_statements
from migration.targets.base import BaseTarget
from staging.handoff import STAGED_DEAD_LETTER_SCHEMA, StagedDeltas
from staging.layout import fingerprint
from staging.store import StagingStore
from streamdi.settings import StreamdiSettings, load_settings
from tests.migration_shop import shop_dataflow, stage_shop

DEAD_COLUMNS = ", ".join(f'"{f.name}"' for f in STAGED_DEAD_LETTER_SCHEMA)
ABORT_COLUMNS = '"batch_id", "step", "source", "pos", "ts", "kind", "reason"'


def _settings(tmp: Path, **migration: Any) -> StreamdiSettings:
    return load_settings(
        streamdi={"state_dir": str(tmp)},
        migration={"targets": "duckdb", "max_batches_per_load": 3, "release_ms": 0, **migration},
    )


def _migrator(store: StagingStore, settings: StreamdiSettings, **kwargs: Any) -> Migrator:
    layout = WarehouseLayout(store.flow, settings.migration.schema_name)
    return Migrator(
        StagedDeltas(store), build_targets(settings, layout), settings.migration, **kwargs
    )


def _rows(table: pa.Table) -> list[tuple[Any, ...]]:
    columns = [table.column(i).to_pylist() for i in range(table.num_columns)]
    return list(zip(*columns, strict=True))


def staged_rejects(store: StagingStore) -> tuple[list[tuple[Any, ...]], Counter[tuple[Any, ...]]]:
    """Staging's dead letters (every column, by id) and aborts (a multiset: they have no key)."""
    dead = store.query(f"SELECT {DEAD_COLUMNS} FROM streamdi.dead_letters ORDER BY id")
    aborts = store.query(f"SELECT {ABORT_COLUMNS} FROM streamdi.aborts")
    return _rows(dead), Counter(_rows(aborts))


def target_rejects(target: BaseTarget) -> tuple[list[tuple[Any, ...]], Counter[tuple[Any, ...]]]:
    """The target's dead letters (by id) and aborts, as :func:`staged_rejects` returns them."""
    layout = target.layout
    dead = target.fetch(f"SELECT {DEAD_COLUMNS} FROM {layout.dead_letters_name} ORDER BY id")
    aborts = target.fetch(f"SELECT {ABORT_COLUMNS} FROM {layout.aborts_name}")
    return [tuple(r) for r in dead], Counter(tuple(r) for r in aborts)


def assert_rejects_equal_staging(target: BaseTarget, store: StagingStore) -> None:
    dead, aborts = target_rejects(target)
    staged_dead, staged_aborts = staged_rejects(store)
    assert dead == staged_dead, f"{target.name}: dead letters differ from staging"
    assert aborts == staged_aborts, f"{target.name}: aborts differ from staging"


def test_staged_reads_carry_the_rejects_of_their_batches(tmp_path: Path) -> None:
    store = stage_shop(tmp_path / "s.duckdb", range(1, 9), events=60, rejects=True)
    staged = StagedDeltas(store)
    whole = staged.read(0, 8)
    dead, aborts = staged_rejects(store)
    assert len(dead) == 16 and sum(aborts.values()) == 16  # two of each per batch
    assert _rows(whole.dead_letters) == dead  # every column, replays included
    assert Counter(_rows(whole.aborts)) == aborts
    assert whole.rejects == 32 and whole.rows == staged.pending_rows(0)  # rows: data rows only
    # batch b replays the first dead letter of batch b - 3 (ids 1, 3, ... of batches 1, 2, ...)
    assert _rows(whole.replays) == [(1, 4), (3, 5), (5, 6), (7, 7), (9, 8)]

    first, second = staged.read(0, 5), staged.read(5, 8)
    assert set(first.dead_letters.column("batch_id").to_pylist()) == {1, 2, 3, 4, 5}
    assert set(second.aborts.column("batch_id").to_pylist()) == {6, 7, 8}
    assert first.dead_letters.num_rows + second.dead_letters.num_rows == 16
    # a read is as of its last batch: a replay after it is not shown yet, but comes with the
    # range that holds the replaying batch
    replayed = dict(zip(*first.dead_letters.select(["id", "replayed_in"]).columns, strict=True))
    assert {i.as_py(): r.as_py() for i, r in replayed.items() if r.is_valid} == {1: 4, 3: 5}
    assert _rows(first.replays) == [(1, 4), (3, 5)]
    assert _rows(second.replays) == [(5, 6), (7, 7), (9, 8)]

    # served from the cache of recent commits or read from the file: the same rejects
    assert staged.read(2, 6).dead_letters.num_rows == 8
    cold = StagingStore(tmp_path / "s.duckdb", store.flow, recent_cache_bytes=0)
    store.close()
    try:
        again = StagedDeltas(cold).read(0, 5)
        for name in ("dead_letters", "aborts", "replays"):
            assert getattr(again, name).equals(getattr(first, name)), name
    finally:
        cold.close()


@pytest.mark.parametrize("kind", ["table", "sink"])
@pytest.mark.parametrize("name", ["dead_letters", "aborts"])
def test_a_dataflow_table_or_sink_named_like_a_rejects_table_is_refused(
    kind: str, name: str
) -> None:
    flow = Dataflow("reserved")
    flow.source("s", schema={"id": "int64"})
    if kind == "table":
        flow.table(name, key={"id": "int64"}, columns={"v": "int64"})
        flow.sink("out", input="s")
    else:
        flow.sink(name, input="s")
    with pytest.raises(WarehouseLayoutError, match=f"named \\['{name}'\\].*rename"):
        WarehouseLayout(flow.build())


def test_rejects_tables_are_laid_out_outside_the_fingerprint() -> None:
    from duckdb_engine import Dialect as DuckDBDialect

    flow = shop_dataflow().build()
    layout = WarehouseLayout(flow, schema="wh")
    assert layout.fingerprint == fingerprint(flow)
    assert "dead_letters" not in layout.tables and "aborts" not in layout.tables  # never merged
    assert [c.name for c in layout.dead_letters.columns] == STAGED_DEAD_LETTER_SCHEMA.names
    assert [c.name for c in layout.aborts.primary_key] == []
    pg = str(CreateTable(layout.dead_letters).compile(dialect=postgresql.dialect()))
    assert 'PRIMARY KEY ("id")' in pg
    duck = [
        s
        for s in create_statements(layout.metadata, DuckDBDialect(), layout.schemas, row_keys=False)
        if '"wh"."dead_letters"' in s
    ]
    assert len(duck) == 1 and "PRIMARY KEY" not in duck[0].upper()
    assert isinstance(layout.dead_letters.c.partition.type, sa.Integer)


def test_rejects_arrive_once_each_across_rounds_and_replays_mark_them(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    path = tmp_path / "staging.duckdb"
    store = stage_shop(path, range(1, 6), events=80, rejects=True)
    data_rows = StagedDeltas(store).read(0, 5).rows_per_batch()
    migrator = _migrator(store, settings)
    migrator.migrate(via="push", merge="never")
    target = migrator.targets["duckdb"]
    assert_rejects_equal_staging(target, store)
    dead, _ = target_rejects(target)
    # batches 4 and 5 replayed dead letters 1 and 3
    assert {r[0]: r[11] for r in dead if r[11] is not None} == {1: 4, 3: 5}
    # the ledger counts each batch's data rows (deltas and outputs), not its four rejects
    assert {b: n for b, n, _ in target.ledger_rows()} == data_rows
    migrator.close()

    # more batches, whose replays name dead letters an earlier round loaded
    store.close()
    store = stage_shop(path, range(6, 12), events=80, rejects=True)
    migrator = _migrator(store, settings)
    report = migrator.migrate(via="pull", merge="force")
    assert report.targets["duckdb"].loads == 2
    target = migrator.targets["duckdb"]
    assert_rejects_equal_staging(target, store)
    dead, aborts = target_rejects(target)
    assert len(dead) == 22 and sum(aborts.values()) == 22
    assert {r[0]: r[11] for r in dead if r[11] is not None} == {
        1 + 2 * (b - 4): b for b in range(4, 12)
    }
    migrator.close()
    store.close()


class LoadFailed(Exception):
    """What the failing hook raises (a load that dies in the middle of its transaction)."""


def test_a_failed_load_leaves_no_rejects_and_its_retry_brings_them_once(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    store = stage_shop(tmp_path / "staging.duckdb", range(1, 9), events=60, rejects=True)
    seen = {"n": 0}

    def fail_second_load(phase: str, target: str) -> None:
        if phase == "rejects":
            seen["n"] += 1
            if seen["n"] == 2:  # batches 4..6: the rejects are in, the ledger rows not yet
                raise LoadFailed

    migrator = _migrator(store, settings, hook=fail_second_load)
    with pytest.raises(LoadFailed):
        migrator.migrate(merge="never")
    target = migrator.targets["duckdb"]
    assert target.watermark() == 3
    dead, aborts = target_rejects(target)
    assert {r[1] for r in dead} == {1, 2, 3} and len(dead) == 6  # 4..6 rolled back
    assert {a[0] for a in aborts} == {1, 2, 3} and sum(aborts.values()) == 6
    migrator.close()

    migrator = _migrator(store, settings)
    assert migrator.migrate(merge="never").targets["duckdb"].watermark == 8
    assert_rejects_equal_staging(migrator.targets["duckdb"], store)
    migrator.close()
    store.close()


def test_a_load_tried_again_after_its_commit_adds_nothing(tmp_path: Path) -> None:
    store = stage_shop(tmp_path / "staging.duckdb", range(1, 7), events=60, rejects=True)
    layout = WarehouseLayout(store.flow)
    staged = StagedDeltas(store)
    first, second = staged.read(0, 3), staged.read(3, 6)
    target = build_targets(_settings(tmp_path), layout)["duckdb"]
    target.open()
    assert target.load(first, "push") == 3
    assert target.load(first, "push") == 3  # the ledger says 3: nothing is loaded twice
    assert target.load(second, "push") == 6
    assert target.load(second, "pull") == 6
    assert target.load(first, "pull") == 6
    assert_rejects_equal_staging(target, store)
    assert [b for b, _, _ in target.ledger_rows()] == [1, 2, 3, 4, 5, 6]
    target.close()
    store.close()


def test_a_target_made_before_the_rejects_tables_gets_them_at_open(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    path = tmp_path / "staging.duckdb"
    store = stage_shop(path, range(1, 5), events=60, rejects=True)
    migrator = _migrator(store, settings)
    migrator.migrate(merge="never")
    target = migrator.targets["duckdb"]
    # what a target of the layout before this change holds: the same tables but these two
    target.begin()
    target.execute(f"DROP TABLE {target.layout.dead_letters_name}")
    target.execute(f"DROP TABLE {target.layout.aborts_name}")
    target.commit()
    migrator.close()

    store.close()
    store = stage_shop(path, range(5, 9), events=60, rejects=True)
    migrator = _migrator(store, settings)  # no TargetMismatch: the fingerprint is unchanged
    report = migrator.migrate(merge="force")
    assert report.targets["duckdb"].start == 4 and report.targets["duckdb"].watermark == 8
    target = migrator.targets["duckdb"]
    dead, aborts = target_rejects(target)
    staged_dead, _ = staged_rejects(store)
    # the batches loaded from now on bring theirs; earlier ones stay in staging only, and the
    # replays of those (batches 5..7 replay dead letters of batches 2..4) mark nothing; batch 8
    # replays the first dead letter of batch 5 (id 9)
    assert dead == [r for r in staged_dead if r[1] >= 5]
    assert {a[0] for a in aborts} == {5, 6, 7, 8} and sum(aborts.values()) == 8
    assert {r[0]: r[11] for r in dead if r[11] is not None} == {9: 8}
    migrator.close()
    store.close()
