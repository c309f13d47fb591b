"""``streamdi serve``: the pipeline, the migration and the REST query service in one process."""

from __future__ import annotations

import argparse
import logging

from cli.commands import Commands
from cli.ingest import add_upgrade_options, crash_at, upgrade_before_start
from streamdi.settings import StreamdiSettings


def _serve(args: argparse.Namespace, settings: StreamdiSettings) -> int:
    from runtime.pipeline import PipelineOptions
    from runtime.runspec import load_run_spec
    from runtime.serve import serve

    if not args.verbose:
        logging.getLogger("kafka").setLevel(logging.WARNING)
    spec = load_run_spec(args.spec)
    if args.upgrade:
        upgrade_before_start(spec.flow, settings, allow_drop=args.allow_drop)
    options = PipelineOptions(
        executor=args.executor or settings.engine.executor,
        collect=True,
        progress=args.progress,
        drain_s=settings.ingest.drain_s,
    )
    return serve(
        spec,
        settings,
        options,
        host=args.host or settings.api.host,
        port=args.port if args.port is not None else settings.api.port,
        faults=crash_at(args.crash_at),
    )


def register(commands: Commands) -> None:
    serve = commands.add_parser(
        "serve",
        help="run the pipeline, the migration and the REST query service in one process",
        description="Consume and stage the dataflow's streams (files bound to it, or events "
        "POSTed to /streams/<stream>/events), migrate into MIGRATION__TARGETS, and answer union "
        "queries over staged and migrated data on API__HOST:API__PORT (127.0.0.1:8000 by "
        "default; OpenAPI docs at /docs). SIGTERM or Ctrl-C stops the server, then the pipeline "
        "(which consumes what Kafka holds for up to INGEST__DRAIN_S, commits, and pushes what is "
        "pending), then the embedded broker and PostgreSQL.",
    )
    serve.add_argument("spec", help="module:attribute naming a Dataflow or a RunSpec")
    serve.add_argument("--host", help="bind address (default: API__HOST)")
    serve.add_argument("--port", type=int, help="bind port (default: API__PORT)")
    serve.add_argument("--executor", help="executor name (default: ENGINE__EXECUTOR)")
    serve.add_argument("--progress", action="store_true", help="print the pipeline's live line")
    add_upgrade_options(serve)
    serve.add_argument("--crash-at", help=argparse.SUPPRESS)  # fault injection (runtime.faults)
    serve.set_defaults(handler=_serve)
