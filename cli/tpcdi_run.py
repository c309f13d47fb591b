"""``streamdi tpcdi run`` and ``streamdi tpcdi stream`` (registered under ``streamdi tpcdi``).

* ``run`` — the whole TPC-DI run (:mod:`tpcdi.run.job`): generate or read, initialization,
  historical load on Spark, the incremental updates through the stream (DIGen's two, or with
  ``--days N`` a daily feed, paced with ``--day-seconds S``, audited every ``--audit-every K``
  days), audit; a report with per-phase wall times, rows and freshness, per-day freshness per
  warehouse and where the time went, TPC_DI_RPS, peak memory; ``--json PATH``, ``--png PATH``
  (and ``<PATH stem>-days.png`` for the days).
* ``stream`` — Batch1's trades, cash transactions and holdings as an event stream through the
  incremental dataflow after the dimensions are loaded (:mod:`tpcdi.run.streaming`).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from cli.commands import EXIT_FAILED, EXIT_OK, EXIT_USAGE, write_json
from streamdi.errors import StreamdiError
from streamdi.settings import StreamdiSettings

#: ``streamdi tpcdi phase`` steps (tpcdi.run.resume.PHASE_ACTIONS, not imported at start-up).
_PHASE_ACTIONS = ("begin", "end", "visibility", "audit")
_TARGETS = {"duckdb": ("duckdb",), "postgres": ("postgres",), "both": ("duckdb", "postgres")}


def _quiet_clients(args: argparse.Namespace) -> None:
    """kafka-python and py4j log every connection at INFO; the run's own lines say enough."""
    if not getattr(args, "verbose", False):
        for name in ("kafka", "py4j"):
            logging.getLogger(name).setLevel(logging.WARNING)


def _run(args: argparse.Namespace, settings: StreamdiSettings) -> int:
    from tpcdi.run import phases
    from tpcdi.run.report_file import save_report

    _quiet_clients(args)
    from tpcdi.run.job import RunOptions, run_tpcdi

    if args.sf is not None and args.data is not None:
        print("streamdi tpcdi run: give --sf or --data, not both", file=sys.stderr)
        return EXIT_USAGE
    if args.sf is not None and not args.sf > 0:
        print(f"streamdi tpcdi run: --sf must be > 0, got {args.sf}", file=sys.stderr)
        return EXIT_USAGE
    from tpcdi.generator.scale import MAX_DAYS

    if args.days is not None and not 1 <= args.days <= MAX_DAYS:
        print(f"streamdi tpcdi run: --days must be within 1..{MAX_DAYS}", file=sys.stderr)
        return EXIT_USAGE
    if args.day_seconds is not None and not args.day_seconds > 0:
        print("streamdi tpcdi run: --day-seconds must be > 0", file=sys.stderr)
        return EXIT_USAGE
    if args.audit_every < 0:
        print("streamdi tpcdi run: --audit-every must be >= 0", file=sys.stderr)
        return EXIT_USAGE
    options = RunOptions(
        sf=args.sf,
        data=Path(args.data) if args.data else None,
        targets=_TARGETS[args.target],  # type: ignore[arg-type]
        spark_master=args.spark_master,
        seed=args.seed,
        json_path=args.json,
        png_path=args.png,
        progress=not args.no_progress,
        workdir=Path(args.workdir) if args.workdir else None,
        executor=args.executor,
        upgrade_between=args.upgrade_between,
        days=args.days,
        day_seconds=args.day_seconds,
        audit_every=args.audit_every,
        stop_after=args.stop_after,
    )
    try:
        record = run_tpcdi(options, settings)
    except StreamdiError as exc:
        print(f"streamdi tpcdi run: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if options.stop_after is not None:
        historical = record.phases.get("historical")
        seconds = f" in {historical.seconds:.1f} s" if historical is not None else ""
        print(f"streamdi tpcdi run: stopped after the {options.stop_after} load{seconds}")
        return EXIT_OK
    out = sys.stderr if args.json == "-" else sys.stdout
    document = phases.report(record, args.json, args.png, out)
    workdir = options.workdir or settings.streamdi.state_dir / "tpcdi"
    save_report(workdir, document)  # for --serve (GET /console/report), now or later
    if record.feed is not None:
        from tpcdi.run.feed_report import draw_feed_chart, feed_chart_path, format_feed

        out.write(format_feed(record.feed) + "\n")
        chart = feed_chart_path(args.png)
        if chart is not None:
            sf = f"SF {record.sf:g}, " if record.sf is not None else ""
            draw_feed_chart(record.feed, chart, f"TPC-DI {sf}{'+'.join(record.targets)}: ")
            out.write(f"days chart: {chart}\n")
    if args.json == "-":
        write_json(document, "-")
    _memory_lines(record, out)
    for target, result in list(record.audits.items())[1:]:
        out.write(f"audit on {target}: {result.ok} OK, {result.fail} FAIL\n")
        for check in result.failed():
            out.write(f"  FAIL {check.name}: {check.detail}\n")
    if args.serve:
        from tpcdi.run.serve import serve

        return serve(
            settings,
            workdir,
            options.targets,
            executor=options.executor,
            version=2 if options.upgrade_between else 1,
        )
    passed = bool(record.audits) and all(a.passed for a in record.audits.values())
    return EXIT_OK if passed else EXIT_FAILED


def _memory_lines(record: Any, out: Any) -> None:
    """Where the memory went: the peak by part and of the historical load, and the largest
    piece the facts moved into the warehouse in."""
    parts = record.memory.get("parts") or {}
    phases = record.memory.get("phases") or {}
    if parts:
        text = (
            "  by part: this process {process:,.0f} MB, the Spark driver's JVM {spark:,.0f} MB, "
            "other children (broker) {children:,.0f} MB, PostgreSQL {postgres:,.0f} MB; "
            "historical load {h:,.0f} MB\n"
        )
        out.write(text.format(h=phases.get("historical", 0.0), **{"spark": 0.0, **parts}))
    historical = record.phases.get("historical")
    largest = historical.details.get("pieces", {}).get("largest") if historical else None
    if largest:
        out.write(
            f"  facts moved in pieces; the largest: {largest['rows']:,} rows of "
            f"{largest['table']} ({largest['bytes'] / (1 << 20):,.1f} MB)\n"
        )


def _phase(args: argparse.Namespace, settings: StreamdiSettings) -> int:
    from tpcdi.run.resume import run_phase_step

    _quiet_clients(args)
    try:
        audits = run_phase_step(
            args.action,
            args.batch,
            settings,
            Path(args.workdir),
            _TARGETS[args.target],
            data=Path(args.data) if args.data else None,
            crash_at=args.crash_at,
        )
    except StreamdiError as exc:
        print(f"streamdi tpcdi phase: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if audits is None:
        return EXIT_OK
    if args.json:
        write_json(audits, args.json)
    for target, verdicts in audits.items():
        print(f"audit on {target}: {verdicts['ok']} OK, {verdicts['fail']} FAIL")
        for check in verdicts["checks"]:
            if not check["ok"]:
                print(f"  FAIL {check['name']}: {check['detail']}")
    return EXIT_OK if all(v["fail"] == 0 for v in audits.values()) else EXIT_FAILED


def _stream(args: argparse.Namespace, settings: StreamdiSettings) -> int:
    from tpcdi.run.streaming import StreamOptions, stream_tpcdi

    _quiet_clients(args)

    options = StreamOptions(
        sf=args.sf,
        data=Path(args.data) if args.data else None,
        seed=args.seed,
        limit=args.limit,
        progress=not args.no_progress,
        workdir=Path(args.workdir) if args.workdir else None,
        executor=args.executor,
        spark_master=args.spark_master,
        rate=args.rate,
    )
    try:
        report = stream_tpcdi(options, settings)
    except StreamdiError as exc:
        print(f"streamdi tpcdi stream: {exc}", file=sys.stderr)
        return EXIT_FAILED
    data = report.as_json()
    print(report.summary())
    if args.json:
        write_json(data, args.json)
    return EXIT_OK


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sf", type=float, help="generate a data set at this scale factor")
    parser.add_argument(
        "--data",
        help="DIGen output: a staging area (Batch1..3) or an archive of one (default: "
        "TPCDI__DIGEN_DATA, else ../shared/tpcdi)",
    )
    parser.add_argument("--seed", type=int, default=0, help="generator seed (with --sf)")
    parser.add_argument("--spark-master", help="Spark master (default SPARK__MASTER, local[2])")
    parser.add_argument(
        "--executor",
        choices=("local", "serial", "spark"),
        help="engine executor (default ENGINE__EXECUTOR)",
    )
    parser.add_argument("--workdir", help="run files (default <STREAMDI__STATE_DIR>/tpcdi)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("--json", metavar="PATH", help="write the result as JSON ('-': stdout)")


def register(sub: Any) -> None:
    """Add ``run`` and ``stream`` to the ``streamdi tpcdi`` subcommands."""
    run = sub.add_parser(
        "run",
        help="the TPC-DI run: historical load on Spark, incremental updates through the stream, "
        "audit, report",
        description="Initialization, historical load (Spark), the incremental updates (DIGen's "
        "two, or a daily feed with --days) through Kafka, the engine, staging and migration, and "
        "the audit; prints per-phase wall times, rows, freshness (per day and warehouse), "
        "TPC_DI_RPS and peak memory.",
    )
    _common(run)
    run.add_argument(
        "--target",
        choices=sorted(_TARGETS),
        default="duckdb",
        help="warehouse: duckdb (default), postgres (POSTGRES__DSN or embedded) or both",
    )
    run.add_argument(
        "--png",
        metavar="PATH",
        help="write the chart here, and the days' chart (freshness, time by where, sizes, "
        "memory) as <PATH stem>-days.png",
    )
    run.add_argument(
        "--days",
        type=int,
        help="incremental batches (days) to run: with --sf a daily feed of this many days is "
        "generated (default 2, DIGen's Batch2 and Batch3); with --data the first this many",
    )
    run.add_argument(
        "--day-seconds",
        type=float,
        metavar="S",
        help="offer one day every S seconds (default: each day as soon as the one before ended)",
    )
    run.add_argument(
        "--audit-every",
        type=int,
        default=0,
        metavar="K",
        help="also audit the warehouse (every target) after every K-th day (default 0: only "
        "after the last)",
    )
    run.add_argument("--serve", action="store_true", help="keep the query API up after the run")
    run.add_argument(
        "--stop-after",
        choices=("historical",),
        help="end after this phase: 'historical' leaves the loaded warehouse and the seeded "
        "staging file in the workdir for the incremental updates to run under streamdi serve, "
        "their phases driven by 'streamdi tpcdi phase'",
    )
    run.add_argument(
        "--upgrade-between",
        action="store_true",
        help="upgrade the incremental dataflow between the two updates (DimCustomer gains "
        "displayname, a new customer_changes sink; docs/evolution.md)",
    )
    run.set_defaults(handler=_run)
    phase = sub.add_parser(
        "phase",
        help="one step of an incremental phase of a run whose updates go through streamdi "
        "serve (begin, end, visibility, audit); safe to run again after a kill",
        description="The bookkeeping of the incremental phases when the updates run under "
        "streamdi serve (after 'streamdi tpcdi run --stop-after historical'): 'end B' the "
        "Prospect messages, a last Visibility_2, the batch validation and the PCR of phase B "
        "('end 1' completes the historical load); 'begin B' its Phase started row (and the first "
        "Visibility_1); 'visibility B' a Visibility_2; 'audit B' the final Visibility_1, the "
        "answer keys and the audit. Run them with serve stopped and the warehouses merged "
        "(streamdi migrate push --merge). Each writes its rows once per target: run again "
        "after a kill, it completes what is missing.",
    )
    phase.add_argument("action", choices=_PHASE_ACTIONS)
    phase.add_argument("batch", type=int, help="the phase's BatchID (1: historical, 2..: updates)")
    phase.add_argument("--workdir", required=True, help="the run's files (its --workdir)")
    phase.add_argument("--data", help="the run's staging area (end: BatchDate; audit: answer keys)")
    phase.add_argument(
        "--target",
        choices=sorted(_TARGETS),
        default="duckdb",
        help="the run's warehouse(s): duckdb (default), postgres (POSTGRES__DSN) or both",
    )
    phase.add_argument("--json", metavar="PATH", help="audit: write the verdicts as JSON")
    phase.add_argument("--crash-at", help=argparse.SUPPRESS)  # fault injection (tpcdi.run.resume)
    phase.set_defaults(handler=_phase)
    stream = sub.add_parser(
        "stream",
        help="Batch1's trades, cash and holdings as an event stream through the incremental "
        "dataflow; events/s and latency",
    )
    _common(stream)
    stream.add_argument("--limit", type=int, help="stream at most this many events")
    stream.add_argument(
        "--rate", type=float, help="offer at most this many events per second (default: all)"
    )
    stream.set_defaults(handler=_stream)
