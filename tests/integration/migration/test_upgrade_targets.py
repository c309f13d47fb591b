"""Both warehouses follow an upgrade (migration.evolution): staging switches at its last batch,
each target switches at its own watermark the next time it is opened (one behind the switch, so
the batches it still needs arrive converted), and both end equal to the serial oracle run with
the same versions switched at the same batch; the ledgers say which version produced each batch
and each target keeps its layout history."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from etl_dataflows.evolution import describe_flow
from etl_dataflows.evolution.convert import convert_image
from etl_dataflows.executors import create_executor
from migration.migrator import Migrator, build_targets
from migration.schema import WarehouseLayout
from staging.handoff import StagedDeltas
from staging.store import StagingStore
from staging.upgrade import upgrade_staging
from streamdi.settings import StreamdiSettings, load_settings
from tests.integration.migration.conftest import PostgresServer
from tests.unit.staging.helpers import simple_commit
from tests.unit.staging.test_upgrade import bank, batches

pytestmark = pytest.mark.postgres


def _settings(tmp: Path, dsn: str) -> StreamdiSettings:
    return load_settings(
        streamdi={"state_dir": str(tmp)},
        postgres={"dsn": dsn},
        migration={"targets": "duckdb,postgres", "release_ms": 0},
    )


def _migrator(store: StagingStore, settings: StreamdiSettings) -> Migrator:
    layout = WarehouseLayout(store.flow, settings.migration.schema_name, history=store.history)
    return Migrator(StagedDeltas(store), build_targets(settings, layout), settings.migration)


def _rows(table: pa.Table) -> list[tuple[object, ...]]:
    columns = [table.column(n).to_pylist() for n in table.column_names]
    return sorted(zip(*columns, strict=True), key=repr)


def test_both_targets_switch_and_end_equal_to_the_oracle(
    tmp_path: Path, postgres: PostgresServer
) -> None:
    settings = _settings(tmp_path, postgres.database())
    path = tmp_path / "staging.duckdb"
    v1, v2 = bank(1), bank(2)
    oracle = create_executor("serial", v1)
    with StagingStore(path, v1, background_merge=False) as store:
        for batch in batches(v1, 1, 7, seed=11):
            store.commit([simple_commit(batch.batch_id, oracle.run_batch(batch))])
            if batch.batch_id == 5:  # the warehouses hold batches 1-5; 6 and 7 wait in staging
                migrator = _migrator(store, settings)
                migrator.migrate(merge="force")
                migrator.close()

    switch = upgrade_staging(path, v2)
    assert switch.watermark == 7
    oracle2 = create_executor(
        "serial", v2, convert_image(oracle.state_image(), describe_flow(v1), v2)
    )
    with StagingStore(path, v2, background_merge=False) as store:
        for batch in batches(v2, 8, 4, seed=12):
            store.commit([simple_commit(batch.batch_id, oracle2.run_batch(batch))])
        migrator = _migrator(store, settings)
        report = migrator.migrate(merge="force")
        assert not report.failed
        expected = oracle2.state_image().tables
        for name, target in migrator.targets.items():
            assert target.watermark() == 11, name
            for table in ("accounts", "moves"):
                got = sorted(target.table_rows(table), key=repr)
                assert got == _rows(expected[table]), f"{name}.{table}"
            versions = target.fetch(
                f"SELECT batch_id, version FROM {target.layout.ledger_name} "
                "WHERE stream = ? ORDER BY batch_id",
                [target.layout.stream],
            )
            assert [int(v) for _, v in versions] == [1] * 7 + [2] * 4, name
            history = target.fetch(
                f"SELECT version, watermark FROM {target.layout.layouts_name} "
                "WHERE stream = ? ORDER BY version",
                [target.layout.stream],
            )
            # switched at its own watermark: it held batches 1-5 when it was opened again
            assert [(int(v), int(w)) for v, w in history] == [(1, 0), (2, 5)], name
            # the new sink's table exists and has the rows of the batches after the switch
            moved_too = target.table_rows("moved_too")
            assert {int(r[0]) for r in moved_too} == set(range(8, 12)), name
        migrator.close()
