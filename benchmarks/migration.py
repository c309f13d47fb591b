"""``streamdi bench migration``: staged deltas into PostgreSQL and DuckDB, against a raw bulk load
of the same rows into the same target, side by side in one run.

A synthetic dataflow stages rounds of batches (10,000 state-table upserts, half of them updates of
earlier keys, and 10,000 output rows per batch; nine typed columns). For each target, round after
round: the batches are committed to staging; a **raw** bulk load puts exactly the rows migration
will move into unindexed tables of the target (COPY from Arrow-written CSV for PostgreSQL, an Arrow
insert for DuckDB: the ceiling of the bulk path); the **migration** moves them
(:meth:`~migration.migrator.Migrator.migrate`: read staging, load the delta tables, ledger rows,
commit, acknowledge, release); then a **merge** folds the deltas into the indexed full tables.

Reported per target: ``rows_per_s`` (migration), ``copy_rows_per_s`` (raw bulk load),
``ratio`` (the first over the second), ``rows_per_s_with_merge``, and the merge time per round
(``merge_ms_p50``/``merge_ms_p99``). PostgreSQL is ``POSTGRES__DSN`` or a fresh embedded server.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from benchmarks.postgres import bench_postgres
from benchmarks.staged import upsert_commit
from cli.commands import EXIT_OK, Commands, write_json
from etl_dataflows.dataflow import CompiledDataflow, Dataflow
from etl_dataflows.state import image_schema
from migration.migrator import Migrator
from migration.schema import WarehouseLayout
from migration.targets.base import BaseTarget
from migration.targets.duckdb_file import DuckDBTarget
from migration.targets.postgres import PostgresTarget
from staging.batch_commit import BatchCommit
from staging.handoff import StagedDeltas
from staging.layout import q
from staging.store import StagingStore
from streamdi.settings import MigrationSettings, StreamdiSettings

BATCH_ROWS = 10_000


def bench_dataflow() -> CompiledDataflow:
    columns = {
        "account": "int64",
        "amount": "float64",
        "price": "float64",
        "flag": "bool",
        "label": "string",
        "at": "timestamp",
        "day": "date",
        "qty": "int64",
    }
    flow = Dataflow("mig_bench")
    flow.table("positions", key={"id": "int64"}, columns=columns)
    flow.source("events", schema={"id": "int64", **columns})
    flow.sink("trades", input="events")
    return flow.build()


def _columns(rng: np.random.Generator, n: int) -> dict[str, pa.Array]:
    labels = np.array(["alpha", "beta, gamma", 'quote "q"', "", "delta"])
    return {
        "account": pa.array(rng.integers(0, 1_000_000, n), pa.int64()),
        "amount": pa.array(np.round(rng.random(n) * 1e4, 2), pa.float64()),
        "price": pa.array(rng.random(n) * 100, pa.float64()),
        "flag": pa.array(rng.random(n) < 0.5, pa.bool_()),
        "label": pa.array(labels[rng.integers(0, len(labels), n)], pa.string()),
        "at": pa.array(rng.integers(0, 2**50, n), pa.int64()).cast(pa.timestamp("us")),
        "day": pa.array(rng.integers(0, 30_000, n).astype(np.int32), pa.int32()).cast(pa.date32()),
        "qty": pa.array(rng.integers(1, 1000, n), pa.int64()),
    }


def _batch(flow: CompiledDataflow, batch_id: int, rng: np.random.Generator) -> BatchCommit:
    half = BATCH_ROWS // 2
    first_new = (batch_id - 1) * half
    ids = np.concatenate(
        [
            np.arange(first_new, first_new + half),  # new keys
            rng.choice(max(first_new, 1), half, replace=first_new < half),  # updates
        ]
    )
    ids = np.unique(ids)
    upserts = pa.table({"id": pa.array(ids, pa.int64()), **_columns(rng, len(ids))})
    upserts = upserts.cast(image_schema(flow.tables["positions"]))
    events = pa.table(
        {
            "id": pa.array(rng.integers(0, 10**9, BATCH_ROWS), pa.int64()),
            **_columns(rng, BATCH_ROWS),
            "_ts": pa.array(np.arange(BATCH_ROWS, dtype=np.int64) + batch_id * BATCH_ROWS),
            "_pos": pa.array(np.arange(BATCH_ROWS, dtype=np.int64) + batch_id * BATCH_ROWS),
            "_src": pa.array(np.zeros(BATCH_ROWS, dtype=np.int64)),
        }
    )
    return upsert_commit(
        batch_id,
        "positions",
        upserts,
        "id",
        stream="events",
        events=BATCH_ROWS,
        position=batch_id * BATCH_ROWS,
        outputs={"trades": events},
    )


class _RawLoad:
    """The ceiling: the same rows bulk-loaded into plain unindexed tables of the target."""

    def __init__(self, target: BaseTarget, layout: WarehouseLayout) -> None:
        self.target = target
        self.names = {n: f"{q(layout.schema + '_raw')}.{q(n)}" for n in layout.tables}
        target.begin()
        target.execute(f"CREATE SCHEMA IF NOT EXISTS {q(layout.schema + '_raw')}")
        for name, qualified in self.names.items():
            target.execute(
                f"CREATE TABLE IF NOT EXISTS {qualified} AS SELECT * FROM "
                f"{layout.delta_name(name)} WHERE false"
            )
        target.commit()

    def load(self, tables: dict[str, pa.Table]) -> float:
        started = time.perf_counter()
        self.target.begin()
        for name, rows in tables.items():
            if rows.num_rows:
                self.target.bulk_insert(self.names[name], rows)
        self.target.commit()
        return time.perf_counter() - started


def _run_target(
    name: str, root: Path, dsn: str | None, rounds: int, per_round: int
) -> dict[str, Any]:
    flow = bench_dataflow()
    store = StagingStore(root / f"staging-{name}.duckdb", flow, memory_limit="2GB")
    layout = WarehouseLayout(flow, schema=f"mig_bench_{uuid.uuid4().hex[:6]}")
    target: BaseTarget = (
        PostgresTarget(layout, dsn)
        if name == "postgres" and dsn is not None
        else DuckDBTarget(layout, root / "warehouse.duckdb")
    )
    settings = MigrationSettings(targets=name, max_batches_per_load=per_round)
    migrator = Migrator(StagedDeltas(store), {name: target}, settings)
    target.open()
    raw = _RawLoad(target, layout)
    rng = np.random.default_rng(1)
    staged = StagedDeltas(store)
    rows = 0
    raw_s = migrate_s = 0.0
    merge_ms: list[float] = []
    batch_id = 0
    for _ in range(rounds):
        first = batch_id
        for _ in range(per_round):
            batch_id += 1
            store.commit([_batch(flow, batch_id, rng)])
        changes = staged.read(first, batch_id)
        raw_s += raw.load({**changes.tables, **changes.outputs})
        started = time.perf_counter()
        report = migrator.migrate([name], via="push", merge="never")
        migrate_s += time.perf_counter() - started
        moved = report.targets[name]
        if moved.error is not None or moved.rows != changes.rows:
            raise RuntimeError(f"migration into {name} failed: {moved.error}")
        rows += moved.rows
        merged = migrator.merge([name])[name]
        if merged is not None:
            merge_ms.append(merged.ms)
    migrator.close()
    store.close()
    merge_s = sum(merge_ms) / 1000
    return {
        "target": name,
        "rows": rows,
        "rounds": rounds,
        "batches_per_round": per_round,
        "rows_per_s": rows / migrate_s,
        "copy_rows_per_s": rows / raw_s,
        "ratio": raw_s / migrate_s,
        "rows_per_s_with_merge": rows / (migrate_s + merge_s),
        "merge_ms_p50": float(np.percentile(merge_ms, 50)),
        "merge_ms_p99": float(np.percentile(merge_ms, 99)),
        "bulk_path": "COPY FROM STDIN (csv)" if name == "postgres" else "Arrow insert",
    }


def run_bench(settings: StreamdiSettings, *, quick: bool) -> dict[str, Any]:
    rounds, per_round = (6, 2) if quick else (16, 4)
    results = []
    with tempfile.TemporaryDirectory(prefix="streamdi-bench-migration-") as tmp:
        root = Path(tmp)
        with bench_postgres(settings, root) as dsn:
            for name in ("postgres", "duckdb"):
                results.append(_run_target(name, root, dsn, rounds, per_round))
    return {
        "bench": "migration",
        "quick": quick,
        "batch_rows": 2 * BATCH_ROWS,
        "results": results,
    }


def _print(data: dict[str, Any]) -> None:
    print(
        f"migration: {data['results'][0]['rows']:,} rows per target "
        f"({data['results'][0]['rounds']} rounds of {data['results'][0]['batches_per_round']} "
        f"batches)"
    )
    header = (
        f"{'target':<10}{'migration rows/s':>18}{'raw bulk rows/s':>17}{'ratio':>7}"
        f"{'with merge':>12}{'merge p50 ms':>14}{'merge p99 ms':>14}"
    )
    print(header)
    for r in data["results"]:
        print(
            f"{r['target']:<10}{r['rows_per_s']:>18,.0f}{r['copy_rows_per_s']:>17,.0f}"
            f"{r['ratio']:>7.2f}{r['rows_per_s_with_merge']:>12,.0f}"
            f"{r['merge_ms_p50']:>14,.1f}{r['merge_ms_p99']:>14,.1f}"
        )


def _bench(args: argparse.Namespace, settings: StreamdiSettings) -> int:
    data = run_bench(settings, quick=args.quick)
    _print(data)
    if args.json:
        write_json(data, args.json)
    return EXIT_OK


def register(benches: Commands) -> None:
    bench = benches.add_parser(
        "migration",
        help="staged deltas into PostgreSQL and DuckDB vs a raw bulk load of the same rows",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bench.add_argument("--quick", action="store_true", help="fewer rows (well under a minute)")
    bench.add_argument(
        "--json", metavar="PATH", help="also write the results as JSON ('-': stdout)"
    )
    bench.set_defaults(handler=_bench)
