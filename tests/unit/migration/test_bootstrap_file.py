"""The bootstrap's file path (a DuckDB target made from a copy of a DuckDB peer's file): what is
rewritten in the copy (the peer's foreign relations, other streams, rejects, ledger, merges,
layout history and record; its unmerged deltas merged with staging's later changes), and when it
is not taken (the target holds something else, something holds its file open, the peer has
another layout), the rows path doing the work with the same result; a bootstrap stopped or
crashing at each of its steps leaves the target as it was and starts over. (Killed for real:
``tests/integration/migration/test_bootstrap_file.py``.)"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import duckdb
import pytest

from cli.migration import bootstrap_line
from migration.bootstrap import Bootstrap, BootstrapProgress, read_record
from migration.bootstrap.file_copy import side_file
from migration.exceptions import BootstrapStopped
from migration.migrator import Migrator
from migration.schema import WarehouseLayout
from migration.targets.base import BaseTarget
from migration.targets.duckdb_file import DuckDBTarget
from staging.handoff import StagedDeltas
from tests.unit.api.harness import ShopStage
from tests.unit.migration.test_bootstrap import (
    RELATIONS,
    Crash,
    settings,
    stage,
    targets,
    truth_rows,
)

__all__ = ["stage"]  # the fixture: batches 1..8 in "old" (released), 9..12 staged


def foreign(target: BaseTarget) -> list[str]:
    whole = target.whole_file()
    assert whole is not None
    target.open()
    return whole.foreign_relations()


def ledger_tables(target: BaseTarget) -> dict[str, list[tuple[object, ...]]]:
    """The migration schema's rows other than the stream's own ledger (streams, merges, layouts)."""
    target.open()
    return {
        t: target.fetch(f"SELECT * FROM streamdi_migration.{t} ORDER BY ALL")
        for t in ("streams", "merges", "layouts")
    }


def clutter(target: BaseTarget) -> None:
    """What a peer's file may hold beside the dataflow: TPC-DI-like static tables in its schema
    and the main schema, a view, a macro, another dataflow's schema and rows, rejects."""
    target.open()
    target.begin()
    for sql in (
        'CREATE TABLE "shop".dimdate AS SELECT range AS sk FROM range(100)',
        "CREATE TABLE main.audit (x INTEGER)",
        'CREATE VIEW "shop".recent AS SELECT * FROM "shop".activity',
        "CREATE MACRO main.twice(a) AS a * 2",
        "CREATE SCHEMA other",
        "CREATE TABLE other.facts AS SELECT 1 AS one",
        "INSERT INTO streamdi_migration.streams VALUES ('other', 'other', 'f00')",
        "INSERT INTO streamdi_migration.ledger VALUES ('other', 1, 1, 'push', now(), NULL)",
        'INSERT INTO "shop".aborts (batch_id) VALUES (3)',
    ):
        target.execute(sql)
    target.commit()


def test_the_copy_is_rewritten_for_the_new_target(stage: ShopStage, tmp_path: Path) -> None:
    """The peer holds unmerged deltas (batches 9 and 10), relations and rows that are not the
    dataflow's, rejects: the new target equals the one the rows path makes, and the peer is left
    as it was."""
    layout = WarehouseLayout(stage.flow)
    old = targets(layout, tmp_path, "old")
    first = Migrator(StagedDeltas(stage.store), old, settings())
    assert first.migrate(["old"], merge="never").targets["old"].watermark == 12
    first.close()
    clutter(old["old"])
    before = foreign(old["old"])
    assert old["old"].delta_rows() > 0  # batches 9..12 not merged
    old["old"].close()
    stage.stage_range(13, 14)

    made: dict[str, BaseTarget] = {}
    for method in ("auto", "rows"):
        both = targets(layout, tmp_path, "old", method)
        migrator = Migrator(StagedDeltas(stage.store), both, settings(), bootstrap_method=method)
        boot = migrator.migrate([method], merge="never").targets[method].bootstrap
        assert boot is not None and boot.method == ("file" if method == "auto" else "rows")
        assert (boot.through, boot.peer, boot.peer_watermark) == (14, "old", 12)
        if method == "auto":
            assert "a copy of old's file at batch 12" in bootstrap_line(boot.as_dict())
        made[method] = both[method]
        migrator.close()
    new, rows = made["auto"], made["rows"]
    new.open()
    rows.open()
    truth_rows(stage, new, 14)
    for name in RELATIONS:
        assert new.table_rows(name) == rows.table_rows(name), name
    assert foreign(new) == [] and sorted(foreign(old["old"])) == sorted(before)
    assert new.delta_rows() == 0 and new.merged_through()[0] == 14
    assert new.ledger_rows()[0][0::2] == (14, "bootstrap") == rows.ledger_rows()[0][0::2]
    mine, theirs = ledger_tables(new), ledger_tables(rows)
    assert mine["streams"] == theirs["streams"] == [("shop", "shop", layout.fingerprint)]
    assert len(mine["merges"]) == 1 and mine["merges"][0][2] == 14  # through S
    assert [r[:3] for r in mine["layouts"]] == [r[:3] for r in theirs["layouts"]]
    for reject in ("dead_letters", "aborts"):  # as the rows path: none of batches <= S
        assert new.fetch(f'SELECT count(*) FROM "shop".{reject}') == [(0,)]
    record, other = read_record(new), read_record(rows)
    assert record is not None and other is not None
    assert (record.state, record.through, record.peer, record.peer_watermark) == (
        other.state,
        other.through,
        other.peer,
        other.peer_watermark,
    )
    assert {n: (m.through, m.source) for n, m in record.relations.items()} == {
        n: (12, "old through batch 12, then staging") for n in RELATIONS
    }
    # the rows each relation had at P (the peer's full rows overlaid with its unmerged deltas)
    assert {n: m.rows for n, m in record.relations.items()} == {
        n: sum(stage.truth[12][n].values()) for n in RELATIONS
    }
    assert not side_file(new.path).exists()
    for target in (new, rows, old["old"]):
        target.close()


def test_a_target_file_holding_anything_else_is_not_replaced(
    stage: ShopStage, tmp_path: Path
) -> None:
    layout = WarehouseLayout(stage.flow)
    both = targets(layout, tmp_path, "old", "new")
    new = both["new"]
    new.open()
    new.begin()
    new.execute("CREATE TABLE main.keep AS SELECT 42 AS answer")
    new.commit()
    migrator = Migrator(StagedDeltas(stage.store), both, settings())
    boot = migrator.migrate(merge="never").targets["new"].bootstrap
    assert boot is not None and boot.method == "rows" and boot.state == "caught_up"
    truth_rows(stage, new, 12)
    assert new.fetch("SELECT answer FROM main.keep") == [(42,)]
    migrator.close()


def test_a_target_file_held_open_in_the_process_is_not_swapped(
    stage: ShopStage, tmp_path: Path
) -> None:
    """A connection of the process on the target's file (here a reader's) would go on serving
    the old file: the swap is refused, the side file removed, and the rows path runs."""
    layout = WarehouseLayout(stage.flow)
    both = targets(layout, tmp_path, "old", "new")
    new = both["new"]
    assert isinstance(new, DuckDBTarget)
    new.open()
    held = duckdb.connect(str(new.path))  # joins the file's instance
    migrator = Migrator(StagedDeltas(stage.store), both, settings())
    try:
        boot = migrator.migrate(merge="never").targets["new"].bootstrap
        assert boot is not None and boot.method == "rows" and boot.state == "caught_up"
        truth_rows(stage, new, 12)
        assert not side_file(new.path).exists()
    finally:
        held.close()
        migrator.close()


def test_a_peer_of_another_layout_is_not_copied(tmp_path: Path) -> None:
    """A peer migrated into another schema holds the rows, but its file is not this layout:
    the rows path reads them from it."""
    shop = ShopStage(tmp_path / "staging.duckdb", events=150)
    shop.stage_range(1, 8)
    elsewhere = WarehouseLayout(shop.flow, "shop_copy")
    peer = DuckDBTarget(elsewhere, tmp_path / "other.duckdb")
    first = Migrator(StagedDeltas(shop.store), {"other": peer}, settings())
    assert first.migrate(merge="force").released_through == 8
    first.close()
    shop.stage_range(9, 12)
    new = DuckDBTarget(WarehouseLayout(shop.flow), tmp_path / "new.duckdb")
    progress = BootstrapProgress("new")
    Bootstrap(new, StagedDeltas(shop.store), {"other": peer}, progress).run()
    assert (progress.method, progress.peer, progress.peer_watermark) == ("rows", "other", 8)
    new.open()
    truth_rows(shop, new, 12)
    for t in (new, peer):
        t.close()
    shop.store.close()


@pytest.mark.parametrize(
    "phase", ["bootstrap-file-copy", "bootstrap-file-rewrite", "bootstrap-file-swap"]
)
def test_a_file_copy_stopped_at_any_step_leaves_the_target_as_it_was(
    stage: ShopStage, tmp_path: Path, phase: str
) -> None:
    layout = WarehouseLayout(stage.flow)
    both = targets(layout, tmp_path, "old", "new")
    staged = StagedDeltas(stage.store)

    def crash(at: str, target: str) -> None:
        if at == phase:
            raise Crash

    migrator = Migrator(staged, both, settings(), hook=crash)
    with pytest.raises(Crash):
        migrator.migrate(["new"], merge="never")
    migrator.close()
    new = both["new"]
    new.open()
    assert new.watermark() == 0
    record = read_record(new)
    assert record is not None and record.state == "copying" and record.relations == {}
    assert not side_file(new.path).exists()
    assert staged.released_through() == 8

    stage.stage_range(13, 14)  # staging moves on before it starts over
    migrator = Migrator(staged, both, settings())
    boot = migrator.migrate(merge="never").targets["new"].bootstrap
    assert boot is not None and boot.method == "file" and boot.through == 14
    truth_rows(stage, new, 14)
    assert [b for b, _, _ in new.ledger_rows()] == [14]
    assert staged.acks() == {"old": 14, "new": 14}
    migrator.close()


def test_stopping_a_file_copy_leaves_the_target_as_it_was(stage: ShopStage, tmp_path: Path) -> None:
    layout = WarehouseLayout(stage.flow)
    new = DuckDBTarget(layout, tmp_path / "new.duckdb")
    peer = DuckDBTarget(layout, tmp_path / "old.duckdb")
    progress = BootstrapProgress("new")
    copy = Bootstrap(new, StagedDeltas(stage.store), {"old": peer}, progress)

    def stop(phase: str) -> None:
        if phase == "bootstrap-file-rewrite":
            copy.stop()

    copy.hook = stop
    with pytest.raises(BootstrapStopped):
        copy.run()
    new.open()
    assert new.watermark() == 0 and not side_file(new.path).exists()
    new.close()


def test_one_writer_lock_per_file_orders_the_copy_and_the_writers(
    stage: ShopStage, tmp_path: Path
) -> None:
    """A twin's write transaction waits for the copy of its file (and a copy for a write
    transaction); the file's reads go on during the copy."""
    layout = WarehouseLayout(stage.flow)
    old = DuckDBTarget(layout, tmp_path / "old.duckdb")
    twin = old.twin()
    old.open()
    twin.open()
    events: list[str] = []

    def write() -> None:
        twin.begin()
        events.append("write began")
        twin.rollback()

    writer = threading.Thread(target=write)

    def during_the_copy(phase: str) -> None:
        events.append(f"read {int(old.fetch('SELECT count(*) FROM shop.activity')[0][0]) > 0}")
        writer.start()
        time.sleep(0.2)
        events.append("copied")

    whole = old.whole_file()
    whole.copy_to(tmp_path / "copy.duckdb", during_the_copy)
    writer.join(10)
    assert events == ["read True", "copied", "write began"]
    copied = DuckDBTarget(layout, tmp_path / "copy.duckdb")
    copied.open()
    assert copied.table_rows("activity") == old.table_rows("activity")
    for t in (old, twin, copied):
        t.close()
