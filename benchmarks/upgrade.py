"""``streamdi bench upgrade``: how long an in-place upgrade pauses the pipeline, by state size.

A dataflow with one state table (``accounts``: an id and four typed value columns) is staged
with ``--rows`` rows (default 1,000,000) in batches of 100,000, the last ``--unreleased``
batches' deltas still staged (not yet in the warehouses, so the upgrade rewrites their segment
files too). Then, on a fresh copy of that staging file each time, the upgrade
(:func:`staging.upgrade.upgrade_staging`, what ``streamdi run --upgrade`` does before the
pipeline starts, so its duration is the pause) is timed for three changes:

* ``default``: a value column added with a default;
* ``fill``: a value column added with a fill expression over two existing columns;
* ``widen``: an int64 column widened to float64.

Beside them, the baseline of the same run: copying the table's rows out of staging and back in
through DuckDB's bulk path (``CREATE TABLE AS SELECT``), the least any rewrite of the rows costs.
Reported per change: the pause (median and spread of ``--repeat`` runs), rows per second, and the
ratio to the baseline. The DuckDB warehouse's switch (off the pipeline's path: it happens at the
warehouse's next migration round) is timed once per change.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from benchmarks.staged import upsert_commit
from cli.commands import EXIT_OK, Commands, write_json
from etl_dataflows import Dataflow, col
from etl_dataflows.dataflow import CompiledDataflow
from etl_dataflows.state import image_schema
from migration.migrator import Migrator, build_targets
from migration.schema import WarehouseLayout
from staging import state_file
from staging.batch_commit import BatchCommit
from staging.handoff import StagedDeltas
from staging.layout import arrow_of
from staging.store import StagingStore
from staging.upgrade import upgrade_staging
from streamdi.settings import load_settings

BATCH_ROWS = 100_000
CHANGES = ("default", "fill", "widen")


def bench_flow(change: str | None) -> CompiledDataflow:
    """The benchmark's dataflow before (``None``) or after one of :data:`CHANGES`."""
    columns = {"balance": "int64", "limit": "int64", "rate": "float64", "name": "string"}
    defaults: dict[str, Any] = {}
    fills: dict[str, Any] = {}
    if change == "default":
        columns["tier"] = "string"
        defaults["tier"] = "basic"
    elif change == "fill":
        columns["headroom"] = "int64"
        fills["headroom"] = col("limit") - col("balance")
    elif change == "widen":
        columns["balance"] = "float64"
    flow = Dataflow("upgrade_bench")
    flow.table("accounts", key={"id": "int64"}, columns=columns, defaults=defaults, fills=fills)
    flow.source("events", schema={"id": "int64"})
    flow.sink("seen", input="events")
    return flow.build()


def _commit(flow: CompiledDataflow, batch_id: int, rng: np.random.Generator) -> BatchCommit:
    first = (batch_id - 1) * BATCH_ROWS
    n = BATCH_ROWS
    rows = pa.table(
        {
            "id": pa.array(np.arange(first, first + n), pa.int64()),
            "balance": pa.array(rng.integers(0, 10**6, n), pa.int64()),
            "limit": pa.array(rng.integers(0, 10**6, n), pa.int64()),
            "rate": pa.array(rng.random(n), pa.float64()),
            "name": pa.array([f"customer {i}" for i in range(first, first + n)], pa.string()),
        }
    ).cast(image_schema(flow.tables["accounts"]))
    return upsert_commit(
        batch_id, "accounts", rows, "id", stream="events", events=n, position=batch_id * n
    )


def _stage(workdir: Path, rows: int, unreleased: int) -> Path:
    """The staging file with ``rows`` state rows; all but the last ``unreleased`` batches
    migrated into a DuckDB warehouse and released."""
    flow = bench_flow(None)
    settings = load_settings(
        streamdi={"state_dir": str(workdir)}, migration={"targets": "duckdb", "release_ms": 0}
    )
    rng = np.random.default_rng(7)
    batches = max(1, rows // BATCH_ROWS)
    with StagingStore(settings.staging_path, flow, background_merge=False) as store:
        for batch_id in range(1, batches + 1):
            store.commit([_commit(flow, batch_id, rng)])
            if batch_id == batches - unreleased:
                layout = WarehouseLayout(flow, history=store.history)
                migrator = Migrator(
                    StagedDeltas(store), build_targets(settings, layout), settings.migration
                )
                migrator.migrate(merge="force")
                migrator.close()
        store.fold_state()
    return workdir


def _copy(source: Path, dest: Path) -> Path:
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(source, dest)
    return dest


def _baseline(staging: Path) -> float:
    """Seconds to copy the state table's rows out and back through DuckDB's bulk path."""
    con = state_file.connect(staging, read_only=False)
    try:
        started = time.perf_counter()
        con.execute("BEGIN TRANSACTION")
        con.register("_rows", arrow_of(con.sql('SELECT * FROM state."accounts"')))
        con.execute(f"CREATE TABLE {state_file.table_ref('accounts_copy')} AS SELECT * FROM _rows")
        con.execute("COMMIT")
        return time.perf_counter() - started
    finally:
        con.close()


def _warehouse_switch(workdir: Path, flow: CompiledDataflow) -> float:
    settings = load_settings(
        streamdi={"state_dir": str(workdir)}, migration={"targets": "duckdb", "release_ms": 0}
    )
    with StagingStore(settings.staging_path, flow, background_merge=False) as store:
        layout = WarehouseLayout(flow, history=store.history)
        target = build_targets(settings, layout)["duckdb"]
        started = time.perf_counter()
        target.open()
        seconds = time.perf_counter() - started
        target.close()
    return seconds


def run_bench(rows: int, unreleased: int, repeat: int) -> dict[str, Any]:
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="streamdi-upgrade-bench-") as tmp:
        base = _stage(Path(tmp) / "base", rows, unreleased)
        staging = "staging.duckdb"
        baseline = [_baseline(_copy(base, Path(tmp) / "copy") / staging) for _ in range(repeat)]
        results: dict[str, Any] = {}
        for change in CHANGES:
            flow = bench_flow(change)
            pauses, segments = [], 0
            warehouse = 0.0
            for i in range(repeat):
                work = _copy(base, Path(tmp) / "copy")
                switch = upgrade_staging(work / staging, flow)
                pauses.append(switch.seconds)
                segments = switch.segments
                if i == 0:
                    warehouse = _warehouse_switch(work, flow)
            median = statistics.median(pauses)
            results[change] = {
                "pause_s_median": round(median, 3),
                "pause_s_min": round(min(pauses), 3),
                "pause_s_max": round(max(pauses), 3),
                "rows_per_s": round(rows / median),
                "ratio_to_baseline": round(median / statistics.median(baseline), 2),
                "segments_rewritten": segments,
                "warehouse_switch_s": round(warehouse, 3),
            }
    return {
        "rows": rows,
        "unreleased_batches": unreleased,
        "repeat": repeat,
        "baseline_copy_s_median": round(statistics.median(baseline), 3),
        "baseline_copy_s_spread": [round(min(baseline), 3), round(max(baseline), 3)],
        "changes": results,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
    }


def render(report: dict[str, Any]) -> str:
    lines = [
        f"# In-place upgrade pause: {report['rows']:,} state rows "
        f"({report['unreleased_batches']} batches still staged), {report['repeat']} runs",
        "",
        f"load average before {report['load_average_before'][0]:.2f}, after "
        f"{report['load_average_after'][0]:.2f}; baseline (rows out and back in, bulk): "
        f"{report['baseline_copy_s_median']:.2f} s (spread {report['baseline_copy_s_spread']})",
        "",
        "| change | pause median s (min-max) | rows/s | x baseline | segments rewritten | "
        "warehouse switch s |",
        "|---|---|---|---|---|---|",
    ]
    for change, r in report["changes"].items():
        lines.append(
            f"| {change} | {r['pause_s_median']:.2f} ({r['pause_s_min']:.2f}-"
            f"{r['pause_s_max']:.2f}) | {r['rows_per_s']:,} | {r['ratio_to_baseline']} | "
            f"{r['segments_rewritten']} | {r['warehouse_switch_s']:.2f} |"
        )
    return "\n".join(lines)


def _bench(args: argparse.Namespace, settings: object) -> int:
    rows = 100_000 if args.quick else args.rows
    report = run_bench(rows, args.unreleased, 1 if args.quick else args.repeat)
    print(render(report))
    if args.json:
        write_json(report, args.json)
    return EXIT_OK


def register(benches: Commands) -> None:
    bench = benches.add_parser(
        "upgrade",
        help="the pause of an in-place dataflow upgrade by state size, against a bulk copy",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bench.add_argument("--rows", type=int, default=1_000_000, help="state rows (default 1M)")
    bench.add_argument(
        "--unreleased", type=int, default=2, help="batches still staged at the switch (default 2)"
    )
    bench.add_argument("--repeat", type=int, default=3, help="runs per change (default 3)")
    bench.add_argument("--quick", action="store_true", help="100,000 rows, one run")
    bench.add_argument("--json", metavar="PATH", help="also write the results as JSON ('-')")
    bench.set_defaults(handler=_bench)
