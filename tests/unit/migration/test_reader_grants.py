"""What migration hands the warehouse layer's reader login: the grants of a layout name exactly
the tables a reader reads (each table's full and delta table, the ledger, the merges), quoted by
the warehouse layer, and nothing else of the ledger's schema."""

from __future__ import annotations

from migration.postgres_reader import reader_grants
from migration.schema import LEDGER_SCHEMA, WarehouseLayout
from tests.migration_shop import shop_dataflow
from warehouse.postgres_login import ReaderGrants


def test_grants_name_every_table_a_reader_reads() -> None:
    layout = WarehouseLayout(shop_dataflow().build(), schema='we"ird')
    grants = reader_grants(layout)
    assert grants.schemas == layout.schemas == ('we"ird', 'we"ird_delta', LEDGER_SCHEMA)
    assert grants.data_schemas == ('we"ird', 'we"ird_delta')
    expected = [n for t in layout.tables for n in (layout.full_name(t), layout.delta_name(t))]
    expected += [layout.ledger_name, layout.merges_name]
    assert grants.qualified_tables() == expected
    assert '"we""ird"."customers"' in expected  # quoted as the layout quotes
    outside = [(s, t) for s, t in grants.tables if s not in grants.data_schemas]
    assert outside == [(LEDGER_SCHEMA, "ledger"), (LEDGER_SCHEMA, "merges")]  # not `streams`


def test_grants_are_a_value() -> None:
    grants = ReaderGrants(schemas=("a",), data_schemas=("a",), tables=(("a", "t"),))
    assert grants == ReaderGrants(schemas=("a",), data_schemas=("a",), tables=(("a", "t"),))
    assert grants.qualified_tables() == ['"a"."t"']
