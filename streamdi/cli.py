"""The ``streamdi`` command line.

Exit codes: 0 success, 1 a failure while running, 2 bad usage or bad configuration (the message
names the setting and what it expects).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from streamdi import __version__
from streamdi.errors import ConfigurationError, StreamdiError
from streamdi.logs import configure_logging
from streamdi.settings import StreamdiSettings, load_settings, masked_settings

logger = logging.getLogger(__name__)

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _write_json(data: Any, path: str) -> None:
    text = json.dumps(data, indent=2, sort_keys=True)
    if path == "-":
        print(text)
    else:
        Path(path).write_text(text + "\n", encoding="utf-8")


def _cmd_demo(args: argparse.Namespace, settings: StreamdiSettings) -> int:
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
    executor = args.executor or settings.engine.executor
    report = run_demo(spec, executor)
    if args.json:
        _write_json(report.as_dict(), args.json)
    if args.json != "-":
        print(report.render())
    return EXIT_OK


def _cmd_config_show(args: argparse.Namespace, settings: StreamdiSettings) -> int:
    data = masked_settings(settings)
    if args.json:
        _write_json(data, "-")
        return EXIT_OK
    for section, values in data.items():
        for name, value in values.items():
            env = f"{section}__{name}".upper()
            print(f"{env}={'' if value is None else value}")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="streamdi",
        description="Streaming ETL into a warehouse: Kafka ingest, a transactional dataflow "
        "engine, durable migration into PostgreSQL and DuckDB, union queries over fresh and "
        "historical data.",
    )
    parser.add_argument("--version", action="version", version=f"streamdi {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    parser.add_argument("-q", "--quiet", action="store_true", help="log warnings and errors only")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

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
    demo.add_argument(
        "--abort-ratio", type=float, default=0.01, help="share of aborting transactions"
    )
    demo.add_argument("--seed", type=int, default=0, help="workload seed")
    demo.add_argument(
        "--json", metavar="PATH", help="also write the report as JSON ('-' for stdout)"
    )
    demo.set_defaults(handler=_cmd_demo)

    config = commands.add_parser("config", help="inspect the configuration")
    config_commands = config.add_subparsers(dest="config_command", metavar="SUBCOMMAND")
    show = config_commands.add_parser(
        "show", help="print the effective configuration (secrets masked)"
    )
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(handler=_cmd_config_show)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``streamdi`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        settings = load_settings()
    except ConfigurationError as exc:
        print(f"streamdi: {exc}", file=sys.stderr)
        return EXIT_USAGE
    level = "DEBUG" if args.verbose else "WARNING" if args.quiet else settings.streamdi.log_level
    configure_logging(level, settings.streamdi.log_format)
    try:
        result: int = handler(args, settings)
        return result
    except ConfigurationError as exc:
        print(f"streamdi: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except StreamdiError as exc:
        logger.error("command failed: %s", exc)
        print(f"streamdi: {exc}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
