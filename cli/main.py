"""The ``streamdi`` command line.

Each stage contributes its own subcommands: a module listed in :data:`COMMAND_MODULES` exposes
``register(commands)``, which adds argparse subparsers whose ``handler(args, settings) -> int`` runs
the command. Handlers import their heavy dependencies lazily, so ``streamdi --help`` stays fast.

Exit codes: 0 success, 1 a failure while running, 2 bad usage or bad configuration (the message
names the setting and what it expects; a variable named like a setting that no setting reads is
bad configuration too, and so is a variable streamdi read under an older name), 3 a service the
command talks to does not answer.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence

from cli.commands import EXIT_FAILED, EXIT_USAGE
from streamdi import __version__
from streamdi.environment import renamed_settings, unknown_settings
from streamdi.errors import ConfigurationError, StreamdiError
from streamdi.logs import configure_logging
from streamdi.settings import load_settings

logger = logging.getLogger(__name__)

#: Modules that add subcommands, in the order ``--help`` lists them.
COMMAND_MODULES: tuple[str, ...] = (
    "cli.engine",
    "cli.ingest",
    "cli.migration",
    "cli.upgrade",
    "cli.serve",
    "cli.tpcdi",
    "cli.spark",
    "benchmarks.cli",
    "cli.config",
    "cli.operations",
)


#: The module of ``streamdi bench``: its benchmarks' modules import most of streamdi (the query
#: service's FastAPI, every executor), about 0.4 s of CPU that no other command needs, so they
#: are registered only when the command line runs ``bench`` or names no command (``--help``).
BENCH_MODULE = "benchmarks.cli"


def command_word(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` runs: its first word that is not an option (the top-level options
    take no value); None when there is none."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Every subcommand's parser; with ``command`` (the subcommand about to run) other than
    ``bench``, ``streamdi bench`` is registered without its benchmarks (see
    :data:`BENCH_MODULE`)."""
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
    for name in COMMAND_MODULES:
        module = importlib.import_module(name)
        if name == BENCH_MODULE:
            module.register(commands, benchmarks=command in (None, "bench"))
        else:
            module.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``streamdi`` console script."""
    parser = build_parser(command_word(sys.argv[1:] if argv is None else argv))
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        settings = load_settings()
        unknown = renamed_settings(os.environ) + unknown_settings(os.environ)
        if unknown:
            raise ConfigurationError(unknown)
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
