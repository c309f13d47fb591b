"""Both targets at once on a real PostgreSQL and a DuckDB file: push and pull mixed end equal to
staging (two-space reads before a merge, full tables after), every batch in each ledger once; a
PostgreSQL that is stopped for a while makes staging buffer, and it catches up when it returns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from migration.migrator import Migrator, build_targets
from migration.schema import WarehouseLayout
from migration.targets.base import BaseTarget
from migration.targets.duckdb_file import DuckDBTarget
from migration.targets.postgres import PostgresTarget
from staging.handoff import StagedDeltas
from staging.store import StagingStore
from streamdi.settings import StreamdiSettings, load_settings
from tests.integration.migration.conftest import PostgresServer
from tests.migration_shop import shop_dataflow, stage_shop
from tests.unit.migration.test_duckdb_target import assert_target_equals_staging

pytestmark = pytest.mark.postgres


def _settings(tmp: Path, dsn: str, **migration: Any) -> StreamdiSettings:
    return load_settings(
        streamdi={"state_dir": str(tmp)},
        postgres={"dsn": dsn},
        migration={
            "targets": "duckdb,postgres",
            "max_batches_per_load": 4,
            "release_ms": 0,
            **migration,
        },
    )


def _migrator(store: StagingStore, settings: StreamdiSettings) -> Migrator:
    layout = WarehouseLayout(store.flow, settings.migration.schema_name)
    return Migrator(StagedDeltas(store), build_targets(settings, layout), settings.migration)


def _outputs(store: StagingStore) -> dict[str, pa.Table]:
    return {s: store.query(f'SELECT * FROM outputs."{s}"') for s in store.flow.sinks}


def _more(
    store: StagingStore, path: Path, batches: range, outputs: dict[str, pa.Table]
) -> StagingStore:
    store.close()
    store = stage_shop(path, batches, events=150)
    for sink in store.flow.sinks:
        new = store.query(f'SELECT * FROM outputs."{sink}" WHERE batch_id >= {batches.start}')
        outputs[sink] = pa.concat_tables([outputs[sink], new])
    return store


def test_push_and_pull_mixed_into_both_targets(tmp_path: Path, postgres: PostgresServer) -> None:
    settings = _settings(tmp_path, postgres.database())
    path = tmp_path / "staging.duckdb"
    store = stage_shop(path, range(1, 7), events=150)
    outputs = _outputs(store)
    migrator = _migrator(store, settings)
    report = migrator.migrate(via="push", merge="never")
    assert {n: r.watermark for n, r in report.targets.items()} == {"duckdb": 6, "postgres": 6}
    migrator.close()

    store = _more(store, path, range(7, 13), outputs)
    migrator = _migrator(store, settings)
    migrator.migrate(["postgres"], via="pull", merge="force")  # postgres pulls; duckdb lags
    assert StagedDeltas(store).released_through() == 6  # duckdb has not acknowledged 7..12
    migrator.close()

    store = _more(store, path, range(13, 16), outputs)
    migrator = _migrator(store, settings)
    report = migrator.migrate(via="push", merge="never")
    assert report.targets["duckdb"].start == 6 and report.targets["postgres"].start == 12
    assert report.released_through == 15
    state = store.load_state().tables
    for target in migrator.targets.values():
        assert_target_equals_staging(target, state, outputs, current=True)
    migrator.merge()
    pg, duck = migrator.targets["postgres"], migrator.targets["duckdb"]
    for target in (pg, duck):
        assert target.delta_rows() == 0
        assert_target_equals_staging(target, state, outputs, current=False)
        assert [b for b, _, _ in target.ledger_rows()] == list(range(1, 16))
    assert [v for _, _, v in pg.ledger_rows()][6:12] == ["pull"] * 6
    assert [v for _, _, v in duck.ledger_rows()][6:12] == ["push"] * 6
    # both warehouses hold the very same rows
    for name in ("customers", "accounts", "prices", "activity"):
        assert pg.table_rows(name) == duck.table_rows(name)
    migrator.close()
    store.close()


def test_a_stopped_target_buffers_in_staging_and_catches_up(
    tmp_path: Path, postgres: PostgresServer
) -> None:
    settings = _settings(tmp_path, postgres.database())
    path = tmp_path / "staging.duckdb"
    store = stage_shop(path, range(1, 5), events=150)
    outputs = _outputs(store)
    migrator = _migrator(store, settings)
    migrator.migrate()
    postgres.stop()
    try:
        for first in (5, 9):
            migrator.close()
            store = _more(store, path, range(first, first + 4), outputs)
            migrator = _migrator(store, settings)
            report = migrator.migrate()
            assert report.failed == ["postgres"]
            assert report.targets["duckdb"].watermark == first + 3
            # staging keeps everything postgres has not acknowledged
            assert report.released_through == 4
            assert StagedDeltas(store).pending_rows(4) > 0
        assert "unavailable" in str(migrator.status()["targets"]["postgres"].get("error"))
    finally:
        postgres.start()
    report = migrator.migrate(merge="force")
    assert report.failed == []
    assert report.targets["postgres"].start == 4 and report.targets["postgres"].watermark == 12
    assert report.released_through == 12
    state = store.load_state().tables
    for target in migrator.targets.values():
        assert_target_equals_staging(target, state, outputs, current=False)
        assert [b for b, _, _ in target.ledger_rows()] == list(range(1, 13))
    migrator.close()
    store.close()


def test_merges_of_one_batch_and_of_many_agree_with_staging(
    tmp_path: Path, postgres: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A merge whose deltas hold one upsert per row id takes them as they are (PostgreSQL: an
    update and an insert; DuckDB: a delete and an insert); one over batches that change a row
    twice, or delete one, the newest delta of each row id. Merged after every batch, then many batches at once, both warehouses equal
    staging each time, and both ways were taken on each."""
    taken: dict[str, list[str]] = {"duckdb": [], "postgres": []}
    for kind in (DuckDBTarget, PostgresTarget):
        merge_unique = kind._merge_unique  # noqa: SLF001 - noting which way each merge went

        def noted(self: BaseTarget, *args: Any, _merge: Any = merge_unique) -> int:
            taken[self.name].append(args[0])
            return int(_merge(self, *args))

        monkeypatch.setattr(kind, "_merge_unique", noted)
    settings = _settings(tmp_path, postgres.database())
    path = tmp_path / "staging.duckdb"
    store = stage_shop(path, range(1, 2), events=150)
    outputs = _outputs(store)
    for batch in range(1, 6):  # a load and a merge per batch
        if batch > 1:
            store = _more(store, path, range(batch, batch + 1), outputs)
        migrator = _migrator(store, settings)
        migrator.migrate(via="push", merge="force")
        state = store.load_state().tables
        for target in migrator.targets.values():
            assert target.watermark() == batch and target.delta_rows() == 0
            assert_target_equals_staging(target, state, outputs, current=False)
        migrator.close()
    # the one-batch merges took the short way (accounts always have deletes: never)
    assert all(taken.values()), taken
    fast = {n: len(v) for n, v in taken.items()}
    store = _more(store, path, range(6, 16), outputs)
    migrator = _migrator(store, settings)
    migrator.migrate(via="push", merge="never")
    migrator.merge()  # ten batches at once: rows changed twice take the newest
    state = store.load_state().tables
    for target in migrator.targets.values():
        assert target.delta_rows() == 0
        assert_target_equals_staging(target, state, outputs, current=False)
    merged_long = {n: len(v) - fast[n] for n, v in taken.items()}
    stateful = [
        n for n, t in migrator.targets["duckdb"].layout.tables.items() if t.kind != "output"
    ]
    assert all(merged_long[n] < len(stateful) for n in merged_long), merged_long
    for name in ("customers", "accounts", "prices", "activity"):
        assert migrator.targets["postgres"].table_rows(name) == migrator.targets[
            "duckdb"
        ].table_rows(name)
    migrator.close()
    store.close()


def _relation_facts(dsn: str, schema: str) -> dict[str, tuple[list[str], int]]:
    """Per table of ``schema``: its storage options and how often it was vacuumed by hand (a
    VACUUM reports that at once)."""
    from tests.integration.migration.conftest import query

    rows = query(
        dsn,
        "SELECT c.relname, c.reloptions, coalesce(s.vacuum_count, 0) "
        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid "
        f"WHERE n.nspname = '{schema}' AND c.relkind = 'r'",
    )
    return {str(r[0]): (list(r[1] or []), int(r[2])) for r in rows}


def test_postgres_leaves_room_for_merges_and_vacuums_what_a_merge_emptied(
    tmp_path: Path, postgres: PostgresServer
) -> None:
    """State tables' full tables get ``POSTGRES__FILLFACTOR`` (sinks do not), also when they
    were made before with another one; after a merge, the delta tables it emptied are vacuumed,
    and the full tables still equal staging."""
    dsn = postgres.database()
    settings = _settings(tmp_path, dsn, targets="postgres")
    path = tmp_path / "staging.duckdb"
    store = stage_shop(path, range(1, 5), events=150)
    outputs = _outputs(store)
    layout = WarehouseLayout(store.flow, settings.migration.schema_name)
    # a warehouse made by an earlier streamdi: no fill factor on its tables
    early = PostgresTarget(layout, dsn, fillfactor=100)
    early.open()
    early.close()
    states = sorted(n for n, t in layout.tables.items() if t.kind == "state")
    sinks = sorted(n for n, t in layout.tables.items() if t.kind == "output")
    assert states and sinks
    before = _relation_facts(dsn, layout.schema)
    assert all(before[n][0] == ["fillfactor=100"] for n in states)

    migrator = _migrator(store, settings)
    assert settings.postgres.fillfactor == 70
    migrator.migrate(via="push", merge="never")
    full = _relation_facts(dsn, layout.schema)
    assert all(full[n][0] == ["fillfactor=70"] for n in states), full
    assert all(full[n][0] == [] for n in sinks), full

    delta_schema = layout.delta_schema.strip('"')
    loaded = _relation_facts(dsn, delta_schema)
    with migrator.targets["postgres"].guard():
        filled = sorted(migrator.targets["postgres"].filled_deltas())
    assert set(states) & set(filled) and set(sinks) & set(filled)
    migrator.merge()
    merged = _relation_facts(dsn, delta_schema)
    for name in filled:
        assert merged[name][1] == loaded[name][1] + 1, (name, loaded[name], merged[name])
    pg = migrator.targets["postgres"]
    assert_target_equals_staging(pg, store.load_state().tables, outputs, current=False)
    migrator.close()
    store.close()


def _twin_targets(tmp: Path, postgres: PostgresServer, tag: str) -> dict[str, BaseTarget]:
    settings = load_settings(
        postgres={"dsn": postgres.database()},
        migration={"targets": "duckdb,postgres", "duckdb_path": str(tmp / f"{tag}.duckdb")},
    )
    targets = build_targets(settings, WarehouseLayout(shop_dataflow().build()))
    for target in targets.values():
        target.open()
    return targets


def _contents(target: BaseTarget) -> dict[str, Any]:
    return {
        "tables": {name: target.table_rows(name) for name in target.layout.tables},
        "ledger": [(b, n) for b, n, _ in target.ledger_rows()],
        "merged_through": target.merged_through()[0],
        "delta_rows": target.delta_rows(),
    }


def test_a_load_merged_in_its_own_transaction_equals_a_load_then_a_merge(
    tmp_path: Path, postgres: PostgresServer
) -> None:
    """``load_and_merge`` (one transaction) leaves each warehouse as ``load`` then ``merge``
    (two) do: the same full tables, ledger and merge watermark, no delta rows. With an earlier
    load still unmerged it only loads (the merge of both is the next ``merge``'s), and ends
    equal again after that merge."""
    store = stage_shop(tmp_path / "staging.duckdb", range(1, 10), events=150, rejects=True)
    staged = StagedDeltas(store)
    two_steps = _twin_targets(tmp_path, postgres, "two")
    one_step = _twin_targets(tmp_path, postgres, "one")
    try:
        for kind in ("duckdb", "postgres"):
            plain, combined = two_steps[kind], one_step[kind]
            # 1-3 and 4-6: each load merged at once
            for after, upto in ((0, 3), (3, 6)):
                changes = staged.read(after, upto)
                assert plain.load(changes, "push") == upto
                merged = plain.merge()
                assert merged is not None and merged.through == upto
                w, result = combined.load_and_merge(changes, "push")
                assert w == upto and result is not None
                assert (result.through, result.rows) == (upto, merged.rows), kind
                assert _contents(combined) == _contents(plain), kind
                assert _contents(combined)["delta_rows"] == 0
            # 7-8 loaded and left unmerged; 9 then only loads, and the merge takes both
            for target in (plain, combined):
                target.load(staged.read(6, 8), "push")
            plain.load(staged.read(8, 9), "push")
            w, result = combined.load_and_merge(staged.read(8, 9), "push")
            assert (w, result) == (9, None), kind
            assert combined.delta_rows() > 0 and combined.merged_through()[0] == 6
            assert plain.merge() is not None and combined.merge() is not None
            assert _contents(combined) == _contents(plain), kind
            assert _contents(combined)["merged_through"] == 9
            # a load of batches the target holds already changes nothing
            assert combined.load_and_merge(staged.read(6, 9), "push") == (9, None)
    finally:
        for target in [*two_steps.values(), *one_step.values()]:
            target.close()
        store.close()


def test_a_failed_load_and_merge_is_made_again_as_a_load_then_a_merge(
    tmp_path: Path, postgres: PostgresServer, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    """When the load and merge of one transaction fails, the round loads, then merges, as
    before it had that transaction: a merge that keeps failing never holds the loads back."""
    calls: list[str] = []

    def broken(self: BaseTarget, *args: Any, **kwargs: Any) -> Any:
        calls.append(self.name)
        raise RuntimeError("merge failed on purpose")

    monkeypatch.setattr(BaseTarget, "load_and_merge", broken)
    settings = _settings(tmp_path, postgres.database(), max_batches_per_load=10)
    store = stage_shop(tmp_path / "staging.duckdb", range(1, 4), events=150)
    outputs = _outputs(store)  # before the round releases them
    migrator = _migrator(store, settings)
    try:
        with caplog.at_level("WARNING", logger="migration.migrator"):
            report = migrator.migrate(via="push", merge="force")
        assert sorted(calls) == ["duckdb", "postgres"]
        assert "merge failed on purpose" in caplog.text
        state = store.load_state().tables
        for name, target in migrator.targets.items():
            assert report.targets[name].error is None
            assert target.watermark() == 3 and target.merged_through()[0] == 3
            assert target.delta_rows() == 0
            assert_target_equals_staging(target, state, outputs, current=False)
    finally:
        migrator.close()
        store.close()
