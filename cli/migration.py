"""``streamdi migrate push|pull|status``: migration from the command line.

The command opens the staging file itself, so it works when no pipeline is running; while a
pipeline holds the file (DuckDB allows one writing process) it refuses with a clear message: that
pipeline migrates by itself (``MIGRATION__*``), and the query service will add HTTP control.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Any

from cli.commands import EXIT_FAILED, EXIT_OK, Commands, write_json
from streamdi.errors import ConfigurationError
from streamdi.settings import MIGRATION_TARGETS, StreamdiSettings

CRASH_PHASES = (
    "copy",
    "loaded",
    "rejects",
    "committed",
    "acked",
    "merge",
    "merged",
    *("bootstrap-copy", "bootstrap-table", "bootstrap-ledger", "bootstrapped"),
)


def _crash_hook(text: str | None) -> Any:
    """``PHASE:TARGET[:N]``: SIGKILL this process the N-th time (default 1) ``TARGET`` reaches
    ``PHASE`` (fault injection for the crash tests)."""
    if not text:
        return None
    parts = text.split(":")
    if (
        len(parts) not in (2, 3)
        or parts[0] not in CRASH_PHASES
        or parts[1] not in MIGRATION_TARGETS
    ):
        raise ConfigurationError([("--crash-at", f"PHASE:TARGET[:N] with PHASE in {CRASH_PHASES}")])
    phase, target = parts[0], parts[1]
    limit = int(parts[2]) if len(parts) == 3 else 1
    seen = {"n": 0}

    def hook(at: str, name: str) -> None:
        if at == phase and name == target:
            seen["n"] += 1
            if seen["n"] == limit:
                sys.stdout.flush()
                os.kill(os.getpid(), signal.SIGKILL)

    return hook


def _targets(args: argparse.Namespace, settings: StreamdiSettings) -> list[str]:
    configured = list(settings.migration.target_names)
    if not configured:
        raise ConfigurationError(
            [("MIGRATION__TARGETS", "a comma-separated list of postgres, duckdb (nothing to do)")]
        )
    chosen = args.target or configured
    unknown = [t for t in chosen if t not in configured]
    if unknown:
        raise ConfigurationError(
            [("--target", f"one of the configured MIGRATION__TARGETS {configured} (got {unknown})")]
        )
    return list(dict.fromkeys(chosen))


def _open(args: argparse.Namespace, settings: StreamdiSettings) -> Any:
    from migration.exceptions import StagingBusy
    from migration.migrator import Migrator, build_targets
    from migration.schema import WarehouseLayout
    from runtime.runspec import load_run_spec
    from staging.exceptions import StagingInUse
    from staging.handoff import StagedDeltas
    from staging.store import StagingStore

    configured = list(settings.migration.target_names)
    names = _targets(args, settings)
    flow = load_run_spec(args.spec).flow
    try:
        store = StagingStore(
            settings.staging_path,
            flow,
            memory_limit=settings.staging.memory_limit,
            threads=settings.staging.threads,
        )
    except StagingInUse as exc:
        raise StagingBusy(str(settings.staging_path)) from exc
    layout = WarehouseLayout(flow, settings.migration.schema_name, history=store.history)
    migrator = Migrator(
        StagedDeltas(store),
        build_targets(settings, layout, configured),
        settings.migration,
        release_targets=configured,
        hook=_crash_hook(getattr(args, "crash_at", None)),
    )
    return store, migrator, names


def _move(args: argparse.Namespace, settings: StreamdiSettings) -> int:
    via = args.migrate_command
    store, migrator, names = _open(args, settings)
    try:
        merge = (
            "force"
            if args.merge
            else "never"
            if args.no_merge
            else ("force" if via == "pull" else "auto")
        )
        report = migrator.migrate(names, via=via, merge=merge)
    finally:
        migrator.close()
        store.close()
    for name, r in report.targets.items():
        if r.error is not None:
            print(f"streamdi migrate {via}: {name}: NOT migrated: {r.error}", file=sys.stderr)
            continue
        if r.bootstrap is not None:
            print(f"streamdi migrate {via}: {name}: {bootstrap_line(r.bootstrap.as_dict())}")
        merged = (
            f", merged {r.merge.rows:,} rows through batch {r.merge.through}" if r.merge else ""
        )
        print(
            f"streamdi migrate {via}: {name}: batches {r.start + 1}..{r.watermark} "
            f"({r.batches} new, {r.rows:,} rows in {r.loads} loads){merged}"
            if r.batches
            else f"streamdi migrate {via}: {name}: up to date at batch {r.watermark}{merged}"
        )
    print(
        f"streamdi migrate {via}: staged watermark {report.staged_watermark}, released through "
        f"{report.released_through}, {report.seconds:.2f} s"
    )
    if args.json:
        from api.responses import MigrationRound

        write_json(MigrationRound.of(via, report).model_dump(), args.json)
    return EXIT_FAILED if report.failed else EXIT_OK


def _status(args: argparse.Namespace, settings: StreamdiSettings) -> int:
    store, migrator, _ = _open(args, settings)
    try:
        status = migrator.status()
    finally:
        migrator.close()
        store.close()
    push = set(settings.migration.push_targets)
    for name, entry in status["targets"].items():
        entry["mode"] = "push" if name in push else "pull"
    if args.json:
        write_json(status, args.json)
        return EXIT_OK
    print(
        f"stream {status['stream']}: staged through batch {status['staged_watermark']}, "
        f"released through {status['released_through']}"
    )
    for name, e in status["targets"].items():
        if not e["reachable"]:
            print(
                f"  {name} ({e['mode']}): UNREACHABLE: {e['error']}; "
                f"acknowledged {e['acknowledged']}"
            )
            continue
        print(
            f"  {name} ({e['mode']}): holds batches through {e['watermark']} "
            f"({e['pending_batches']} pending), merged through {e['merged_through']}, "
            f"{e['unmerged_rows']:,} unmerged rows, acknowledged {e['acknowledged']}"
        )
        boot = e.get("bootstrap")
        if boot is not None:
            print(f"    {bootstrap_line(boot)}")
            for relation, r in boot["relations"].items() if boot["state"] != "caught_up" else ():
                where = f" at batch {r['through']} from {r['source']}" if r["done"] else ""
                state = "copied" if r["done"] else "copying" if r["rows"] else "waiting"
                print(f"      {relation}: {state}, {r['rows']:,} rows{where}")
    return EXIT_OK


def bootstrap_line(b: dict[str, Any]) -> str:
    """One line about a target's bootstrap (``BootstrapProgress.as_dict``)."""
    done = f"{b['relations_copied']} of {b['relations_total']} relations"
    at = f"staging batch {b['through']}" if b["through"] is not None else "a staging snapshot"
    peer = (
        f"; sinks from {b['peer']} through batch {b['peer_watermark']}"
        if b["peer"] is not None
        else ""
    )
    if b.get("method") == "file" and b["peer"] is not None and b["state"] != "copying":
        peer = f"; a copy of {b['peer']}'s file at batch {b['peer_watermark']}"
    gap = (
        f"; sink rows of batches 1..{b['sinks_from'] - 1} NOT available (released from staging "
        "before it was added, and no peer target held them)"
        if b["sinks_from"] > 1
        else ""
    )
    took = f" in {b['seconds']:.1f} s" if b["seconds"] else ""
    head = {
        "copying": f"BOOTSTRAPPING: {done} copied ({b['rows']:,} rows) at {at}",
        "failed": f"BOOTSTRAP STOPPED ({b['error']}; it resumes): {done} copied at {at}",
        "loaded": f"bootstrapped at {at} ({b['rows']:,} rows{took}), catching up: not read by "
        "queries yet",
        "caught_up": f"bootstrapped at {at} ({b['rows']:,} rows{took}), caught up",
    }[b["state"]]
    return head + peer + gap


def register(commands: Commands) -> None:
    migrate = commands.add_parser(
        "migrate",
        help="move staged deltas into the warehouses (PostgreSQL, DuckDB), exactly once",
        description="Push or pull the deltas staging holds into MIGRATION__TARGETS: each target "
        "loads them into delta tables with a ledger row per batch in one transaction, merges "
        "them into its full tables, and staging releases what every target acknowledged. Works "
        "when no pipeline runs; a running pipeline migrates by itself.",
    )
    sub = migrate.add_subparsers(dest="migrate_command", metavar="SUBCOMMAND")
    for name, text in (
        ("push", "send every pending batch to the targets now (merge when due)"),
        ("pull", "the targets take every pending batch now and merge it (as when idle)"),
    ):
        cmd = sub.add_parser(name, help=text, description=text)
        cmd.add_argument("spec", help="module:attribute naming the Dataflow or RunSpec")
        cmd.add_argument(
            "--target", action="append", choices=MIGRATION_TARGETS, help="only this target"
        )
        group = cmd.add_mutually_exclusive_group()
        group.add_argument("--merge", action="store_true", help="merge into the full tables")
        group.add_argument("--no-merge", action="store_true", help="leave the deltas unmerged")
        cmd.add_argument(
            "--json", metavar="PATH", help="also write the round as JSON ('-': stdout)"
        )
        cmd.add_argument("--crash-at", help=argparse.SUPPRESS)  # fault injection (crash tests)
        cmd.set_defaults(handler=_move)
    status = sub.add_parser("status", help="what each target holds and what staging still has")
    status.add_argument("spec", help="module:attribute naming the Dataflow or RunSpec")
    status.add_argument(
        "--target", action="append", choices=MIGRATION_TARGETS, help="only this target"
    )
    status.add_argument("--json", metavar="PATH", help="write JSON instead ('-': stdout)")
    status.set_defaults(handler=_status)
