"""``streamdi bench engine-steps``: where the milliseconds of a batch go, step by step.

Runs one benchmark app on one executor in this process, batch after batch (``run_batch``: no
second thread, so the steps add up), with a timer around each of the engine's per-batch steps
(:data:`STEPS`, the local executor's). Prints the time per batch of every step, inclusive (a
step's line includes the lines indented under it): its median over the batches after the first
two (which compile), and its mean; beside them the batches' own median and mean, and the load
average before and after. Medians resist the pauses of a shared machine; they need not add up.

The timers wrap the steps by name, so this knows the executor's internals: it is a profiling
aid for the engine's developers, and a step that is renamed drops out of the table (it is
reported as missing rather than failing the run; a step that did not run in a batch counts 0
there).
"""

from __future__ import annotations

import argparse
import importlib
import os
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np

from cli.commands import EXIT_OK, Commands, write_json
from streamdi.settings import StreamdiSettings

#: (depth, module, qualified name, label): the steps timed, in the order they run.
STEPS: tuple[tuple[int, str, str, str], ...] = (
    (0, "etl_dataflows.executors.base", "BaseExecutor.prepare_batch", "prepare (stateless)"),
    (1, "etl_dataflows.executors.base", "prepare_source", "check and cast the source"),
    (1, "etl_dataflows.executors.local.compiled_step", "CompiledStep.hoist", "hoist expressions"),
    (0, "etl_dataflows.executors.base", "BaseExecutor.run_prepared", "run (stateful)"),
    (1, "etl_dataflows.executors.local.compiled_step", "CompiledStep.bind", "bind keys to slots"),
    (2, "etl_dataflows.executors.local.arrays", "ArrayTable.slots", "key index"),
    (2, "etl_dataflows.executors.local.arrays", "ArrayTable.remember", "remember before-values"),
    (1, "etl_dataflows.executors.local.executor", "LocalExecutor._decide", "choose a strategy"),
    (1, "etl_dataflows.executors.local.compiled_step", "CompiledStep.execute", "execute"),
    (1, "etl_dataflows.executors.local.compiled_step", "CompiledStep.finish", "finish"),
    (2, "etl_dataflows.executors.local.compiled_step", "CompiledStep._aborts", "abort table"),
    (2, "etl_dataflows.executors.local.compiled_step", "CompiledStep._output", "output rows"),
    (1, "etl_dataflows.executors.local.executor", "LocalExecutor.end_batch", "end batch"),
    (2, "etl_dataflows.executors.local.arrays", "ArrayTable.end_batch", "table deltas"),
    (3, "etl_dataflows.executors.local.arrays", "ArrayTable.image_rows", "image rows"),
    (4, "etl_dataflows.executors.local.arrays", "ArrayTable._in_key_order", "key order"),
    (2, "etl_dataflows.executors.serial", "SerialExecutor.end_batch", "serial part's deltas"),
)


def _wrap(owner: Any, name: str, totals: dict[str, float], label: str) -> Callable[[], None]:
    original = getattr(owner, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            totals[label] += time.perf_counter() - started

    setattr(owner, name, timed)
    return lambda: setattr(owner, name, original)


def _instrument(totals: dict[str, float]) -> tuple[list[Callable[[], None]], list[str]]:
    undo, missing = [], []
    for _, module_name, qualified, _label in STEPS:
        owner: Any = importlib.import_module(module_name)
        *path, name = qualified.split(".")
        try:
            for part in path:
                owner = getattr(owner, part)
            getattr(owner, name)
        except AttributeError:
            missing.append(f"{module_name}.{qualified}")
            continue
        undo.append(_wrap(owner, name, totals, qualified))
    return undo, missing


def measure(app_name: str, executor: str, knobs: dict[str, Any]) -> dict[str, Any]:
    """Time ``knobs['batches']`` batches of one app (the first two not counted)."""
    from etl_dataflows.apps import AppKnobs, app
    from etl_dataflows.executors import create_executor

    chosen = app(app_name)
    options = dict(knobs)
    extra = {**chosen.defaults, **options.pop("extra", {})}
    app_knobs = AppKnobs(**options, extra=extra)
    batches = chosen.batches(app_knobs)
    runner = create_executor(executor, chosen.dataflow(app_knobs), chosen.initial_state(app_knobs))
    totals: dict[str, float] = defaultdict(float)
    undo, missing = _instrument(totals)
    load_before = list(os.getloadavg())
    seconds: list[float] = []
    per_batch: list[dict[str, float]] = []
    try:
        for index, batch in enumerate(batches):
            totals.clear()
            started = time.perf_counter()
            runner.run_batch(batch)
            if index >= 2:
                seconds.append(time.perf_counter() - started)
                per_batch.append(dict(totals))
    finally:
        for restore in undo:
            restore()
        runner.close()
    steps = []
    for depth, module_name, qualified, label in STEPS:
        times = [batch.get(qualified, 0.0) * 1e3 for batch in per_batch] or [0.0]
        if f"{module_name}.{qualified}" not in missing:
            steps.append(
                {
                    "depth": depth,
                    "step": qualified,
                    "label": label,
                    "median_ms": float(np.median(times)),
                    "mean_ms": float(np.mean(times)),
                }
            )
    return {
        "app": app_name,
        "executor": executor,
        "knobs": knobs,
        "batches_counted": len(seconds),
        "batch_ms_median": float(np.median(seconds)) * 1e3 if seconds else 0.0,
        "batch_ms_mean": float(np.mean(seconds)) * 1e3 if seconds else 0.0,
        "steps": steps,
        "missing": missing,
        "load_before": load_before,
        "load_after": list(os.getloadavg()),
    }


def render(result: dict[str, Any]) -> str:
    lines = [
        f"{result['app']} on {result['executor']}: {result['batches_counted']} batches, "
        f"median {result['batch_ms_median']:.2f} ms, mean {result['batch_ms_mean']:.2f} ms a batch",
        f"  {'step (inclusive), ms a batch':<34} {'median':>7} {'mean':>7}",
    ]
    for step in result["steps"]:
        indent = "  " * step["depth"]
        lines.append(
            f"  {indent}{step['label']:<{34 - len(indent)}} {step['median_ms']:7.3f} "
            f"{step['mean_ms']:7.3f}"
        )
    if result["missing"]:
        lines.append(f"  (not found: {', '.join(result['missing'])})")
    load = " ".join(f"{v:.2f}" for v in result["load_before"])
    after = " ".join(f"{v:.2f}" for v in result["load_after"])
    lines.append(f"load average (1, 5, 15 min): before {load}, after {after}")
    return "\n".join(lines)


def _run(args: argparse.Namespace, settings: StreamdiSettings) -> int:
    knobs: dict[str, Any] = {
        "keys": args.keys,
        "batch_size": args.batch_size,
        "batches": args.batches + 2,
        "key_layout": args.key_layout,
        "seed": args.seed,
        "extra": {},
    }
    result = measure(args.app, args.executor, knobs)
    print(render(result))
    if args.json:
        write_json(result, args.json)
    return EXIT_OK


def register(benches: Commands) -> None:
    bench = benches.add_parser(
        "engine-steps",
        help="where a batch's milliseconds go, step by step (one app, one executor)",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    bench.add_argument("--app", default="sl", help="sl, gs, tp or ob")
    bench.add_argument("--executor", default="local", help="an executor name (local:<strategy>)")
    bench.add_argument("--keys", type=int, default=10_000, help="records per table")
    bench.add_argument("--batch-size", type=int, default=10_240, help="transactions per batch")
    bench.add_argument("--batches", type=int, default=200, help="batches counted")
    bench.add_argument("--key-layout", default="sequential", help="sequential, random, ...")
    bench.add_argument("--seed", type=int, default=0, help="workload seed")
    bench.add_argument("--json", metavar="PATH", help="write the figures as JSON")
    bench.set_defaults(handler=_run)
