"""The warehouse layout from the dataflow's declarations, and the staging side of migration:
range reads, acknowledgements that only move forward, releases that wait for every target and
for the retention."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.schema import CreateTable

from etl_dataflows import Dataflow
from migration.exceptions import WarehouseLayoutError
from migration.schema import WarehouseLayout
from migration.worker import PushPolicy
from staging.handoff import StagedDeltas
from streamdi.settings import load_settings
from tests.migration_shop import shop_dataflow, stage_shop


def _ddl(layout: WarehouseLayout, dialect: sa.engine.Dialect) -> str:
    return "\n".join(
        str(CreateTable(t).compile(dialect=dialect)) for t in layout.metadata.sorted_tables
    )


def test_layout_has_full_delta_and_ledger_tables_for_every_table_and_sink() -> None:
    layout = WarehouseLayout(shop_dataflow().build())
    assert layout.schema == "shop" and layout.delta_schema == "shop_delta"
    assert set(layout.full) == set(layout.delta) == {"customers", "accounts", "prices", "activity"}
    customers = layout.full["customers"]
    assert [c.name for c in customers.primary_key] == ["sk_customer"]  # SCD2: keyed by version
    assert [c.name for c in layout.full["prices"].primary_key] == ["_entry"]
    assert [c.name for c in layout.full["accounts"].primary_key] == ["aid"]
    assert not layout.full["activity"].primary_key.columns  # outputs: append-only facts
    for delta in layout.delta.values():
        assert not delta.primary_key.columns and not delta.indexes  # index-free deltas
    assert [c.name for c in layout.ledger.primary_key] == ["stream", "batch_id"]
    types = {c.name: type(c.type) for c in layout.full["accounts"].columns}
    assert types["balance"] is sa.Double and types["active"] is sa.Boolean
    assert types["opened"] is sa.Date


def test_ddl_for_both_dialects_has_no_serial_types() -> None:
    from duckdb_engine import Dialect as DuckDBDialect

    layout = WarehouseLayout(shop_dataflow().build(), schema="wh")
    for ddl in (_ddl(layout, postgresql.dialect()), _ddl(layout, DuckDBDialect())):
        assert "SERIAL" not in ddl.upper()
        assert 'CREATE TABLE "wh"."accounts"' in ddl and 'PRIMARY KEY ("aid")' in ddl


def test_a_table_and_a_sink_with_one_name_is_refused() -> None:
    flow = Dataflow("clash")
    flow.table("out", key={"id": "int64"}, columns={"v": "int64"})
    flow.source("s", schema={"id": "int64"})
    flow.sink("out", input="s")
    with pytest.raises(WarehouseLayoutError, match="named alike"):
        WarehouseLayout(flow.build())


def test_staged_ranges_acks_and_release(tmp_path: Path) -> None:
    store = stage_shop(tmp_path / "s.duckdb", range(1, 7), events=100)
    staged = StagedDeltas(store)
    whole = staged.read(0, 6)
    assert whole.rows == staged.pending_rows(0) > 0
    parts = [staged.read(0, 2), staged.read(2, 6)]
    assert sum(p.rows for p in parts) == whole.rows
    per_batch = whole.rows_per_batch()
    assert sorted(per_batch) == [1, 2, 3, 4, 5, 6] and sum(per_batch.values()) == whole.rows
    assert set(parts[1].tables["accounts"].column("batch_id").to_pylist()) <= {3, 4, 5, 6}

    staged.acknowledge("duckdb", 4)
    staged.acknowledge("duckdb", 2)  # never backwards
    assert staged.acks() == {"duckdb": 4}
    # postgres has acknowledged nothing: nothing may leave staging
    assert staged.release(["duckdb", "postgres"], 0) == 0
    assert staged.read(0, 6).rows == whole.rows
    staged.acknowledge("postgres", 3)
    # a retention longer than the batches' age keeps them
    assert staged.release(["duckdb", "postgres"], 3600) == 0
    assert staged.release(["duckdb", "postgres"], 0) == 3
    assert staged.released_through() == 3
    assert (
        staged.pending_rows(0)
        == staged.pending_rows(3)
        == sum(n for b, n in per_batch.items() if b > 3)
    )
    with pytest.raises(ValueError, match="released"):
        staged.read(2, 6)
    assert staged.read(3, 6).rows == whole.rows - sum(per_batch[b] for b in (1, 2, 3))
    # the state tables are the engine's: a release never touches them
    assert store.load_state().tables["accounts"].num_rows > 0
    store.close()


def test_push_policy_k_batches_n_rows_t_ms() -> None:
    settings = load_settings(
        migration={"push_batches": 3, "push_rows": 1000, "push_ms": 500}
    ).migration
    policy = PushPolicy(settings)
    assert not policy.due(0, 10_000, 10_000)  # nothing new
    assert not policy.due(2, 999, 499)
    assert policy.due(3, 0, 0)
    assert policy.due(1, 1000, 0)
    assert policy.due(1, 1, 500)


def test_migration_settings_are_checked() -> None:
    from streamdi.errors import ConfigurationError

    s = load_settings(migration={"targets": "DuckDB, postgres", "push": "postgres"})
    assert s.migration.target_names == ("duckdb", "postgres")
    assert s.migration.push_targets == ("postgres",)
    assert load_settings(migration={"targets": "duckdb"}).migration.push_targets == ("duckdb",)
    with pytest.raises(ConfigurationError, match="MIGRATION__TARGETS"):
        load_settings(migration={"targets": "oracle"})
    with pytest.raises(ConfigurationError, match="MIGRATION__SCHEMA_NAME"):
        load_settings(migration={"schema_name": "Bad Name"})
