"""``streamdi bench``: the benchmarks. Each module in :data:`BENCH_MODULES` exposes
``register(benches)`` adding one ``streamdi bench <name>`` subcommand."""

from __future__ import annotations

import importlib

from cli.commands import Commands

#: Modules that add ``streamdi bench`` subcommands.
BENCH_MODULES: tuple[str, ...] = (
    "benchmarks.engine",
    "benchmarks.engine_report",
    "benchmarks.engine_steps",
    "benchmarks.ingest",
    "benchmarks.broker",
    "benchmarks.migration",
    "benchmarks.bootstrap",
    "benchmarks.spark",
    "benchmarks.tpcdi",
    "benchmarks.tpcdi_scale",
    "benchmarks.audit",
    "benchmarks.union",
    "benchmarks.freshness",
    "benchmarks.upgrade",
    "benchmarks.faults",
)


def register(commands: Commands, *, benchmarks: bool = True) -> None:
    """``streamdi bench``, with a subcommand per benchmark; without ``benchmarks`` the command
    alone (the benchmarks' modules are not imported: ``cli.main`` asks for them only when the
    command line runs ``bench``)."""
    bench = commands.add_parser(
        "bench",
        help="run a benchmark (JSON and a readable report; numbers come from here)",
        description="Benchmarks measure throughput, latency, freshness and memory side by side "
        "with their baselines in one run, and write JSON plus a readable report.",
    )
    benches = bench.add_subparsers(dest="bench", metavar="BENCHMARK")
    if not benchmarks:
        return
    for name in BENCH_MODULES:
        importlib.import_module(name).register(benches)
