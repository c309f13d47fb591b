"""``streamdi bench spark``: the Spark executor against local on Streaming Ledger, in three parts.

* ``sizes`` — batch size by batch size (default 10k to 10M transactions), ``local`` beside
  ``spark:spark`` (every batch through Spark tasks) and ``spark`` (adaptive), on two SL variants:
  ``partitioned`` (every transaction's keys in one partition: one pass) and ``random`` (keys drawn
  at random: most transactions cross partitions). Per batch: latency, and where the Spark path
  spent it (routing, shipping, the job, the slowest task, driver work, merging).
* ``scaling`` — the same batches with 1 and 2 Spark worker cores (``local[1]``, ``local[2]``):
  throughput, the serial fraction (driver and transport time over the batch time, measured, and
  fitted from the two runs), and Amdahl's projection to 8 and 32 cores.
* ``budget`` — batches of 5,000,000 transactions over 10,000,000 keys (both SL variants) with the
  driver's memory budget at 1 GiB (``ENGINE__MEMORY_BUDGET``): where the adaptive executor sends
  them, and whether its results equal ``local``'s (the serial oracle is infeasible at that size).

Every configuration runs in a fresh process (one Spark session each); results are hashed (outputs,
aborts, dead letters, deltas, sequences, final state) and compared with ``local``'s run of the same
batches. Peak memory is the Python driver's resident set (the JVM is another process). Writes a
table to stdout, and with ``--json PATH`` the JSON plus a Markdown report beside it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.engine import _peak_rss_mb
from cli.commands import EXIT_FAILED, EXIT_OK, Commands, write_json
from streamdi.arrow_digest import table_digest
from streamdi.settings import StreamdiSettings

BREAKDOWN = (
    "route_ms",
    "ship_ms",
    "broadcast_ms",
    "job_ms",
    "slowest_task_ms",
    "task_ms",
    "driver_ms",
    "merge_ms",
)
VARIANTS = {"partitioned": 0.0, "random": None}


def run_config(job: dict[str, Any]) -> dict[str, Any]:
    """Run one configuration (meant for a fresh process): ``job`` names the executor, the Spark
    master and budget, and the SL knobs."""
    from etl_dataflows.apps import AppKnobs, app
    from etl_dataflows.executors import LocalExecutor, SparkExecutor
    from etl_dataflows.executors.spark import SparkConfig, configure_spark

    chosen = app("sl")
    knobs = AppKnobs(
        keys=job["keys"],
        batch_size=job["batch_size"],
        batches=job["batches"],
        multi_partition_ratio=job["multi_partition_ratio"],
        partitions=2,  # the data's partitions (key mod 2), whatever Spark's
        seed=job.get("seed", 0),
        udf_cost_ns=job.get("udf_cost_ns", 0),
        extra=dict(chosen.defaults),
    )
    generated = time.perf_counter()
    flow = chosen.dataflow(knobs)
    batches = chosen.batches(knobs)
    state = chosen.initial_state(knobs)
    generate_s = time.perf_counter() - generated
    executor: str = job["executor"]
    config = SparkConfig(
        master=job.get("master", "local[2]"),
        driver_memory=job.get("driver_memory", "8g"),
        partitions=job.get("partitions"),
        memory_budget=job.get("memory_budget"),
    )
    configure_spark(config)
    if executor == "local":
        runner: Any = LocalExecutor(flow, state)
    else:
        _, _, placement = executor.partition(":")
        runner = SparkExecutor(flow, state, placement=placement or None, config=config)  # type: ignore[arg-type]
    hasher = hashlib.sha256()
    latencies: list[float] = []
    decisions: list[dict[str, Any]] = []
    try:
        for batch in batches:
            started = time.perf_counter()
            result = runner.run_batch(batch)
            latencies.append((time.perf_counter() - started) * 1000)
            decisions.append(result.decisions[0].as_dict())
            for name in sorted(result.outputs):
                table_digest(hasher, result.outputs[name])
            table_digest(hasher, result.aborts)
            table_digest(hasher, result.dead_letters)
            for name in sorted(result.deltas):
                table_digest(hasher, result.deltas[name].upserts)
                table_digest(hasher, result.deltas[name].deletes)
            hasher.update(json.dumps(result.sequences, sort_keys=True).encode())
            del result
        final = runner.state_image()
    finally:
        runner.close()
    for name in sorted(final.tables):
        table_digest(hasher, final.tables[name])
    measured = latencies[1:] or latencies  # the first batch compiles and starts the session
    kept = decisions[1:] or decisions
    breakdown = {key: float(np.mean([d.get(key, 0.0) for d in kept])) for key in BREAKDOWN if kept}
    return {
        **{k: v for k, v in job.items() if k != "memory_budget"},
        "memory_budget": job.get("memory_budget"),
        "generate_s": generate_s,
        "first_batch_ms": latencies[0],
        "p50_batch_ms": float(np.percentile(measured, 50)),
        "p99_batch_ms": float(np.percentile(measured, 99)),
        "mean_batch_ms": float(np.mean(measured)),
        "txn_per_s": job["batch_size"] * 1000 / float(np.mean(measured)),
        "strategy": ", ".join(sorted({str(d.get("strategy")) for d in kept})),
        "why": kept[-1].get("why", ""),
        "crossing": int(np.mean([d.get("crossing", 0) for d in kept])),
        "depth": int(np.mean([d.get("depth", 0) for d in kept])),
        "breakdown_ms": breakdown,
        "peak_mem_mb": _peak_rss_mb(),
        "digest": hasher.hexdigest(),
    }


def _child(queue: Any, job: dict[str, Any]) -> None:
    try:
        queue.put(run_config(job))
    except BaseException as exc:  # report the failure instead of dying silently
        queue.put({**job, "error": f"{type(exc).__name__}: {exc}"})


def run_isolated(job: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_child, args=(queue, job))
    process.start()
    try:
        result: dict[str, Any] = queue.get(timeout=timeout_s)
    except Exception:
        process.kill()
        result = {**job, "error": f"no result within {timeout_s:.0f} s"}
    process.join(30)
    return result


def _verify(rows: list[dict[str, Any]]) -> None:
    """Mark each row verified against the ``local`` run of the same batches."""
    reference: dict[tuple[Any, ...], str] = {}
    for row in rows:
        if row.get("executor") == "local" and "digest" in row:
            reference[_batches_key(row)] = row["digest"]
    for row in rows:
        expected = reference.get(_batches_key(row))
        row["verified"] = (
            None if expected is None or "digest" not in row else (row["digest"] == expected)
        )


def _batches_key(row: dict[str, Any]) -> tuple[Any, ...]:
    return (
        row["keys"],
        row["batch_size"],
        row["batches"],
        row["multi_partition_ratio"],
        row.get("udf_cost_ns", 0),
    )


def render(rows: list[dict[str, Any]]) -> str:
    header = (
        f"{'variant':<12} {'executor':<16} {'master':<9} {'txns/batch':>11} {'p50 ms':>9} "
        f"{'p99 ms':>9} {'txn/s':>11} {'peak MB':>8} ok  strategy / breakdown (ms)"
    )
    lines = [header, "-" * len(header)]
    for r in rows:
        label = f"{r.get('variant', ''):<12} {r['executor']:<16} {r.get('master', ''):<9}"
        if "error" in r:
            lines.append(f"{label} {r['batch_size']:>11,} FAILED: {r['error']}")
            continue
        ok = {True: "yes", False: "NO", None: "-"}[r.get("verified")]
        parts = ", ".join(f"{k[:-3]} {v:.0f}" for k, v in r["breakdown_ms"].items() if v)
        lines.append(
            f"{label} {r['batch_size']:>11,} {r['p50_batch_ms']:>9.1f} {r['p99_batch_ms']:>9.1f} "
            f"{r['txn_per_s']:>11,.0f} {r['peak_mem_mb']:>8.0f} {ok:<3} {r['strategy']}"
            + (f" [{parts}]" if parts else "")
        )
    return "\n".join(lines)


def scaling(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Serial fraction and Amdahl projection from the 1-core and 2-core Spark runs."""
    by_master = {r["master"]: r for r in rows if r.get("section") == "scaling" and "error" not in r}
    one, two = by_master.get("local[1]"), by_master.get("local[2]")
    if one is None or two is None:
        return None
    t1, t2 = one["mean_batch_ms"], two["mean_batch_ms"]
    parallel_fit = 2 * (t1 - t2)
    serial_fit = t1 - parallel_fit
    fraction_fit = max(serial_fit, 0.0) / t1
    b1 = one["breakdown_ms"]
    fraction_measured = max(t1 - b1.get("task_ms", 0.0), 0.0) / t1

    def projected(fraction: float, cores: int) -> float:
        return float(one["txn_per_s"]) / (fraction + (1 - fraction) / cores)

    return {
        "txn_per_s_1_core": one["txn_per_s"],
        "txn_per_s_2_cores": two["txn_per_s"],
        "speedup_2_cores": t1 / t2,
        "serial_fraction_measured": fraction_measured,
        "serial_fraction_fitted": fraction_fit,
        "projection": {
            str(cores): {
                "measured_fraction_txn_per_s": projected(fraction_measured, cores),
                "fitted_fraction_txn_per_s": projected(fraction_fit, cores),
            }
            for cores in (8, 32)
        },
        "local_txn_per_s": next(
            (r["txn_per_s"] for r in rows if r.get("section") == "scaling-local"), None
        ),
    }


def _jobs(args: argparse.Namespace) -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = []
    sections = {s.strip() for s in args.section.split(",")}
    base = {"seed": args.seed, "udf_cost_ns": args.udf_cost_ns}

    def batches(size: int) -> int:  # enough batches for a p99 where they are cheap
        return int(args.batches or max(3, min(20, 2_000_000 // size)))

    if "sizes" in sections:
        for variant in [v.strip() for v in args.variants.split(",") if v.strip()]:
            for size in [int(s) for s in args.sizes.split(",")]:
                for executor in ("local", "spark:spark", "spark"):
                    jobs.append(
                        {
                            **base,
                            "section": "sizes",
                            "variant": variant,
                            "keys": args.keys,
                            "batch_size": size,
                            "batches": batches(size),
                            "multi_partition_ratio": VARIANTS[variant],
                            "executor": executor,
                            "master": "local[2]",
                        }
                    )
    if "scaling" in sections:
        common = {
            **base,
            "variant": "partitioned",
            "keys": args.keys,
            "batch_size": args.scaling_size,
            "batches": batches(args.scaling_size),
            "multi_partition_ratio": 0.0,
        }
        jobs.append({**common, "section": "scaling-local", "executor": "local", "master": "-"})
        for cores in (1, 2):
            jobs.append(
                {
                    **common,
                    "section": "scaling",
                    "executor": "spark:spark",
                    "master": f"local[{cores}]",
                    "partitions": cores,
                }
            )
    if "budget" in sections:
        for variant in ("random", "partitioned"):
            common = {
                **base,
                "variant": variant,
                "keys": 10_000_000,
                "batch_size": 5_000_000,
                "batches": 2,
                "multi_partition_ratio": VARIANTS[variant],
            }
            jobs.append({**common, "section": "budget", "executor": "local", "master": "-"})
            jobs.append(
                {
                    **common,
                    "section": "budget",
                    "executor": "spark",
                    "master": "local[2]",
                    "memory_budget": 1 << 30,
                }
            )
    return jobs


def markdown(rows: list[dict[str, Any]], projection: dict[str, Any] | None) -> str:
    lines = [
        "# streamdi Spark executor benchmark",
        "",
        f"Machine: {platform.machine()}, {multiprocessing.cpu_count()} cores, Python "
        f"{platform.python_version()}. Streaming Ledger; latency per batch after the first.",
        "",
        "| section | variant | executor | master | txns/batch | p50 ms | p99 ms | txn/s | "
        "verified | strategy | breakdown ms |",
        "|---|---|---|---|---:|---:|---:|---:|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(
                f"| {r.get('section')} | {r.get('variant')} | {r['executor']} | {r.get('master')} "
                f"| {r['batch_size']:,} | failed: {r['error']} | | | | | |"
            )
            continue
        parts = ", ".join(f"{k[:-3]} {v:.0f}" for k, v in r["breakdown_ms"].items() if v)
        lines.append(
            f"| {r.get('section')} | {r.get('variant')} | {r['executor']} | {r.get('master')} | "
            f"{r['batch_size']:,} | {r['p50_batch_ms']:.1f} | {r['p99_batch_ms']:.1f} | "
            f"{r['txn_per_s']:,.0f} | {r.get('verified')} | {r['strategy']} | {parts} |"
        )
    if projection:
        lines += ["", "## Scaling", "", "```", json.dumps(projection, indent=2), "```"]
    return "\n".join(lines) + "\n"


def _run(args: argparse.Namespace, settings: StreamdiSettings) -> int:
    rows: list[dict[str, Any]] = []
    for job in _jobs(args):
        started = time.perf_counter()
        row = run_isolated(job, args.timeout)
        row["wall_s"] = time.perf_counter() - started
        rows.append(row)
        _verify(rows)
        print(render([row]).splitlines()[-1], flush=True)
    _verify(rows)
    projection = scaling(rows)
    print()
    print(render(rows))
    if projection:
        print()
        print(json.dumps(projection, indent=2))
    if args.json:
        write_json({"results": rows, "scaling": projection}, args.json)
        if args.json != "-":
            Path(args.json).with_suffix(".md").write_text(
                markdown(rows, projection), encoding="utf-8"
            )
    failed = any("error" in r or r.get("verified") is False for r in rows)
    return EXIT_FAILED if failed else EXIT_OK


def register(benches: Commands) -> None:
    bench = benches.add_parser(
        "spark",
        help="the Spark executor against local: batch sizes, scaling, memory budget",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    bench.add_argument(
        "--section", default="sizes,scaling,budget", help="sizes, scaling, budget (comma-separated)"
    )
    bench.add_argument(
        "--sizes",
        default="10000,100000,1000000,10000000",
        help="transactions per batch (comma-separated)",
    )
    bench.add_argument(
        "--variants", default="partitioned,random", help="SL variants: partitioned, random"
    )
    bench.add_argument("--keys", type=int, default=1_000_000, help="accounts (and assets)")
    bench.add_argument(
        "--batches",
        type=int,
        help="batches per run, the first warming up (default: 20 for small batches, 3 for big)",
    )
    bench.add_argument(
        "--scaling-size", type=int, default=2_000_000, help="transactions per batch for scaling"
    )
    bench.add_argument("--udf-cost-ns", type=int, default=0, help="busy work per operation (ns)")
    bench.add_argument("--seed", type=int, default=0, help="workload seed")
    bench.add_argument("--timeout", type=float, default=3600, help="seconds per configuration")
    bench.add_argument("--json", metavar="PATH", help="write JSON (and Markdown beside it)")
    bench.set_defaults(handler=_run)
