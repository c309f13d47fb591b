"""``streamdi upgrade plan``, ``apply`` and ``reprocess``: change a running dataflow."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from cli.commands import EXIT_FAILED, EXIT_OK, EXIT_UNAVAILABLE, Commands, write_json
from streamdi.errors import ConfigurationError
from streamdi.settings import StreamdiSettings


def _plan(args: argparse.Namespace, settings: StreamdiSettings) -> int:
    from runtime.runspec import load_run_spec
    from runtime.upgrade import plan_run

    flow = load_run_spec(args.spec).flow
    plan = plan_run(flow, settings, allow_drop=args.allow_drop)
    if args.json:
        write_json(plan.to_json(), args.json)
    if args.json != "-":
        print(plan.render())
    return EXIT_OK if plan.plan.applicable else EXIT_FAILED


def _apply(args: argparse.Namespace, settings: StreamdiSettings) -> int:
    from runtime.runspec import load_run_spec
    from runtime.upgrade import apply_upgrade

    flow = load_run_spec(args.spec).flow
    report = apply_upgrade(
        flow, settings, allow_drop=args.allow_drop, hook=_crash_hook(args.crash_at)
    )
    if args.json:
        write_json(report.to_json(), args.json)
    if args.json != "-":
        print(report.render())
    return EXIT_OK


def _reprocess(args: argparse.Namespace, settings: StreamdiSettings) -> int:
    from ingest.broker import open_broker
    from runtime.reprocess import check_request, reprocess
    from runtime.runspec import load_run_spec

    spec = load_run_spec(args.spec)
    check_request(spec, args.tables)  # before a broker starts
    with open_broker(settings.kafka, settings.streamdi.state_dir) as broker:
        report = reprocess(
            spec,
            settings,
            broker,
            args.tables,
            start=args.start,
            reoffer=args.reoffer,
            hook=_crash_hook(args.crash_at),
        )
    if args.json:
        write_json(report.to_json(), args.json)
    if args.json != "-":
        print(report.render())
    return EXIT_OK if report.cut_over else EXIT_UNAVAILABLE


#: Where ``upgrade apply --crash-at`` can kill the process (kill -9 tests; see
#: :mod:`staging.upgrade` and :mod:`migration.evolution`).
CRASH_PHASES = (
    "converted",
    "switching",
    "switched",
    "target-switching",
    # upgrade reprocess (runtime.reprocess)
    "caught-up",
    "committed",
    "pushed",
)


def _crash_hook(phase: str | None) -> Callable[[str], None] | None:
    from runtime.faults import kill_self

    if phase is None:
        return None
    if phase not in CRASH_PHASES:
        raise ConfigurationError([("--crash-at", f"one of {CRASH_PHASES}")])

    def hook(reached: str) -> None:
        if reached == phase:
            kill_self()

    return hook


def register(commands: Commands) -> None:
    upgrade = commands.add_parser(
        "upgrade",
        help="plan or apply a change of a dataflow over its live state",
        description="Compare a changed dataflow with the version staging (and each warehouse) "
        "holds, and switch to it at a batch boundary, keeping every row. See docs/evolution.md.",
    )
    actions = upgrade.add_subparsers(dest="action", metavar="ACTION", required=True)
    plan = actions.add_parser(
        "plan",
        help="list every change, typed, and whether it applies in place (exit 1: it does not)",
    )
    apply = actions.add_parser(
        "apply",
        help="switch staging, then every reachable warehouse, to the new dataflow (no pipeline "
        "may be running on the staging file)",
    )
    for parser in (plan, apply):
        parser.add_argument("spec", help="module:attribute naming the new Dataflow or RunSpec")
        parser.add_argument(
            "--allow-drop",
            action="store_true",
            help="let removed tables and columns be dropped from staging (warehouses keep them)",
        )
    plan.add_argument("--json", metavar="PATH", help="write the plan as JSON ('-': stdout)")
    plan.set_defaults(handler=_plan)
    apply.add_argument("--json", metavar="PATH", help="write the report as JSON ('-': stdout)")
    apply.add_argument("--crash-at", help=argparse.SUPPRESS)  # fault injection (kill -9 tests)
    apply.set_defaults(handler=_apply)
    again = actions.add_parser(
        "reprocess",
        help="recompute state tables and sinks from the retained input with the dataflow as it "
        "is now, in a shadow, then cut over in one batch (exit 3: a pipeline runs on staging; "
        "the shadow caught up, run again once it stopped)",
    )
    again.add_argument("spec", help="module:attribute naming the Dataflow or RunSpec staged now")
    again.add_argument(
        "tables", nargs="+", metavar="NAME", help="state tables and sinks to recompute"
    )
    again.add_argument(
        "--from",
        dest="start",
        default="start",
        metavar="start|BATCH|TIME",
        help="replay from the first record (default; a seeded staging file: from its seed), or "
        "recompute batch BATCH on / the batches after TIME (ISO 8601, UTC) from the newest "
        "checkpoint before it (STAGING__CHECKPOINT_EVERY_S)",
    )
    again.add_argument(
        "--reoffer",
        action="store_true",
        help="read the streams the run spec binds to an input (a file) from that input again, "
        "up to what staging applied, instead of from Kafka (its records are gone, or to replay "
        "from the source); needs the pipeline stopped",
    )
    again.add_argument("--json", metavar="PATH", help="write the report as JSON ('-': stdout)")
    again.add_argument("--crash-at", help=argparse.SUPPRESS)  # fault injection (kill -9 tests)
    again.set_defaults(handler=_reprocess)
