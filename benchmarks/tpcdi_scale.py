"""``streamdi bench tpcdi-scale``: how the TPC-DI run's cost grows with the scale factor.

For each scale factor (default 1, 3, 10; the issue's table is 1, 3, 10, 30, 100), one whole
``streamdi tpcdi run --sf SF`` in a fresh child process (its own Spark JVM and, with PostgreSQL,
its own embedded server; generated data comes from the run's cache, generated once), then:

* the historical load's seconds, source rows and rows/s, and its steps' seconds;
* peak memory of the process tree (the Spark JVM and PostgreSQL included) over the run and over
  the historical load, by part (driver process, Spark driver JVM, broker, PostgreSQL);
* the largest piece the facts moved into the warehouse in;
* the warehouse's size on disk (the DuckDB file; PostgreSQL's data directory), the audit, the
  updates' freshness, and the load average before, during (median, maximum) and after (the
  machine is shared);
* the engine's resume after the run, in another fresh process: what a restarted pipeline does
  before it reads Kafka again (open staging, load every state table, build and warm up the
  executor), with the state's rows (DuckDB target only: the reference data comes from it).

Then the fitted growth: least squares of seconds and of memory against SF (per SF: the slope;
at SF 0: the intercept) and, per historical step, the exponent ``b`` of ``seconds ~ SF^b``
between the smallest and the largest SF measured: a step with ``b`` well above 1 grows faster
than linearly and is named in the report.

With ``--cluster`` the runs go to a standalone Spark cluster started here (a master and two
workers as native processes, :mod:`etl_dataflows.executors.spark.cluster`) with the driver's
memory held to ``--driver-memory``.

Writes JSON and Markdown (default ``<STREAMDI__STATE_DIR>/reports/bench-tpcdi-scale.*``).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.load_average import LoadAverageSampler
from cli.commands import EXIT_FAILED, EXIT_OK, Commands
from streamdi.settings import StreamdiSettings

#: The steps of the historical load the growth exponents are computed for.
STEP_PREFIX = "transform."


def _tree_bytes(root: Path) -> int:
    """Bytes of a file, or of the files under a directory (0 when missing)."""
    if root.is_file():
        return root.stat().st_size
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) if root.exists() else 0


def prepare(sf: float, seed: int = 0) -> dict[str, Any]:
    """Runs in a fresh process: the data set of ``streamdi tpcdi run --sf SF`` generated into the
    run's cache (as the run would, so the run finds it), timed; nothing when it is there."""
    from streamdi.settings import load_settings
    from tpcdi.generator import generate

    settings = load_settings()
    root = settings.tpcdi.cache_dir / f"generated-sf{sf:g}-seed{seed}"
    if (root / ".complete").exists():
        return {"cached": str(root)}
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    report = generate(root, sf, seed=seed)
    (root / ".complete").touch()
    import resource

    return {
        "seconds": round(report.seconds, 1),
        "records": report.total_records,
        "records_per_s": round(report.total_records / report.seconds),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "bytes": _tree_bytes(root),
    }


def _fresh(function: Any, *args: Any) -> Any:
    """``function(*args)`` in a fresh process (spawned: nothing of this one's memory)."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=context) as pool:
        return pool.submit(function, *args).result()


def run_one(
    sf: float,
    target: str,
    workdir: Path,
    *,
    master: str | None,
    env: dict[str, str],
    spark_conf: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One ``streamdi tpcdi run --sf SF`` in a child process; its figures (see the module
    docstring). With ``spark_conf`` (a cluster run), the run writes a Spark event log and the
    figures count its tasks per worker."""
    from etl_dataflows.executors.spark.cluster import event_log_conf, event_logs, tasks_by_worker

    state = workdir / f"sf{sf:g}"
    shutil.rmtree(state, ignore_errors=True)
    state.mkdir(parents=True)
    events = state / "events"
    if spark_conf is not None:
        events.mkdir()
        env = dict(env, SPARK__CONF=json.dumps({**spark_conf, **event_log_conf(events)}))
    report = state / "run.json"
    argv = [sys.executable, "-m", "cli.main", "tpcdi", "run", "--sf", f"{sf:g}"]
    argv += ["--target", target, "--no-progress", "--json", str(report)]
    argv += ["--workdir", str(state / "work")]
    if master:
        argv += ["--spark-master", master]
    child_env = dict(env, STREAMDI__STATE_DIR=str(state / "state"), STREAMDI__LOG_LEVEL="WARNING")
    # generated apart, so the run's memory is the run's (a process keeps what it once held)
    generation = _fresh(prepare, sf)
    load_before = os.getloadavg()
    started = time.perf_counter()
    with (state / "run.log").open("wb") as log, LoadAverageSampler() as loads:
        code = subprocess.run(argv, env=child_env, stdout=log, stderr=subprocess.STDOUT).returncode
    wall = time.perf_counter() - started
    load_after = os.getloadavg()
    if not report.exists():
        return {"sf": sf, "exit": code, "error": (state / "run.log").read_text()[-3000:]}
    run = json.loads(report.read_text())
    details = run["run"]
    historical = details["phases"]["historical"]
    memory = details.get("memory_mb", {})
    warehouse = state / "work" / "warehouse.duckdb"
    result = {
        "sf": sf,
        "exit": code,
        "command": " ".join(["streamdi", *argv[3:]]),
        "wall_s": round(wall, 1),
        "load_avg_before": [round(x, 2) for x in load_before],
        "load_avg_after": [round(x, 2) for x in load_after],
        "load_avg_during": loads.summary(),
        "historical_s": historical["seconds"],
        "source_rows": historical["rows"],
        "rows_per_s": round(historical["rows"] / historical["seconds"])
        if historical["seconds"]
        else 0,
        "dw_rows": historical["dw_rows"],
        "steps": {k: v for k, v in historical["steps"].items()},
        "largest_piece": historical.get("details", {}).get("pieces", {}).get("largest"),
        "peak_mem_mb": run["peak_mem_mb"],
        "historical_peak_mb": memory.get("phases", {}).get("historical"),
        "peak_parts_mb": memory.get("parts", {}),
        "warehouse_mb": round(_tree_bytes(warehouse) / 2**20, 1) if "duckdb" in target else None,
        "postgres_mb": round(_tree_bytes(state / "state" / "postgres") / 2**20, 1)
        if target != "duckdb"
        else None,
        "freshness_s": [
            details["phases"][p].get("freshness_s") for p in ("incremental1", "incremental2")
        ],
        "audit": {"ok": run["audit"]["ok"], "fail": run["audit"]["fail"]},
        "tpc_di_rps": run["tpc_di_rps"],
        "resume": resume(state / "work"),
        "generation": generation,
    }
    if spark_conf is not None:
        placement = [tasks_by_worker(files) for files in event_logs(events).values()]
        result["tasks_by_worker"] = {
            worker: sum(p.by_worker.get(worker, 0) for p in placement)
            for worker in sorted({w for p in placement for w in p.by_worker})
        }
    return result


def measure_resume(workdir: str, executor: str = "local") -> dict[str, Any]:
    """Runs in a fresh process: the engine's restart on the TPC-DI run's staging under
    ``workdir`` (see the module docstring); seconds and the state's rows per table."""
    import duckdb

    from etl_dataflows.executors import create_executor
    from etl_dataflows.scheduling.decision import cores
    from staging.layout import arrow_of
    from staging.store import StagingStore
    from tpcdi.incremental import build_flow
    from tpcdi.incremental.reference import Reference

    root = Path(workdir)
    con = duckdb.connect(str(root / "warehouse.duckdb"), read_only=True)
    try:
        con.execute("SET search_path = 'tpcdi'")
        reference = Reference.from_warehouse(lambda sql: arrow_of(con.sql(sql)))
    finally:
        con.close()
    flow = build_flow(reference).build()
    started, cpu = time.perf_counter(), time.process_time()
    with StagingStore(root / "staging.duckdb", flow) as store:
        state = store.load_state(sorted_rows=False, threads=cores())  # as a resume reads it
    loaded = time.perf_counter() - started
    engine = create_executor(executor, flow, state)
    engine.warm_up()
    return {
        "seconds": round(time.perf_counter() - started, 2),
        # the process's CPU (DuckDB's threads included): on a busy machine the wall seconds
        # stretch, this much less
        "cpu_s": round(time.process_time() - cpu, 2),
        "load_state_s": round(loaded, 2),
        "state_rows": sum(t.num_rows for t in state.tables.values()),
        "tables": {n: t.num_rows for n, t in state.tables.items() if t.num_rows},
    }


def resume(workdir: Path) -> dict[str, Any] | None:
    """:func:`measure_resume` in a fresh process (None without a DuckDB warehouse)."""
    if not (workdir / "warehouse.duckdb").exists():
        return None
    found: dict[str, Any] = _fresh(measure_resume, str(workdir))
    return found


def fit_line(xs: list[float], ys: list[float]) -> dict[str, float] | None:
    """Least squares ``y = intercept + slope * x``; None with fewer than two points."""
    if len(xs) < 2:
        return None
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return None
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    return {"slope": round(slope, 3), "intercept": round(my - slope * mx, 3)}


def exponent(x0: float, y0: float, x1: float, y1: float) -> float | None:
    """``b`` of ``y ~ x^b`` through two points; None when undefined."""
    if min(x0, y0, x1, y1) <= 0 or x0 == x1:
        return None
    return round(math.log(y1 / y0) / math.log(x1 / x0), 2)


def growth(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The fitted growth of the measured runs (see the module docstring)."""
    ok = sorted((r for r in rows if "historical_s" in r), key=lambda r: r["sf"])
    xs = [r["sf"] for r in ok]
    found: dict[str, Any] = {
        "historical_s": fit_line(xs, [r["historical_s"] for r in ok]),
        "peak_mem_mb": fit_line(xs, [r["peak_mem_mb"] for r in ok]),
        "historical_peak_mb": fit_line(xs, [r["historical_peak_mb"] or 0.0 for r in ok]),
        "warehouse_mb": fit_line(xs, [r["warehouse_mb"] or 0.0 for r in ok]),
        "steps": {},
        "superlinear": [],
    }
    if len(ok) >= 2:
        first, last = ok[0], ok[-1]
        found["historical_exponent"] = exponent(
            first["sf"], first["historical_s"], last["sf"], last["historical_s"]
        )
        for step, seconds in last["steps"].items():
            if not step.startswith(STEP_PREFIX):
                continue
            b = exponent(first["sf"], first["steps"].get(step, 0.0), last["sf"], seconds)
            found["steps"][step.removeprefix(STEP_PREFIX)] = b
            # a step that is a few seconds even at the largest SF does not matter
            if b is not None and b > 1.15 and seconds > 5:
                found["superlinear"].append(step.removeprefix(STEP_PREFIX))
    return found


def _load(run: dict[str, Any]) -> str:
    """The load average column: at the start, then the median and maximum during the run."""
    during = run.get("load_avg_during")
    start = f"{run['load_avg_before'][0]:.1f}"
    if not during:
        return start
    return f"{start}; during {during['median']:.1f} (max {during['max']:.1f})"


def markdown(data: dict[str, Any]) -> str:
    rows = data["runs"]
    lines = [
        f"# TPC-DI cost by scale factor ({data['target']}, Spark {data['spark']})",
        "",
        "| SF | historical | source rows | rows/s | peak memory (historical) | "
        "driver / Spark JVM / broker / PostgreSQL | largest piece | warehouse | freshness 1 / 2 "
        "| audit | load avg |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "historical_s" not in r:
            lines.append(f"| {r['sf']:g} | failed (exit {r['exit']}) | | | | | | | | | |")
            continue
        parts = r["peak_parts_mb"] or {}
        piece = r["largest_piece"] or {}
        size = r["warehouse_mb"] if r["warehouse_mb"] is not None else r["postgres_mb"]
        fresh = " / ".join(f"{f:.1f} s" if f is not None else "-" for f in r["freshness_s"])
        lines.append(
            f"| {r['sf']:g} | {r['historical_s']:.1f} s | {r['source_rows']:,} | "
            f"{r['rows_per_s']:,} | {r['peak_mem_mb'] / 1024:.2f} GiB "
            f"({(r['historical_peak_mb'] or 0) / 1024:.2f}) | "
            f"{parts.get('process', 0) / 1024:.2f} / {parts.get('spark', 0) / 1024:.2f} / "
            f"{parts.get('children', 0) / 1024:.2f} / {parts.get('postgres', 0) / 1024:.2f} GiB | "
            f"{piece.get('rows', 0):,} rows ({piece.get('bytes', 0) / 2**20:.0f} MB) | "
            f"{(size or 0) / 1024:.2f} GiB | {fresh} | {r['audit']['ok']} OK, "
            f"{r['audit']['fail']} FAIL | {_load(r)} |"
        )
    g = data["growth"]
    lines.append("")

    def per_sf(name: str, unit: str) -> str:
        fit = g.get(name)
        if not fit:
            return f"{name}: one point, no fit"
        return f"{name}: {fit['slope']:,} {unit} per SF + {fit['intercept']:,} {unit}"

    lines.append("Fitted growth (least squares over the SFs above):")
    lines.append("")
    lines.append(f"- {per_sf('historical_s', 's')}")
    lines.append(f"- {per_sf('peak_mem_mb', 'MB')}")
    lines.append(f"- {per_sf('historical_peak_mb', 'MB')}")
    lines.append(f"- {per_sf('warehouse_mb', 'MB')}")
    if g.get("historical_exponent") is not None:
        lines.append(f"- historical seconds ~ SF^{g['historical_exponent']}")
        steps = ", ".join(f"{k} {v}" for k, v in g["steps"].items() if v is not None)
        lines.append(f"- exponents per step: {steps}")
        named = ", ".join(g["superlinear"]) or "none"
        lines.append(f"- steps growing faster than linearly (b > 1.15, > 5 s): {named}")
    resumes = [
        f"SF {r['sf']:g}: {r['resume']['seconds']} s"
        + (f" ({r['resume']['cpu_s']} s of CPU)" if "cpu_s" in r["resume"] else "")
        + f" for {r['resume']['state_rows']:,} state rows"
        for r in rows
        if r.get("resume")
    ]
    if resumes:
        lines.append(f"- the engine's resume after the run: {'; '.join(resumes)}")
    generated = [
        f"SF {r['sf']:g}: {r['generation']['records']:,} records in "
        f"{r['generation']['seconds']} s ({r['generation']['records_per_s']:,}/s, peak "
        f"{r['generation']['peak_rss_mb']:,.0f} MB)"
        for r in rows
        if (r.get("generation") or {}).get("records")
    ]
    if generated:
        lines.append(f"- generation (one process, before the run): {'; '.join(generated)}")
    placed = [
        f"SF {r['sf']:g}: " + ", ".join(f"{w} {n:,}" for w, n in r["tasks_by_worker"].items())
        for r in rows
        if r.get("tasks_by_worker")
    ]
    if placed:
        lines.append(f"- Spark tasks by worker (event log): {'; '.join(placed)}")
    lines.append("")
    lines.append(f"Commands: `{data['command']}`; each run: `{rows[0].get('command', '')}`.")
    return "\n".join(lines) + "\n"


def _run(args: argparse.Namespace, settings: StreamdiSettings) -> int:
    from etl_dataflows.executors.spark.cluster import StandaloneCluster

    out = Path(args.out) if args.out else settings.streamdi.state_dir / "reports"
    out.mkdir(parents=True, exist_ok=True)
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="bench-scale-"))
    env = dict(os.environ)
    env.setdefault("TPCDI__CACHE_DIR", str(settings.tpcdi.cache_dir))
    cluster = None
    master = args.spark_master
    spark_conf = None
    if args.cluster:
        cluster = StandaloneCluster(
            workdir / "cluster", workers=2, cores=1, memory=args.executor_memory
        ).start()
        master = cluster.url
        env["SPARK__DRIVER_MEMORY"] = args.driver_memory
        spark_conf = {"spark.executor.memory": args.executor_memory}
    runs = []
    try:
        for sf in args.sf:
            print(f"tpcdi run SF={sf:g} (load average {os.getloadavg()[0]:.2f}) …", flush=True)
            result = run_one(
                sf, args.target, workdir, master=master, env=env, spark_conf=spark_conf
            )
            runs.append(result)
            print(json.dumps({k: result.get(k) for k in ("sf", "historical_s", "peak_mem_mb")}))
            if not args.keep:
                shutil.rmtree(workdir / f"sf{sf:g}" / "work", ignore_errors=True)
                shutil.rmtree(workdir / f"sf{sf:g}" / "state", ignore_errors=True)
    finally:
        if cluster is not None:
            cluster.stop()
    data = {
        "command": "streamdi bench tpcdi-scale " + " ".join(sys.argv[3:]),
        "target": args.target,
        "spark": master or settings.spark.master,
        "runs": runs,
        "growth": growth(runs),
    }
    (out / "bench-tpcdi-scale.json").write_text(json.dumps(data, indent=2) + "\n")
    report = markdown(data)
    (out / "bench-tpcdi-scale.md").write_text(report)
    print(report)
    print(f"wrote {out / 'bench-tpcdi-scale.json'} and {out / 'bench-tpcdi-scale.md'}")
    failed = [r["sf"] for r in runs if r.get("exit") != 0]
    return EXIT_FAILED if failed else EXIT_OK


def register(benches: Commands) -> None:
    bench = benches.add_parser(
        "tpcdi-scale",
        help="TPC-DI runs at growing scale factors: seconds, rows/s, peak memory, warehouse size, "
        "fitted growth",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    bench.add_argument("--sf", type=float, nargs="+", default=[1.0, 3.0, 10.0])
    bench.add_argument("--target", choices=("duckdb", "postgres", "both"), default="duckdb")
    bench.add_argument("--spark-master", help="Spark master (default SPARK__MASTER)")
    bench.add_argument(
        "--cluster", action="store_true", help="start a standalone cluster of two workers here"
    )
    bench.add_argument("--driver-memory", default="1g", help="driver memory with --cluster")
    bench.add_argument("--executor-memory", default="2g", help="per worker with --cluster")
    bench.add_argument("--workdir", help="where the runs keep their state (default: a temp dir)")
    bench.add_argument("--keep", action="store_true", help="keep each run's warehouse and state")
    bench.add_argument("--out", help="report directory (default <state_dir>/reports)")
    bench.set_defaults(handler=_run)
