"""``python -m tests.integration.tpcdi.historical_child DATA WAREHOUSE WORKDIR``: the TPC-DI
historical load of ``DATA/Batch1`` alone, on the Spark master of ``SPARK__MASTER`` (one Spark
session per process, hence a child process per master), into a fresh DuckDB warehouse file; the
engine's seed goes into the same file as tables of schema ``seed``, so a fingerprint covers it.
Prints one JSON line: the rows loaded per table and the largest piece."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import duckdb


def main(data: Path, warehouse_path: Path, workdir: Path) -> dict[str, object]:
    from etl_dataflows.executors.spark.session import config_from_settings, configure_spark
    from migration.schema import WarehouseLayout
    from streamdi.settings import load_settings
    from tpcdi.historical.load import load_warehouse, transform
    from tpcdi.incremental import build_flow
    from tpcdi.warehouse.warehouse import Warehouse

    settings = load_settings()
    configure_spark(config_from_settings(settings))
    flow = build_flow().build()
    layout = WarehouseLayout(flow, "tpcdi")
    result = transform(data / "Batch1", flow, layout, settings.spark, workdir)
    with Warehouse(layout, ["duckdb"], duckdb_path=warehouse_path) as warehouse:
        warehouse.reset()
        counts = load_warehouse(result, warehouse)
    con = duckdb.connect(str(warehouse_path))
    try:
        con.execute("CREATE SCHEMA seed")
        for name, table in result.seed.tables.items():
            con.register("_seed", table)
            con.execute(f'CREATE TABLE seed."{name}" AS SELECT * FROM _seed')
            con.unregister("_seed")
        con.execute("CREATE TABLE seed.sequences (name TEXT, value BIGINT)")
        con.executemany(
            "INSERT INTO seed.sequences VALUES (?, ?)", sorted(result.seed.sequences.items())
        )
    finally:
        con.close()
    return {"counts": counts, "largest": result.pieces.largest}


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))), flush=True)
