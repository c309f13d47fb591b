"""``streamdi bench engine``: the executors side by side on the same generated input.

For each app (Streaming Ledger, Grep&Sum, Toll Processing, Online Bidding) and each executor, a
fresh process generates the app's batches from the knobs (deterministic by seed, so every executor
sees the same input), runs them all, and reports transactions/s and operations/s (over the batches
after the first, which pays for compiling), per-batch latency p50/p99, the process's peak resident
memory, and the strategies chosen. Every run's results — outputs, aborts, dead letters, state deltas
and final state — are hashed; a run whose digest differs from the serial oracle's is marked
``verified: false``. ``local:<strategy>`` fixes the local executor's strategy (``sequential``,
``waves``) to compare the adaptive choice with each fixed one. ``--key-layout`` runs each app on
int64 keys laid out as the numbers ``0..keys-1`` (``sequential``, the default), spread at random
over int64 (``random``), or as multiples of 2**32 or 2**40 (``stride32``, ``stride40``: IDs with
zero low bits), one case per layout: a key index that hashes well runs them all at the speed of
``random``.

``--repeat N`` (default 5) runs every case N times, the executors interleaved (run 1 of each,
then run 2 of each, ...), each run in a fresh process; a case reports the median of its runs with
their range and quartiles, and the load average before and after each run
(:mod:`benchmarks.engine_report`). The machines are shared: read a figure beside its load.

Writes a table to stdout, and with ``--json PATH`` a JSON document (``results``: one record per
(app, key layout, executor) with ``app``, ``key_layout``, ``executor``, ``runs``, ``txn_per_s``,
``ops_per_s``, ``cpu_txn_per_s`` (transactions per CPU-second of the process over the same
intervals: what the engine did with the cores it got), ``p50_batch_ms``, ``p99_batch_ms``
(medians; each also with ``_min``, ``_max``, ``_q1``, ``_q3`` and ``_runs``), ``peak_mem_mb``,
``strategy``, ``verified``, ``load_1m_min``, ``load_1m_max``; ``runs``: every run's own record;
``command``, ``knobs``, ``repeat``, ``machine``, ``load_before``, ``load_after``) plus a Markdown
report beside it.
``streamdi bench engine-table PATH`` renders the documentation's figures table from it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import platform
import shlex
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.engine_report import markdown, render, summarize
from cli.commands import EXIT_FAILED, EXIT_OK, Commands, write_json
from streamdi.arrow_digest import table_digest
from streamdi.settings import StreamdiSettings

DEFAULT_EXECUTORS = ("local", "serial", "lock", "pat", "tstream")


def _peak_rss_mb() -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_one(
    app_name: str, executor: str, knobs: dict[str, Any], pipelined: bool = True
) -> dict[str, Any]:
    """Run one (app, executor) pair; meant to run in its own process. ``pipelined``: prepare
    each next batch on a second thread (:meth:`BaseExecutor.run_stream`)."""
    from etl_dataflows.apps import AppKnobs, app
    from etl_dataflows.executors import create_executor

    chosen = app(app_name)
    extra = {**chosen.defaults, **knobs.pop("extra", {})}
    app_knobs = AppKnobs(**knobs, extra=extra)
    batches = chosen.batches(app_knobs)
    flow = chosen.dataflow(app_knobs)
    runner = create_executor(executor, flow, chosen.initial_state(app_knobs))
    hasher = hashlib.sha256()
    latencies: list[float] = []
    strategies: Counter[str] = Counter()
    txns = ops = 0
    measured_seconds = cpu_seconds = 0.0
    first_ms = 0.0
    results = runner.run_stream(batches) if pipelined else map(runner.run_batch, batches)

    def digest(result: Any) -> None:
        for decision in result.decisions:
            strategies[decision.strategy] += 1
        for name in sorted(result.outputs):
            table_digest(hasher, result.outputs[name])
        table_digest(hasher, result.aborts)
        table_digest(hasher, result.dead_letters)
        for name in sorted(result.deltas):
            table_digest(hasher, result.deltas[name].upserts)
            table_digest(hasher, result.deltas[name].deletes)
        hasher.update(json.dumps(result.sequences, sort_keys=True).encode())

    try:
        # The clock runs while the engine works, not while a result is hashed (results are
        # dropped batch by batch, as a pipeline hands them on; keeping them all would measure the
        # allocator). With prepare-ahead, the next batch is prepared during the hashing, as it
        # would be during a staging commit.
        # The CPU time of the process (every thread) over the same intervals says what the
        # engine did with the cores it got, whatever else ran on the machine.
        started, cpu_started = time.perf_counter(), time.process_time()
        for index, (batch, result) in enumerate(zip(batches, results, strict=True)):
            elapsed = time.perf_counter() - started
            cpu = time.process_time() - cpu_started
            if index == 0:
                first_ms = elapsed * 1000
            else:
                latencies.append(elapsed * 1000)
                measured_seconds += elapsed
                cpu_seconds += cpu
                txns += batch.num_events
                ops += chosen.operations(batch)
            digest(result)
            started, cpu_started = time.perf_counter(), time.process_time()
        final = runner.state_image()
    finally:
        runner.close()
    for name in sorted(final.tables):
        table_digest(hasher, final.tables[name])
    if not latencies:  # a single batch: report it
        latencies = [first_ms]
        measured_seconds = cpu_seconds = first_ms / 1000
        txns = batches[0].num_events
        ops = chosen.operations(batches[0])
    return {
        "app": app_name,
        "executor": executor,
        "transactions": txns,
        "operations": ops,
        "txn_per_s": txns / measured_seconds if measured_seconds else 0.0,
        "ops_per_s": ops / measured_seconds if measured_seconds else 0.0,
        "cpu_txn_per_s": txns / cpu_seconds if cpu_seconds else 0.0,
        "p50_batch_ms": float(np.percentile(latencies, 50)),
        "p99_batch_ms": float(np.percentile(latencies, 99)),
        "first_batch_ms": first_ms,
        "peak_mem_mb": _peak_rss_mb(),
        "strategy": ", ".join(f"{s} x{c}" for s, c in strategies.most_common()) or "-",
        "digest": hasher.hexdigest(),
    }


def _child(queue: Any, app_name: str, executor: str, knobs: dict[str, Any]) -> None:
    try:
        options = dict(knobs)
        pipelined = bool(options.pop("pipelined", True))
        queue.put(run_one(app_name, executor, options, pipelined))
    except BaseException as exc:  # report the failure instead of dying silently
        queue.put({"app": app_name, "executor": executor, "error": f"{type(exc).__name__}: {exc}"})


def run_isolated(
    app_name: str, executor: str, knobs: dict[str, Any], timeout_s: float
) -> dict[str, Any]:
    """Run one pair in a fresh process (so its peak memory is its own)."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_child, args=(queue, app_name, executor, knobs))
    load_before = list(os.getloadavg())
    process.start()
    try:
        result: dict[str, Any] = queue.get(timeout=timeout_s)
    except Exception:
        process.kill()
        result = {
            "app": app_name,
            "executor": executor,
            "error": f"no result within {timeout_s:.0f} s",
        }
    process.join(10)
    result["load_before"], result["load_after"] = load_before, list(os.getloadavg())
    return result


def run_case(
    app_name: str,
    executors: list[str],
    app_knobs: dict[str, Any],
    timeout_s: float,
    repeat: int = 1,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every executor on one app and its knobs, ``repeat`` times, interleaved (run 1 of every
    executor, then run 2, ...); each checked against ``serial``'s digest when ``serial`` is among
    them. Returns one summary per executor and every run's record."""
    runs: list[dict[str, Any]] = []
    for index in range(repeat):
        for executor in executors:
            row = run_isolated(app_name, executor, dict(app_knobs), timeout_s)
            row["run"] = index + 1
            row.setdefault("key_layout", app_knobs["key_layout"])
            runs.append(row)
    oracles = {r["digest"] for r in runs if r["executor"] == "serial" and "digest" in r}
    oracle = next(iter(oracles)) if len(oracles) == 1 else None
    cases = []
    for executor in executors:
        mine = [r for r in runs if r["executor"] == executor]
        case = summarize(mine, oracle)
        if len(oracles) > 1:  # the oracle itself is not deterministic: nothing is verified
            case["verified"] = False
        case.update({k: v for k, v in app_knobs.items() if k != "extra"}, **app_knobs["extra"])
        cases.append(case)
    for row in runs:
        row["verified"] = None if oracle is None or "digest" not in row else row["digest"] == oracle
    return cases, runs


def _run(args: argparse.Namespace, settings: StreamdiSettings) -> int:
    apps = [a.strip() for a in args.app.split(",") if a.strip()]
    executors = [e.strip() for e in args.executor.split(",") if e.strip()]
    layouts = [k.strip() for k in args.key_layout.split(",") if k.strip()]
    knobs: dict[str, Any] = {
        "keys": args.keys,
        "theta": args.theta,
        "abort_ratio": args.abort_ratio,
        "batch_size": args.batch_size,
        "batches": args.batches,
        "udf_cost_ns": args.udf_cost_ns,
        "seed": args.seed,
        "extra": {},
    }
    if args.multi_partition_ratio is not None:
        knobs["multi_partition_ratio"] = args.multi_partition_ratio
    if args.transfer_ratio is not None:
        knobs["extra"]["transfer_ratio"] = args.transfer_ratio
    repeat = max(1, args.repeat)
    if args.quick:
        knobs["batches"] = min(knobs["batches"], 4)
        repeat = min(repeat, 3)
    knobs["pipelined"] = not args.no_pipeline
    document: dict[str, Any] = {
        "command": "streamdi " + shlex.join(sys.argv[1:]) if sys.argv[1:] else "streamdi bench",
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "arch": platform.machine(),
            "cores": multiprocessing.cpu_count(),
            "python": platform.python_version(),
        },
        "knobs": knobs,
        "repeat": repeat,
        "load_before": list(os.getloadavg()),
    }
    results: list[dict[str, Any]] = []
    runs: list[dict[str, Any]] = []
    for app_name in apps:
        for layout in layouts:
            app_knobs = {**knobs, "key_layout": layout, "extra": dict(knobs["extra"])}
            if app_name == "tp" and args.keys == 10_000 and args.theta == 0.6:
                app_knobs.update(keys=100, theta=0.2)  # the papers' road segments
            cases, case_runs = run_case(app_name, executors, app_knobs, args.timeout, repeat)
            results.extend(cases)
            runs.extend(case_runs)
            print(render(cases), flush=True)
    document.update(results=results, runs=runs, load_after=list(os.getloadavg()))
    before, after = (
        " ".join(f"{v:.2f}" for v in document[k]) for k in ("load_before", "load_after")
    )
    print(f"load average (1, 5, 15 min): before {before}, after {after}; {repeat} run(s) per case")
    if args.json:
        write_json(document, args.json)
        if args.json != "-":
            Path(args.json).with_suffix(".md").write_text(markdown(document), encoding="utf-8")
    failed = any("error" in r or r.get("verified") is False for r in results)
    return EXIT_FAILED if failed else EXIT_OK


def register(benches: Commands) -> None:
    bench = benches.add_parser(
        "engine",
        help="the executors side by side on the benchmark apps",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    bench.add_argument(
        "--app", default="sl,gs,tp,ob", help="apps: sl, gs, tp, ob (comma-separated)"
    )
    bench.add_argument(
        "--executor",
        default=",".join(DEFAULT_EXECUTORS),
        help="executors (comma-separated); local:sequential / local:waves fix local's strategy, "
        "spark:spark / spark:supersteps / spark:driver the Spark executor's placement",
    )
    bench.add_argument("--keys", type=int, default=10_000, help="records per table")
    bench.add_argument("--theta", type=float, default=0.6, help="Zipf skew of key access")
    bench.add_argument("--abort-ratio", type=float, default=0.01, help="share of aborting txns")
    bench.add_argument("--batch-size", type=int, default=10_240, help="transactions per batch")
    bench.add_argument(
        "--batches", type=int, default=21, help="batches per run (the first warms up)"
    )
    bench.add_argument(
        "--repeat",
        type=int,
        default=5,
        help="runs per case, the executors interleaved (median and range reported)",
    )
    bench.add_argument("--udf-cost-ns", type=int, default=0, help="busy work per operation (ns)")
    bench.add_argument("--transfer-ratio", type=float, help="SL: share of transfers (default 0.5)")
    bench.add_argument("--multi-partition-ratio", type=float, help="share of cross-partition txns")
    bench.add_argument("--seed", type=int, default=0, help="workload seed")
    bench.add_argument(
        "--key-layout",
        default="sequential",
        help="int64 keys as sequential numbers, random, or multiples of 2**32 / 2**40 "
        "(sequential, random, stride32, stride40; comma-separated: one case each)",
    )
    bench.add_argument("--timeout", type=float, default=1800, help="seconds per (app, executor)")
    bench.add_argument(
        "--quick", action="store_true", help="a short run (4 batches, at most 3 runs per case)"
    )
    bench.add_argument(
        "--no-pipeline", action="store_true", help="run batch after batch (no prepare-ahead)"
    )
    bench.add_argument(
        "--json", metavar="PATH", help="write JSON (and a Markdown report beside it)"
    )
    bench.set_defaults(handler=_run)
