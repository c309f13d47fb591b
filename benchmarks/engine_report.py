"""The engine benchmark's runs summarized: medians and spreads, the text and Markdown reports, and
the figures table of the documentation regenerated from a result file.

``streamdi bench engine --repeat N`` runs every (app, key layout, executor) case N times, the
executors interleaved (run 1 of each, then run 2 of each, ...), so a change in the machine's load
falls on every executor alike. :func:`summarize` turns a case's runs into one record: the median
of each figure, its spread (minimum, maximum, quartiles) and the load averages the runs saw.

``streamdi bench engine-table RESULT.json`` prints the figures table (apps by executors, median
transactions/s with the runs' range), with the command that measured it and the load average;
``--update FILE`` writes it into FILE between the lines ``<!-- engine-table:begin -->`` and
``<!-- engine-table:end -->`` (``docs/benchmarks.md`` holds the one the documentation quotes).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import platform
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from cli.commands import EXIT_FAILED, EXIT_OK, EXIT_USAGE, Commands
from streamdi.settings import StreamdiSettings

BEGIN = "<!-- engine-table:begin -->"
END = "<!-- engine-table:end -->"

#: Figures summarized as median and spread over a case's runs.
SPREAD_FIGURES = ("txn_per_s", "ops_per_s", "cpu_txn_per_s", "p50_batch_ms", "p99_batch_ms")

#: Case identity in a result record.
CASE_KEYS = ("app", "key_layout", "executor")

APP_TITLES = {"sl": "SL", "gs": "GS", "tp": "TP", "ob": "OB"}


def spread(values: list[float]) -> dict[str, float]:
    """Median, minimum, maximum and quartiles of ``values`` (at least one)."""
    array = np.asarray(values, dtype=np.float64)
    q1, median, q3 = np.percentile(array, [25, 50, 75])
    return {
        "median": float(median),
        "min": float(array.min()),
        "max": float(array.max()),
        "q1": float(q1),
        "q3": float(q3),
    }


def summarize(runs: list[dict[str, Any]], oracle: str | None) -> dict[str, Any]:
    """One case's record from its runs (records of :func:`benchmarks.engine.run_one`, each with
    ``load_before``/``load_after``): every figure of :data:`SPREAD_FIGURES` as its median under
    its own name plus ``<figure>_min``, ``_max``, ``_q1``, ``_q3`` and ``_runs`` (the values in
    run order); ``peak_mem_mb`` the largest; ``verified`` True when every run's digest equals
    ``oracle``, False when one differs, None without an oracle; ``error`` the first failed
    run's error (the case then fails even if other runs succeeded)."""
    first = runs[0]
    record: dict[str, Any] = {key: first[key] for key in CASE_KEYS if key in first}
    good = [r for r in runs if "error" not in r]
    failed = [r for r in runs if "error" in r]
    record["runs"] = len(runs)
    if failed:
        record["error"] = failed[0]["error"]
        record["failed_runs"] = len(failed)
    loads = [r["load_before"][0] for r in runs if "load_before" in r]
    loads += [r["load_after"][0] for r in runs if "load_after" in r]
    if loads:
        record["load_1m_min"], record["load_1m_max"] = min(loads), max(loads)
    if not good:
        return record
    for figure in SPREAD_FIGURES:
        values = [float(r.get(figure, 0.0)) for r in good]
        stats = spread(values)
        record[figure] = stats["median"]
        for name in ("min", "max", "q1", "q3"):
            record[f"{figure}_{name}"] = stats[name]
        record[f"{figure}_runs"] = values
    record["first_batch_ms"] = spread([float(r["first_batch_ms"]) for r in good])["median"]
    record["transactions"] = good[0]["transactions"]
    record["operations"] = good[0]["operations"]
    record["peak_mem_mb"] = max(float(r["peak_mem_mb"]) for r in good)
    strategies: Counter[str] = Counter()
    for r in good:
        for part in r["strategy"].split(", "):
            name, _, count = part.rpartition(" x")
            if name:
                strategies[name] += int(count)
    record["strategy"] = ", ".join(f"{s} x{c}" for s, c in strategies.most_common()) or "-"
    digests = {r["digest"] for r in good}
    record["digests"] = sorted(digests)
    if oracle is None:
        record["verified"] = None
    else:
        record["verified"] = digests == {oracle} and not failed
    return record


def _rate(value: float) -> str:
    """Transactions/s as the documentation writes them: 4.02 M, 0.49 M, 22 k."""
    if value >= 1e5:
        return f"{value / 1e6:.2f} M" if value < 1e7 else f"{value / 1e6:.1f} M"
    if value >= 1e3:
        return f"{value / 1e3:.0f} k"
    return f"{value:.0f}"


def _range(low: float, high: float) -> str:
    """A range of rates, the unit written once when both share it: 3.90-4.30 M, 21-23 k."""
    lo, hi = _rate(low), _rate(high)
    lo_number, _, lo_unit = lo.partition(" ")
    hi_number, _, hi_unit = hi.partition(" ")
    if lo_unit == hi_unit:
        return f"{lo_number}-{hi_number}{' ' + hi_unit if hi_unit else ''}"
    return f"{lo}-{hi}"


def _load(values: list[float] | None) -> str:
    return " ".join(f"{v:.2f}" for v in values) if values else "-"


def render(results: list[dict[str, Any]]) -> str:
    """The text table of case records (median and range over the runs)."""
    header = (
        f"{'app':<4} {'keys':<10} {'executor':<16} {'runs':>4} {'txn/s':>11} "
        f"{'min-max':>17} {'txn/CPU-s':>11} {'p50 ms':>8} {'p99 ms':>8} {'peak MB':>8} "
        f"{'load':>9}  {'ok':<3} strategy"
    )
    lines = [header, "-" * len(header)]
    for r in results:
        case = f"{r['app']:<4} {r.get('key_layout', 'sequential'):<10} {r['executor']:<16}"
        if "txn_per_s" not in r:
            lines.append(f"{case} FAILED: {r.get('error', 'no result')}")
            continue
        ok = {True: "yes", False: "NO", None: "-"}[r.get("verified")]
        span = f"{r['txn_per_s_min']:,.0f}-{r['txn_per_s_max']:,.0f}"
        load = f"{r.get('load_1m_min', 0):.1f}-{r.get('load_1m_max', 0):.1f}"
        lines.append(
            f"{case} {r['runs']:>4} {r['txn_per_s']:>11,.0f} {span:>17} "
            f"{r['cpu_txn_per_s']:>11,.0f} "
            f"{r['p50_batch_ms']:>8.2f} {r['p99_batch_ms']:>8.2f} {r['peak_mem_mb']:>8.0f} "
            f"{load:>9}  {ok:<3} {r['strategy']}"
        )
        if "error" in r:
            lines.append(f"{'':<32} {r['failed_runs']} run(s) FAILED: {r['error']}")
    return "\n".join(lines)


def markdown(document: dict[str, Any]) -> str:
    """The full Markdown report of a result document (every case, every spread)."""
    results: list[dict[str, Any]] = document["results"]
    rows = [
        "| app | keys | executor | runs | txn/s median | min | max | IQR | txn/CPU-s "
        "| p50 batch ms | p99 batch ms | peak MB | load 1 min | verified | strategy |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|",
    ]
    for r in results:
        case = f"| {r['app']} | {r.get('key_layout', 'sequential')} | {r['executor']} |"
        if "txn_per_s" not in r:
            rows.append(f"{case} {r['runs']} | failed: {r.get('error')} |" + " |" * 11)
            continue
        iqr = r["txn_per_s_q3"] - r["txn_per_s_q1"]
        rows.append(
            f"{case} {r['runs']} | {r['txn_per_s']:,.0f} | {r['txn_per_s_min']:,.0f} | "
            f"{r['txn_per_s_max']:,.0f} | {iqr:,.0f} | {r['cpu_txn_per_s']:,.0f} | "
            f"{r['p50_batch_ms']:.2f} | "
            f"{r['p99_batch_ms']:.2f} | {r['peak_mem_mb']:.0f} | "
            f"{r.get('load_1m_min', 0):.2f}-{r.get('load_1m_max', 0):.2f} | "
            f"{r.get('verified')} | {r['strategy']} |"
        )
    machine = document.get("machine", {})
    return (
        "# streamdi engine benchmark\n\n"
        f"Command: `{document.get('command', 'streamdi bench engine')}`.\n"
        f"Machine: {machine.get('arch', platform.machine())}, "
        f"{machine.get('cores', multiprocessing.cpu_count())} cores, "
        f"Python {machine.get('python', platform.python_version())}. "
        f"Load average (1, 5, 15 min) before {_load(document.get('load_before'))}, "
        f"after {_load(document.get('load_after'))}.\n"
        f"Knobs: `{json.dumps(document.get('knobs', {}), sort_keys=True)}`; "
        f"{document.get('repeat', 1)} runs per case, the executors interleaved.\n\n"
        "Throughput counts every batch after the first (which compiles); each figure is the "
        "median over the runs, with its range; txn/CPU-s divides by the CPU time the process "
        "used over the same intervals (all its threads): what it did with the cores it got. "
        "Peak memory is the largest peak resident set of a process that ran the case.\n\n"
        + "\n".join(rows)
        + "\n"
    )


def figures_table(document: dict[str, Any]) -> str:
    """The documentation's figures table: one row per app (and key layout when there are
    several), one column per executor, each cell the median transactions/s with the range of
    the runs; under it the command, the runs and the load average."""
    results: list[dict[str, Any]] = document["results"]
    executors: list[str] = []
    rows: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for r in results:
        if r["executor"] not in executors:
            executors.append(r["executor"])
        rows.setdefault((r["app"], r.get("key_layout", "sequential")), {})[r["executor"]] = r
    layouts = {layout for _, layout in rows}
    lines = [
        "| app | " + " | ".join(executors) + " |",
        "|---|" + "---:|" * len(executors),
    ]
    for (app_name, layout), cells in rows.items():
        title = APP_TITLES.get(app_name, app_name)
        if len(layouts) > 1:
            title = f"{title} ({layout})"
        out = []
        for executor in executors:
            cell = cells.get(executor)
            if cell is None:
                out.append("")
            elif "txn_per_s" not in cell:
                out.append("failed")
            else:
                mark = "" if cell.get("verified") is not False else " (differs from serial)"
                span = _range(cell["txn_per_s_min"], cell["txn_per_s_max"])
                out.append(f"{_rate(cell['txn_per_s'])} ({span}){mark}")
        lines.append(f"| {title} | " + " | ".join(out) + " |")
    knobs = document.get("knobs", {})
    measured = max(int(knobs.get("batches", 1)) - 1, 1)
    machine = document.get("machine", {})
    when = document.get("started_at", "")
    note = (
        f"Transactions/s, median of {document.get('repeat', 1)} runs per cell (the executors "
        f"interleaved; each run {measured} batches of {knobs.get('batch_size', '?'):,} "
        f"transactions after a warm-up batch) with the runs' range; "
        f"{machine.get('cores', '?')} cores, load average (1, 5, 15 min) "
        f"{_load(document.get('load_before'))} before and {_load(document.get('load_after'))} "
        f"after{', ' + when[:16].replace('T', ' ') + ' UTC' if when else ''}. Generated by "
        "`streamdi bench engine-table` from the result of:"
    )
    command = document.get("command", "streamdi bench engine")
    note = textwrap.fill(note, width=100, break_on_hyphens=False)
    return "\n".join(lines) + f"\n\n{note}\n\n```sh\n{command}\n```\n"


def update_marked(text: str, block: str) -> str:
    """``text`` with the lines between :data:`BEGIN` and :data:`END` replaced by ``block``
    (ValueError if the markers are missing or out of order)."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < 0 or end < start:
        raise ValueError(f"no {BEGIN} ... {END} block")
    head = text[: start + len(BEGIN)]
    return f"{head}\n{block.rstrip()}\n{text[end:]}"


def _table(args: argparse.Namespace, settings: StreamdiSettings) -> int:
    document = json.loads(Path(args.result).read_text(encoding="utf-8"))
    if "results" not in document:
        print(f"{args.result}: not a result of streamdi bench engine (no 'results')")
        return EXIT_USAGE
    table = figures_table(document)
    if args.update is None:
        print(table, end="")
        return EXIT_OK
    path = Path(args.update)
    try:
        path.write_text(update_marked(path.read_text(encoding="utf-8"), table), encoding="utf-8")
    except ValueError as exc:
        print(f"{path}: {exc}")
        return EXIT_FAILED
    print(f"updated the engine table in {path}")
    return EXIT_OK


def register(benches: Commands) -> None:
    table = benches.add_parser(
        "engine-table",
        help="the engine figures table from a result of `streamdi bench engine --json`",
        description=__doc__.split("\n\n")[2] if __doc__ else None,
    )
    table.add_argument("result", help="the JSON `streamdi bench engine --json PATH` wrote")
    table.add_argument(
        "--update",
        metavar="FILE",
        help="replace the table between the engine-table markers in FILE (e.g. docs/benchmarks.md)",
    )
    table.set_defaults(handler=_table)
