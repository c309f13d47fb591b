"""``streamdi demo``: the engine demo (the main job until the TPC-DI job exists)."""

from __future__ import annotations

import argparse
import sys

from cli.commands import EXIT_OK, EXIT_USAGE, Commands, write_json
from streamdi.settings import StreamdiSettings


def _demo(args: argparse.Namespace, settings: StreamdiSettings) -> int:
    from etl_dataflows.demo import run_demo
    from etl_dataflows.testing.workload import WorkloadSpec

    try:
        spec = WorkloadSpec(
            keys=args.keys,
            theta=args.theta,
            batch_size=args.batch_size,
            batches=args.batches,
            abort_ratio=args.abort_ratio,
            seed=args.seed,
        )
    except ValueError as exc:
        print(f"streamdi demo: {exc}", file=sys.stderr)
        return EXIT_USAGE
    report = run_demo(spec, args.executor or settings.engine.executor)
    if args.json:
        write_json(report.as_dict(), args.json)
    if args.json != "-":
        print(report.render())
    return EXIT_OK


def register(commands: Commands) -> None:
    demo = commands.add_parser(
        "demo",
        help="run the engine on a generated ledger workload and print a report",
        description="Run a generated Streaming-Ledger-like workload through an executor and "
        "print transactions, commits, aborts, throughput and batch latency.",
    )
    demo.add_argument("--executor", help="executor name (default: ENGINE__EXECUTOR)")
    demo.add_argument("--keys", type=int, default=10_000, help="number of accounts")
    demo.add_argument("--theta", type=float, default=0.6, help="Zipf skew of account keys")
    demo.add_argument("--batch-size", type=int, default=10_240, help="transactions per batch")
    demo.add_argument("--batches", type=int, default=5, help="number of batches")
    demo.add_argument("--abort-ratio", type=float, default=0.01, help="share of aborting txns")
    demo.add_argument("--seed", type=int, default=0, help="workload seed")
    demo.add_argument("--json", metavar="PATH", help="also write the report as JSON ('-': stdout)")
    demo.set_defaults(handler=_demo)
