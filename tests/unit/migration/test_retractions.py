"""A batch that replaces a sink's rows of earlier batches (staging.retractions): staging's reads
as of it leave the old rows out (and as of before it keep them); a warehouse that had loaded them
deletes them in the load of that batch, one that had not loads and deletes them in one go, and a
bootstrap copies the sink without them; the query service's warehouse side leaves out the ranges
a batch it has not loaded yet retracts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from etl_dataflows.executors import create_executor
from migration.migrator import Migrator, build_targets
from migration.reader import relation_sql
from migration.schema import WarehouseLayout
from runtime.reprocess import cut_over_commit
from staging import StagingStore
from staging.handoff import StagedDeltas
from staging.retractions import SinkRetraction
from staging.snapshot import open_snapshot
from streamdi.settings import load_settings
from tests.unit.staging.helpers import simple_commit
from tests.unit.staging.test_upgrade import bank, batches


def _sink_rows(table: pa.Table) -> list[tuple[Any, ...]]:
    return sorted(zip(table["batch_id"].to_pylist(), table["amount"].to_pylist(), strict=True))


def test_retracted_rows_leave_staging_reads_and_every_warehouse(tmp_path: Path) -> None:
    flow = bank(1)
    oracle = create_executor("serial", flow)
    early = load_settings(  # staging keeps what it loaded for an hour: its reads see both
        streamdi={"state_dir": str(tmp_path / "early")},
        migration={"targets": "duckdb", "release_ms": 0, "retention_s": 3600},
    )
    late = load_settings(
        streamdi={"state_dir": str(tmp_path / "late")},
        migration={"targets": "duckdb", "release_ms": 0},
    )
    with StagingStore(tmp_path / "s.duckdb", flow, background_merge=False) as store:
        for batch in batches(flow, 1, 3, seed=5):
            store.commit([simple_commit(batch.batch_id, oracle.run_batch(batch))])
        with open_snapshot(store) as snap:
            before = _sink_rows(snap.outputs("moved"))
        kept = [r for r in before if r[0] == 1]
        assert kept and len(kept) < len(before)
        layout = WarehouseLayout(flow, early.migration.schema_name)
        loaded = Migrator(StagedDeltas(store), build_targets(early, layout), early.migration)
        loaded.migrate(merge="force")  # the early warehouse holds batches 1-3, merged
        # batch 4 delivers new rows in place of those of batches 2-3
        new = pa.table({"amount": pa.array([7, 8, 9], pa.int64())})
        retraction = SinkRetraction("moved", 2, 3, "shadow-1")
        store.commit([cut_over_commit(4, {}, {}, {"moved": new}, [retraction])])
        with open_snapshot(store) as snap:
            assert _sink_rows(snap.outputs("moved")) == [*kept, (4, 7), (4, 8), (4, 9)]
            assert _sink_rows(snap.outputs("moved", upto=3)) == before  # as of before it
            pending = snap.retractions(after=3)
            assert pending["first_batch"].to_pylist() == [2]
        loaded.migrate(merge="never")
        lagging = Migrator(StagedDeltas(store), build_targets(late, layout), late.migration)
        lagging.migrate(merge="never")  # loads 1-4 at once
        targets = [loaded.targets["duckdb"], lagging.targets["duckdb"]]
        try:
            for target in targets:
                rows = target.table_rows("moved", current=True)
                columns = list(layout.tables["moved"].columns)
                got = sorted(
                    (r[columns.index("batch_id")], r[columns.index("amount")]) for r in rows
                )
                assert got == [*kept, (4, 7), (4, 8), (4, 9)], target.name
        finally:
            loaded.close()
            lagging.close()


def test_the_query_services_warehouse_side_leaves_pending_retractions_out(tmp_path: Path) -> None:
    flow = bank(1)
    oracle = create_executor("serial", flow)
    settings = load_settings(
        streamdi={"state_dir": str(tmp_path)}, migration={"targets": "duckdb", "release_ms": 0}
    )
    with StagingStore(tmp_path / "s.duckdb", flow, background_merge=False) as store:
        for batch in batches(flow, 1, 3, seed=6):
            store.commit([simple_commit(batch.batch_id, oracle.run_batch(batch))])
        layout = WarehouseLayout(flow, settings.migration.schema_name)
        migrator = Migrator(
            StagedDeltas(store), build_targets(settings, layout), settings.migration
        )
        migrator.migrate(merge="never")
        target = migrator.targets["duckdb"]
        try:
            with target.guard():
                every = target.fetch(
                    f"SELECT batch_id FROM ({relation_sql(layout, 'moved', 3, ['batch_id'])}) r"
                )
                kept = target.fetch(
                    "SELECT batch_id FROM "
                    f"({relation_sql(layout, 'moved', 3, ['batch_id'], [(2, 3)])}) r"
                )
        finally:
            migrator.close()
    assert {b for (b,) in every} == {1, 2, 3}
    assert sorted(b for (b,) in kept) == sorted(b for (b,) in every if b == 1)
