"""A target added after staging released batches is bootstrapped (DuckDB files, no service), by
both paths (``rows``; ``auto``, which here, every target a DuckDB file, copies the peer's file):
it ends equal, row for row, to the target that loaded every batch; its ledger says the snapshot's
watermark once and then the later batches, each once; staging releases nothing it still needs; a
bootstrap stopped half way resumes at a new snapshot and brings the relations copied before up to
it (the file path starts over); without a peer, the sinks start after the released batches and
the record says so; in the background, the other targets keep migrating and the target is not
readable until it caught up. The file path's own cases are in ``test_bootstrap_file.py``."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from cli.migration import bootstrap_line
from etl_dataflows.state import StateImage
from migration.bootstrap import BootstrapMethod, read_record
from migration.bootstrap.pieces import Prefetch, pieces, relation_pieces
from migration.exceptions import TargetMismatch
from migration.migrator import Migrator
from migration.schema import WarehouseLayout
from migration.targets.base import BaseTarget
from migration.targets.duckdb_file import DuckDBTarget
from staging.handoff import StagedDeltas
from staging.store import StagingStore
from streamdi.settings import MigrationSettings
from tests.migration_shop import shop_dataflow, stage_shop
from tests.unit.api.harness import ShopStage

RELATIONS = ("customers", "accounts", "prices", "activity")
#: The path each method takes here (every target a DuckDB file of one layout).
PATH = {"auto": "file", "rows": "rows"}
METHODS: tuple[BootstrapMethod, ...] = ("auto", "rows")


class Crash(Exception):
    """What a test hook raises to stop a bootstrap where a kill would."""


def settings(**extra: Any) -> MigrationSettings:
    return MigrationSettings(targets="duckdb", max_batches_per_load=4, release_ms=0, **extra)


def targets(layout: WarehouseLayout, root: Path, *names: str) -> dict[str, BaseTarget]:
    return {n: DuckDBTarget(layout, root / f"{n}.duckdb") for n in names}


@pytest.fixture
def stage(tmp_path: Path) -> Iterator[ShopStage]:
    """Batches 1..8 migrated into ``old`` (and released from staging), 9..12 only staged."""
    shop = ShopStage(tmp_path / "staging.duckdb", events=150)
    layout = WarehouseLayout(shop.flow)
    shop.stage_range(1, 8)
    migrator = Migrator(
        StagedDeltas(shop.store), targets(layout, tmp_path, "old"), settings(), hook=None
    )
    assert migrator.migrate(merge="force").released_through == 8
    migrator.close()
    shop.stage_range(9, 12)
    yield shop
    shop.store.close()


def same_rows(a: BaseTarget, b: BaseTarget) -> None:
    for name in RELATIONS:
        assert a.table_rows(name, current=True) == b.table_rows(name, current=True), name


def truth_rows(stage: ShopStage, target: BaseTarget, watermark: int) -> None:
    """``target`` holds exactly the state and every output row at ``watermark`` (a recount from
    the batches the stage ran)."""
    truth = stage.truth[watermark]
    for name in RELATIONS:
        got = sorted(target.table_rows(name, current=True), key=repr)
        assert got == sorted(truth[name].elements(), key=repr), name


@pytest.mark.parametrize("method", METHODS)
def test_a_target_added_later_is_bootstrapped_then_loads_each_later_batch_once(
    stage: ShopStage, tmp_path: Path, method: BootstrapMethod
) -> None:
    layout = WarehouseLayout(stage.flow)
    both = targets(layout, tmp_path, "old", "new")
    staged = StagedDeltas(stage.store)
    migrator = Migrator(staged, both, settings(), bootstrap_method=method)
    report = migrator.migrate(merge="never")
    boot = report.targets["new"].bootstrap
    assert boot is not None and boot.state == "caught_up" and boot.method == PATH[method]
    assert (boot.through, boot.peer, boot.peer_watermark, boot.sinks_from) == (12, "old", 8, 1)
    new = both["new"]
    assert new.ledger_rows()[0][0::2] == (12, "bootstrap")
    assert new.merged_through()[0] == 12  # no read is pinned below the snapshot
    truth_rows(stage, new, 12)
    same_rows(new, both["old"])
    assert migrator.ready("new") and migrator.ready("old")
    # the batches after the snapshot load as for any target, each once
    stage.stage_range(13, 15)
    migrator.migrate(merge="force")
    assert [(b, v) for b, _, v in new.ledger_rows()] == [
        (12, "bootstrap"),
        (13, "push"),
        (14, "push"),
        (15, "push"),
    ]
    truth_rows(stage, new, 15)
    same_rows(new, both["old"])
    assert staged.acks() == {"old": 15, "new": 15}
    assert staged.released_through() == 15
    record = read_record(new)
    assert record is not None and record.state == "caught_up"
    assert set(record.relations) == set(RELATIONS)
    assert record.relations["activity"].source == "old through batch 8, then staging"
    migrator.close()


#: Where a release is tried during a bootstrap, per method.
RELEASE_POINTS = {
    "rows": ("bootstrap-table",),
    "auto": ("bootstrap-file-copy", "bootstrap-file-rewrite", "bootstrap-file-swap"),
}


@pytest.mark.parametrize("method", METHODS)
def test_staging_releases_nothing_the_bootstrap_still_needs(
    stage: ShopStage, tmp_path: Path, method: BootstrapMethod
) -> None:
    layout = WarehouseLayout(stage.flow)
    staged = StagedDeltas(stage.store)
    # a stale acknowledgement: "new" was acknowledged once, then its warehouse was replaced
    staged.acknowledge("new", 11)
    staged.acknowledge("old", 8)
    seen: list[int] = []

    def hook(phase: str, target: str) -> None:
        if phase in RELEASE_POINTS[method]:
            # a release during the bootstrap (between two relations; in the file path's steps)
            # must not move
            seen.append(staged.release(["old", "new"], 0))

    migrator = Migrator(
        staged,
        targets(layout, tmp_path, "old", "new"),
        settings(),
        hook=hook,
        bootstrap_method=method,
    )
    migrator.migrate(merge="never")
    assert seen == [8] * (len(RELATIONS) if method == "rows" else 3)
    assert staged.acks()["new"] == 12  # retracted to 0, then acknowledged at the snapshot
    migrator.close()


def test_a_bootstrap_stopped_half_way_resumes_at_a_new_snapshot(
    stage: ShopStage, tmp_path: Path
) -> None:
    layout = WarehouseLayout(stage.flow)
    both = targets(layout, tmp_path, "old", "new")
    staged = StagedDeltas(stage.store)
    copied = {"n": 0}

    def crash_in_the_third_relation(phase: str, target: str) -> None:
        if phase == "bootstrap-copy":
            copied["n"] += 1
            if copied["n"] == 3:
                raise Crash

    migrator = Migrator(
        staged, both, settings(), hook=crash_in_the_third_relation, bootstrap_method="rows"
    )
    with pytest.raises(Crash):
        migrator.migrate(["new"], merge="never")
    new = both["new"]
    assert new.watermark() == 0  # never looks caught up before it is
    record = read_record(new)
    assert record is not None and record.state == "copying"
    assert sorted(record.relations) == ["accounts", "customers"]
    assert {m.through for m in record.relations.values()} == {12}
    assert not migrator.ready("new")
    status = migrator.status()["targets"]["new"]["bootstrap"]
    assert (status["state"], status["relations_copied"], status["relations_total"]) == (
        "failed",
        2,
        4,
    )
    migrator.close()

    stage.stage_range(13, 14)  # staging moves on before it resumes
    migrator = Migrator(staged, both, settings(), bootstrap_method="rows")
    status = migrator.status()["targets"]["new"]["bootstrap"]
    assert (status["state"], status["relations_copied"]) == ("copying", 2)
    assert "BOOTSTRAPPING: 2 of 4 relations copied" in bootstrap_line(status)
    migrator.migrate(merge="never")
    record = read_record(new)
    assert record is not None and record.state == "caught_up" and record.through == 14
    assert {n: m.through for n, m in record.relations.items()} == {
        "customers": 12,
        "accounts": 12,
        "prices": 14,
        "activity": 14,
    }
    assert new.ledger_rows()[0][0::2] == (14, "bootstrap")
    # the relations copied at 12 were brought to 14 by their deltas, merged in the same
    # transaction: the full tables hold the snapshot, as the merges row says
    assert new.delta_rows() == 0 and new.merged_through()[0] == 14
    truth_rows(stage, new, 14)
    same_rows(new, both["old"])
    migrator.close()


def test_without_a_peer_the_sinks_start_after_what_staging_released(
    stage: ShopStage, tmp_path: Path
) -> None:
    layout = WarehouseLayout(stage.flow)
    alone = targets(layout, tmp_path, "new")  # "old" is no longer configured
    migrator = Migrator(StagedDeltas(stage.store), alone, settings())
    migrator.migrate(merge="force")
    new = alone["new"]
    record = read_record(new)
    assert record is not None
    assert (record.sinks_from, record.peer, record.through) == (9, None, 12)
    truth = stage.truth[12]
    for name in ("customers", "accounts", "prices"):  # state tables are whole
        assert sorted(new.table_rows(name), key=repr) == sorted(truth[name].elements(), key=repr)
    later = sorted(r for r in truth["activity"].elements() if r[0] > 8)
    assert sorted(new.table_rows("activity")) == later  # batches 1..8 are not available
    line = bootstrap_line(migrator.status()["targets"]["new"]["bootstrap"])
    assert "sink rows of batches 1..8 NOT available" in line
    migrator.close()


def test_a_target_holding_rows_but_no_batch_is_refused(stage: ShopStage, tmp_path: Path) -> None:
    layout = WarehouseLayout(stage.flow)
    both = targets(layout, tmp_path, "old", "new")
    new = both["new"]
    new.open()
    new.begin()
    new.execute(f"INSERT INTO {layout.full_name('activity')} (batch_id) VALUES (1)")
    new.commit()
    migrator = Migrator(StagedDeltas(stage.store), both, settings())
    with pytest.raises(TargetMismatch, match="never deletes rows it did not write"):
        migrator.migrate()
    assert len(new.table_rows("activity")) == 1  # left as it was
    migrator.close()


#: Where a background bootstrap is held while the test looks, per method.
HOLD_AT = {"rows": "bootstrap-table", "auto": "bootstrap-file-rewrite"}


@pytest.mark.parametrize("method", METHODS)
def test_in_the_background_the_others_migrate_and_queries_wait_until_it_caught_up(
    stage: ShopStage, tmp_path: Path, method: BootstrapMethod
) -> None:
    layout = WarehouseLayout(stage.flow)
    both = targets(layout, tmp_path, "old", "new")
    staged = StagedDeltas(stage.store)
    inside, go_on = threading.Event(), threading.Event()

    def hold(phase: str, target: str) -> None:
        if phase == HOLD_AT[method] and not go_on.is_set():
            inside.set()
            assert go_on.wait(30)

    migrator = Migrator(
        staged, both, settings(), hook=hold, bootstrap="background", bootstrap_method=method
    )
    first = migrator.migrate(merge="never")
    assert first.bootstrapping == ["new"]
    assert inside.wait(30)
    assert not migrator.ready("new") and migrator.ready("old")
    status = migrator.status()["targets"]["new"]
    assert status["bootstrap"]["state"] == "copying" and status["readable"] is False
    # the other target migrates meanwhile; staging releases nothing while "new" bootstraps
    stage.stage_range(13, 13)
    again = migrator.migrate(merge="never")
    assert again.targets["old"].watermark == 13 and again.bootstrapping == ["new"]
    assert staged.released_through() == 8
    go_on.set()
    assert migrator.bootstraps.wait("new", 60)
    done = migrator.migrate(merge="never")
    assert done.targets["new"].watermark == 13 and done.bootstrapping == []
    boot = first.targets["new"].bootstrap  # (the live progress of the background run)
    assert boot is not None and boot.method == PATH[method]
    assert migrator.ready("new")
    truth_rows(stage, both["new"], 13)
    assert staged.released_through() == 13
    migrator.close()


def test_pieces_are_bounded_and_read_ahead_stops_with_its_reader() -> None:
    batch = pa.record_batch({"x": pa.array(range(1000), pa.int64())})  # 8,000 bytes
    joined = list(pieces(iter([batch] * 10), piece_bytes=20_000))
    assert [p.num_rows for p in joined] == [3000, 3000, 3000, 1000]
    read: list[int] = []

    def source() -> Iterator[int]:
        for i in range(1000):
            read.append(i)
            yield i

    with Prefetch(source(), depth=2) as ahead:
        assert next(iter(ahead)) == 0
    assert len(read) <= 5  # stopped: it read at most a few items ahead

    def failing() -> Iterator[int]:
        yield 1
        raise Crash

    with Prefetch(failing()) as ahead, pytest.raises(Crash):
        list(ahead)


class Relations:
    """Sources of record batches of 1,000 int64 rows (8,000 bytes) each, noting when each
    relation is opened and closed."""

    def __init__(self) -> None:
        self.opened: list[str] = []
        self.closed: list[str] = []

    def source(self, name: str, batches: int) -> tuple[str, Callable[[], Iterator[pa.RecordBatch]]]:
        def open_batches() -> Iterator[pa.RecordBatch]:
            self.opened.append(name)
            return self._batches(name, batches)

        return name, open_batches

    def _batches(self, name: str, batches: int) -> Iterator[pa.RecordBatch]:
        try:
            for i in range(batches):
                yield pa.record_batch({"x": pa.array([i] * 1000, pa.int64())})
        finally:
            self.closed.append(name)


def test_relation_pieces_come_relation_by_relation_each_opened_when_the_read_reaches_it() -> None:
    rel = Relations()
    stream = relation_pieces(
        [rel.source("a", 3), rel.source("empty", 0), rel.source("b", 1)], piece_bytes=16_000
    )
    name, piece = next(stream)
    assert name == "a" and piece is not None and piece.num_rows == 2000
    assert rel.opened == ["a"]  # the others are not opened before the read reaches them
    rest = [(n, None if p is None else p.num_rows) for n, p in stream]
    assert rest == [("a", 1000), ("a", None), ("empty", None), ("b", 1000), ("b", None)]
    assert rel.opened == rel.closed == ["a", "empty", "b"]

    rel = Relations()
    stream = relation_pieces([rel.source("a", 3), rel.source("b", 1)], piece_bytes=8_000)
    next(stream)
    stream.close()  # stopped early: the relation in hand is closed, the next never opened
    assert rel.opened == rel.closed == ["a"]


def test_the_read_ahead_runs_into_the_next_relation_while_one_is_loaded() -> None:
    rel = Relations()
    stream = relation_pieces([rel.source("a", 1), rel.source("b", 1)], piece_bytes=8_000)
    with Prefetch(stream, depth=2) as ahead:
        read = iter(ahead)
        assert next(read)[0] == "a"  # a's only piece is being loaded: b is read meanwhile
        deadline = time.monotonic() + 5
        while "b" not in rel.opened and time.monotonic() < deadline:
            time.sleep(0.01)
        assert rel.opened == ["a", "b"]
        assert [(n, p is None) for n, p in read] == [("a", True), ("b", False), ("b", True)]


@pytest.mark.parametrize("method", METHODS)
def test_a_seeded_staging_bootstraps_its_state_tables_from_the_peer(
    tmp_path: Path, method: BootstrapMethod
) -> None:
    """Staging seeded with the engine's working set (as TPC-DI's historical load does) holds
    less than the warehouses: the rows the seed left out are only there. The new target must
    equal the old one, so its state tables come from the peer (brought to the snapshot with
    staging's deltas); without a peer it gets the working set, and its marks say so."""
    scratch = stage_shop(tmp_path / "scratch.duckdb", range(1, 4), events=150)
    image = scratch.load_state()
    scratch.close()
    working = image.tables  # the working set the "historical load" leaves
    seeded = StagingStore(tmp_path / "staging.duckdb", shop_dataflow())
    seeded.seed(StateImage(dict(working), dict(image.sequences)))
    assert seeded.seeded
    seeded.close()
    stage = ShopStage(tmp_path / "staging.duckdb", events=150)
    layout = WarehouseLayout(stage.flow)
    old = targets(layout, tmp_path, "old")
    warehouse = old["old"]
    warehouse.open()
    warehouse.begin()  # the historical load writes the warehouse: the working set and more
    for name, rows in working.items():
        warehouse.bulk_insert(layout.full_name(name), rows)
    extra = working["accounts"].slice(0, 5)
    extra = extra.set_column(
        extra.schema.get_field_index("sk_account"),
        "sk_account",
        pa.array(range(900_000, 900_005), pa.int64()),
    ).set_column(
        extra.schema.get_field_index("aid"), "aid", pa.array(range(5_000, 5_005), pa.int64())
    )
    warehouse.bulk_insert(layout.full_name("accounts"), extra)
    warehouse.commit()
    warehouse.close()
    stage.stage_range(1, 8)
    first = Migrator(StagedDeltas(stage.store), old, settings())
    assert first.migrate(merge="force").released_through == 8
    first.close()
    stage.stage_range(9, 12)

    both = targets(layout, tmp_path, "old", "new")
    migrator = Migrator(StagedDeltas(stage.store), both, settings(), bootstrap_method=method)
    boot = migrator.migrate(merge="never").targets["new"].bootstrap
    assert boot is not None and boot.method == PATH[method]
    new = both["new"]
    same_rows(new, both["old"])  # the 5 accounts staging never had included
    staged_accounts = stage.store.query("SELECT count(*) AS n FROM state.accounts")
    assert len(new.table_rows("accounts")) == staged_accounts.column(0)[0].as_py() + 5
    record = read_record(new)
    assert record is not None
    assert record.relations["accounts"].source == "old through batch 8, then staging"
    assert record.relations["accounts"].through == 8  # then brought to 12 by staging's deltas
    migrator.close()

    lone = targets(layout, tmp_path, "lone")
    alone = Migrator(StagedDeltas(stage.store), lone, settings(retention_s=0))
    alone.migrate(merge="never")
    record = read_record(lone["lone"])
    assert record is not None
    assert "working set only" in record.relations["accounts"].source
    alone.close()
    stage.store.close()
