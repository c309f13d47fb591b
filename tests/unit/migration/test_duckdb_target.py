"""Migration into a DuckDB warehouse file (no service needed): the warehouse ends equal to staging,
before a merge (full + delta, the two-space read) and after it; a batch is never loaded twice; a
merge that fails midway leaves the deltas to merge again; SCD type 2 versions arrive closed and
opened; the pipeline-side worker pushes on its thresholds and pulls when the target is idle."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from migration.migrator import Migrator, build_targets
from migration.schema import WarehouseLayout
from migration.targets.base import BaseTarget
from migration.worker import MigrationWorker
from staging.handoff import StagedDeltas
from staging.store import StagingStore
from streamdi.settings import StreamdiSettings, load_settings
from tests.migration_shop import stage_shop


def _settings(tmp: Path, **migration: Any) -> StreamdiSettings:
    return load_settings(
        streamdi={"state_dir": str(tmp)},
        migration={"targets": "duckdb", "max_batches_per_load": 3, "release_ms": 0, **migration},
    )


def _migrator(store: StagingStore, settings: StreamdiSettings) -> Migrator:
    layout = WarehouseLayout(store.flow, settings.migration.schema_name)
    return Migrator(StagedDeltas(store), build_targets(settings, layout), settings.migration)


def _rows(table: pa.Table) -> list[tuple[Any, ...]]:
    columns = [table.column(i).to_pylist() for i in range(table.num_columns)]
    return sorted(zip(*columns, strict=True), key=repr)


def assert_target_equals_staging(
    target: BaseTarget, state: dict[str, pa.Table], outputs: dict[str, pa.Table], *, current: bool
) -> None:
    for name, table in state.items():
        got = sorted(target.table_rows(name, current=current), key=repr)
        assert got == _rows(table), f"{target.name}.{name} differs from staging"
    for sink, rows in outputs.items():
        got = sorted(target.table_rows(sink, current=current), key=repr)
        assert got == _rows(rows), f"{target.name}.{sink} differs from staging"


def _outputs(store: StagingStore) -> dict[str, pa.Table]:
    return {s: store.query(f'SELECT * FROM outputs."{s}"') for s in store.flow.sinks}


def test_warehouse_equals_staging_before_and_after_merges(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    store = stage_shop(tmp_path / "staging.duckdb", range(1, 9), events=150)
    outputs = _outputs(store)  # captured before the release deletes them from staging
    migrator = _migrator(store, settings)
    target = migrator.targets["duckdb"]

    first = migrator.migrate(via="push", merge="never")
    assert first.targets["duckdb"].watermark == 8 and first.targets["duckdb"].loads == 3
    assert target.delta_rows() == first.rows > 0
    # two-space read: full tables (empty) overlaid with the deltas is the staged state
    assert_target_equals_staging(target, store.load_state().tables, outputs, current=True)
    assert first.released_through == 8  # the only target acknowledged everything
    assert store.query('SELECT count(*) AS n FROM delta_log."accounts"').column("n")[0].as_py() == 0

    # more batches; half merged, half in the delta tables
    store.close()
    migrator.close()
    store = stage_shop(tmp_path / "staging.duckdb", range(9, 15), events=150)
    outputs = {s: pa.concat_tables([outputs[s], t]) for s, t in _outputs(store).items()}
    migrator = _migrator(store, settings)
    target = migrator.targets["duckdb"]
    migrator.migrate(via="pull", merge="force")
    store.close()
    migrator.close()
    store = stage_shop(tmp_path / "staging.duckdb", range(15, 18), events=150)
    outputs = {s: pa.concat_tables([outputs[s], t]) for s, t in _outputs(store).items()}
    migrator = _migrator(store, settings)
    target = migrator.targets["duckdb"]
    migrator.migrate(via="push", merge="never")
    state = store.load_state().tables
    assert_target_equals_staging(target, state, outputs, current=True)
    migrator.merge()
    assert target.delta_rows() == 0
    assert_target_equals_staging(target, state, outputs, current=False)
    ledger = target.ledger_rows()
    assert [b for b, _, _ in ledger] == list(range(1, 18))
    assert {v for _, _, v in ledger} == {"push", "pull"}
    migrator.close()
    store.close()


def test_a_batch_is_never_loaded_twice(tmp_path: Path) -> None:
    settings = _settings(tmp_path, max_batches_per_load=10)
    store = stage_shop(tmp_path / "staging.duckdb", range(1, 5), events=100)
    migrator = _migrator(store, settings)
    target = migrator.targets["duckdb"]
    target.open()
    changes = StagedDeltas(store).read(0, 4)
    assert target.load(changes, "push") == 4
    rows = target.delta_rows()
    # the same changes again (a crash after the commit, before the acknowledgement): refused
    assert target.load(changes, "push") == 4
    assert target.delta_rows() == rows
    # the migrator reads the target's ledger, not the stale acknowledgement
    report = migrator.migrate(merge="never")
    assert report.targets["duckdb"].batches == 0 and target.delta_rows() == rows
    assert [b for b, _, _ in target.ledger_rows()] == [1, 2, 3, 4]
    migrator.close()
    store.close()


def test_a_failed_merge_leaves_the_deltas_to_merge_again(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    store = stage_shop(tmp_path / "staging.duckdb", range(1, 6), events=120)
    outputs = _outputs(store)
    migrator = _migrator(store, settings)
    target = migrator.targets["duckdb"]
    migrator.migrate(merge="never")
    unmerged = target.delta_rows()

    def fail(phase: str) -> None:
        if phase == "merge":
            raise RuntimeError("injected failure in the middle of a merge")

    with pytest.raises(RuntimeError, match="injected"):
        target.merge(fail)
    assert target.delta_rows() == unmerged
    assert target.merged_through()[0] == 0
    assert all(not target.table_rows(n) for n in ("customers", "accounts", "activity"))
    result = target.merge()
    assert result is not None and result.through == 5
    assert target.merge() is None  # nothing left
    assert_target_equals_staging(target, store.load_state().tables, outputs, current=False)
    migrator.close()
    store.close()


def test_scd2_versions_are_closed_and_opened_by_surrogate_key(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    store = stage_shop(tmp_path / "staging.duckdb", range(1, 3), events=200)
    migrator = _migrator(store, settings)
    target = migrator.targets["duckdb"]
    migrator.migrate(merge="force")
    store.close()
    migrator.close()
    store = stage_shop(tmp_path / "staging.duckdb", range(3, 7), events=200)
    migrator = _migrator(store, settings)
    target = migrator.targets["duckdb"]
    migrator.migrate(merge="force")
    con = target.connection  # type: ignore[attr-defined]
    current = con.execute(
        "SELECT cid, count(*) FILTER (WHERE is_current), count(*) FROM shop.customers GROUP BY cid"
    ).fetchall()
    assert current and all(n_current == 1 for _, n_current, _ in current)
    assert any(n > 1 for _, _, n in current)  # closed versions were kept
    # every closed version ends where the next version of its customer begins
    broken_chain = con.execute(
        "SELECT count(*) FROM shop.customers c WHERE NOT is_current AND NOT EXISTS "
        "(SELECT 1 FROM shop.customers n WHERE n.cid = c.cid AND n.effective_date = c.end_date "
        "AND n.sk_customer > c.sk_customer)"
    ).fetchone()
    assert broken_chain == (0,)
    staged = store.load_state().tables["customers"]
    assert len(target.table_rows("customers")) == staged.num_rows
    migrator.close()
    store.close()


def test_worker_pushes_after_k_batches_and_pulls_when_idle(tmp_path: Path) -> None:
    settings = _settings(tmp_path, push_batches=2, push_rows=None, push_ms=None)
    store = stage_shop(tmp_path / "staging.duckdb", range(1, 4), events=50)
    worker = MigrationWorker(_migrator(store, settings), settings.migration)
    worker.start()
    # the batches staged before the worker started (a pipeline killed before it pushed them)
    # are pushed at once, though no commit comes to count them (found by the fault campaign:
    # after a kill -9 with no new input the warehouses stayed behind until the next commit)
    deadline = time.monotonic() + 10
    while worker.rounds == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert StagedDeltas(store).acks() == {"duckdb": 3} and worker.rounds == 1
    worker.notify(1, 10)
    time.sleep(0.3)
    assert worker.rounds == 1  # one batch: below K
    worker.notify(2, 20)
    deadline = time.monotonic() + 10
    while worker.rounds == 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert worker.rounds == 2
    worker.stop(push=False)
    assert worker.error is None
    assert StagedDeltas(store).acks() == {"duckdb": 3}
    store.close()

    pull = _settings(tmp_path, push="", pull_idle_ms=100)
    store = stage_shop(tmp_path / "staging.duckdb", range(4, 6), events=50)
    worker = MigrationWorker(_migrator(store, pull), pull.migration)
    assert worker.push_targets == [] and worker.pull_targets == ["duckdb"]
    worker.migrator.targets["duckdb"].open()
    worker.migrator.targets["duckdb"].mark_busy(0.5)  # type: ignore[attr-defined]
    started = time.monotonic()
    worker.start()
    while StagedDeltas(store).acks().get("duckdb") != 5 and time.monotonic() - started < 10:
        time.sleep(0.02)
    waited = time.monotonic() - started
    worker.stop()
    assert StagedDeltas(store).acks()["duckdb"] == 5
    assert waited >= 0.5  # it waited for the busy span plus the idle time
    target = worker.migrator.targets["duckdb"]
    target.open()
    assert [v for _, _, v in target.ledger_rows()][-2:] == ["pull", "pull"]
    assert target.delta_rows() == 0  # a pull merges at once
    target.close()
    store.close()


def test_a_restarted_worker_merges_what_was_loaded_before_without_a_new_load(
    tmp_path: Path,
) -> None:
    """Deltas a warehouse holds unmerged when the pipeline restarts (killed between a load and
    the merge) are merged ``merge_ms`` after the start, with no new batch (found by the fault
    campaign: after a restart at the end of the input they stayed in the delta tables)."""
    settings = _settings(tmp_path, merge_ms=200, push_batches=100, push_rows=None, push_ms=None)
    store = stage_shop(tmp_path / "staging.duckdb", range(1, 4), events=50)
    migrator = _migrator(store, settings)
    migrator.migrate(merge="never")
    migrator.close()
    worker = MigrationWorker(_migrator(store, settings), settings.migration)
    worker.start()
    deadline = time.monotonic() + 10
    while worker.rounds < 2 and time.monotonic() < deadline:  # the start's round, a merge's
        time.sleep(0.05)
    worker.stop(push=False)  # closes the migrator
    assert worker.error is None and worker.rounds >= 2
    target = _migrator(store, settings).targets["duckdb"]
    target.open()
    assert target.delta_rows() == 0
    target.close()
    store.close()


def test_releases_run_in_the_background_at_most_every_release_ms_and_on_close(
    tmp_path: Path,
) -> None:
    settings = _settings(tmp_path, release_ms=60_000)
    path = tmp_path / "staging.duckdb"
    store = stage_shop(path, range(1, 5), events=60)
    migrator = _migrator(store, settings)
    first = migrator.migrate(merge="never")  # the first round's release is due: in the background
    assert first.targets["duckdb"].watermark == 4
    migrator.wait_for_release()
    staged = StagedDeltas(store)
    assert staged.acks() == {"duckdb": 4} and staged.released_through() == 4
    assert store.query('SELECT count(*) AS n FROM delta_log."accounts"').column("n")[0].as_py() == 0

    store.close()
    migrator.close()
    store = stage_shop(path, range(5, 9), events=60)
    migrator = _migrator(store, settings)
    # a release just happened, so the next is not due (no public way to set the release clock)
    migrator._last_release = time.monotonic()  # noqa: SLF001
    second = migrator.migrate(merge="never")
    assert second.targets["duckdb"].watermark == 8
    staged = StagedDeltas(store)
    # loaded and noted, but neither acknowledged in staging nor released yet
    assert staged.acks() == {"duckdb": 4} and staged.released_through() == 4
    assert migrator.acknowledged() == {"duckdb": 8}
    assert migrator.pending_batches("duckdb") == 0
    migrator.close()  # writes the acknowledgement and releases
    assert staged.acks() == {"duckdb": 8} and staged.released_through() == 8
    store.close()


def test_acknowledgements_stay_visible_while_the_background_release_writes_them(
    tmp_path: Path,
) -> None:
    """Between taking the noted acknowledgements and staging holding them, readers (the query
    service's union) must not see a target fall back to an older batch."""
    settings = _settings(tmp_path, release_ms=60_000)
    store = stage_shop(tmp_path / "staging.duckdb", range(1, 5), events=60)
    migrator = _migrator(store, settings)
    entered, proceed = threading.Event(), threading.Event()
    write = migrator.staged.acknowledge

    def held_acknowledge(name: str, batch_id: int) -> None:
        entered.set()
        assert proceed.wait(30)
        write(name, batch_id)

    migrator.staged.acknowledge = held_acknowledge  # type: ignore[method-assign]
    migrator.migrate(merge="never")  # the release is due: it runs in the background
    assert entered.wait(30)
    assert StagedDeltas(store).acks().get("duckdb", 0) == 0  # staging does not hold it yet
    assert migrator.acknowledged() == {"duckdb": 4}
    proceed.set()
    migrator.wait_for_release()
    assert migrator.acknowledged() == {"duckdb": 4}
    assert StagedDeltas(store).acks() == {"duckdb": 4}
    migrator.close()
    store.close()


def test_full_tables_carry_no_primary_key_and_merges_keep_one_row_per_id(tmp_path: Path) -> None:
    """The DuckDB warehouse's full state tables are created without their key (its index made
    every merge's commit hold DuckDB's transaction lock ten times longer); the merge alone keeps
    a row id once, merge after merge. The ledger keeps its key."""
    settings = _settings(tmp_path)
    store = stage_shop(tmp_path / "staging.duckdb", range(1, 7), events=150)
    migrator = _migrator(store, settings)
    target = migrator.targets["duckdb"]
    layout = target.layout
    for batches in (range(1, 3), range(3, 5), range(5, 7)):
        target.open()
        changes = StagedDeltas(store).read(batches.start - 1, batches.stop - 1)
        assert target.load(changes, "push") == batches.stop - 1
        assert target.merge() is not None
    keys = {
        (schema, table)
        for schema, table in target.fetch(
            "SELECT schema_name, table_name FROM duckdb_constraints() "
            "WHERE constraint_type = 'PRIMARY KEY'"
        )
    }
    assert ("streamdi_migration", "ledger") in keys
    assert not {(s, t) for s, t in keys if s == layout.schema}
    for name, table in layout.tables.items():
        if table.kind != "state":
            continue
        ids = ", ".join(f'"{c}"' for c in table.row_id)
        dup = target.fetch(
            f"SELECT count(*) - count(DISTINCT ({ids})) FROM {layout.full_name(name)}"
        )
        assert dup == [(0,)], name
    assert_target_equals_staging(target, store.load_state().tables, _outputs(store), current=False)
    migrator.close()
    store.close()


def test_the_layout_ddl_is_compiled_once_per_layout_and_matches_a_fresh_compile() -> None:
    from duckdb_engine import Dialect

    from migration.schema import create_statements
    from migration.targets.duckdb_file import layout_ddl
    from tests.migration_shop import shop_dataflow

    flow = shop_dataflow().build()
    layout = WarehouseLayout(flow)
    first = layout_ddl(layout)
    assert first == create_statements(layout.metadata, Dialect(), layout.schemas, row_keys=False)
    first.clear()  # the caller's copy: the cache keeps its own
    again = layout_ddl(layout)
    assert again and again == layout_ddl(layout)
    other = layout_ddl(WarehouseLayout(flow, "another_schema"))
    assert 'CREATE SCHEMA IF NOT EXISTS "another_schema"' in other
    assert not any('"shop"' in s for s in other)  # its own layout's, not the cached one


def test_a_target_merges_without_waiting_for_another_targets_load(tmp_path: Path) -> None:
    """Two warehouses in one round: the one whose load is done merges at once, while the other
    still loads (its load held in its open transaction); both end equal to staging."""
    from migration.targets.duckdb_file import DuckDBTarget

    settings = _settings(tmp_path, max_batches_per_load=64)
    store = stage_shop(tmp_path / "staging.duckdb", range(1, 5), events=150)
    outputs = _outputs(store)
    state = store.load_state().tables
    layout = WarehouseLayout(store.flow, settings.migration.schema_name)
    targets: dict[str, BaseTarget] = {
        "fast": DuckDBTarget(layout, tmp_path / "fast.duckdb"),
        "slow": DuckDBTarget(layout, tmp_path / "slow.duckdb"),
    }
    seen: list[tuple[str, str]] = []
    lock = threading.Lock()

    def hook(phase: str, target: str) -> None:
        with lock:
            seen.append((phase, target))
        if (phase, target) == ("loaded", "slow"):
            time.sleep(0.5)  # the slow warehouse's load holds its transaction open

    migrator = Migrator(StagedDeltas(store), targets, settings.migration, hook=hook)
    report = migrator.migrate(via="push", merge="force")
    assert {n: r.watermark for n, r in report.targets.items()} == {"fast": 4, "slow": 4}
    assert report.targets["fast"].merge is not None and report.targets["slow"].merge is not None
    assert seen.index(("merged", "fast")) < seen.index(("committed", "slow")), seen
    for target in targets.values():
        assert target.delta_rows() == 0
        assert_target_equals_staging(target, state, outputs, current=False)
    migrator.close()
    store.close()
