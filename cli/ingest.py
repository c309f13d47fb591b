"""``streamdi run``, ``streamdi collect``, ``streamdi broker``, ``streamdi deadletters`` and
``streamdi streams repair``."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cli.commands import EXIT_FAILED, EXIT_OK, EXIT_USAGE, Commands, write_json
from streamdi.errors import ConfigurationError
from streamdi.settings import StreamdiSettings

if TYPE_CHECKING:
    from ingest.broker import BrokerHandle


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()

    def handler(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return stop


def crash_at(text: str | None) -> Any:
    """The :class:`runtime.faults.CrashAt` of a hidden ``--crash-at POINT:N`` (None without);
    ``--crash-at @FILE``: a :class:`runtime.faults.CrashAtFile` armed by that file."""
    from runtime.faults import CrashAt, CrashAtFile, parse_crash_at

    if not text:
        return None
    if text.startswith("@"):
        return CrashAtFile(Path(text[1:]))
    try:
        return CrashAt(*parse_crash_at(text))
    except ValueError as exc:
        raise ConfigurationError([("--crash-at", str(exc))]) from exc


def add_upgrade_options(parser: argparse.ArgumentParser) -> None:
    """``--upgrade`` and ``--allow-drop`` of ``run`` and ``serve``."""
    parser.add_argument(
        "--upgrade",
        action="store_true",
        help="if the dataflow changed since staging was written, switch staging and every "
        "warehouse to it before starting (streamdi upgrade apply)",
    )
    parser.add_argument(
        "--allow-drop", action="store_true", help="with --upgrade: let removed tables be dropped"
    )


def upgrade_before_start(flow: Any, settings: StreamdiSettings, *, allow_drop: bool) -> None:
    """Apply an upgrade to the run's staging file (if it exists) and its warehouses."""
    from runtime.upgrade import apply_upgrade

    if not settings.staging_path.exists():
        return
    report = apply_upgrade(flow, settings, allow_drop=allow_drop)
    print(f"streamdi: {report.render()}", file=sys.stderr)


def _run(args: argparse.Namespace, settings: StreamdiSettings) -> int:
    from runtime.broker_watch import watched_broker
    from runtime.pipeline import Pipeline, PipelineOptions
    from runtime.runspec import load_run_spec

    if not args.verbose:
        logging.getLogger("kafka").setLevel(logging.WARNING)
    spec = load_run_spec(args.spec)
    if args.upgrade:
        upgrade_before_start(spec.flow, settings, allow_drop=args.allow_drop)
    _configure_spark(settings, args.spark_master)
    options = PipelineOptions(
        executor=args.executor or settings.engine.executor,
        until_idle_s=args.until_idle,
        max_batches=args.max_batches,
        collect=not args.no_collect,
        progress=not args.no_progress,
    )
    faults = crash_at(args.crash_at)
    stop = _stop_on_signals()
    with watched_broker(settings.kafka, settings.streamdi.state_dir) as watch:
        broker = watch.handle
        if broker.embedded:
            print(
                f"streamdi: embedded Apache Kafka at {broker.bootstrap_servers} "
                f"(its log: {settings.streamdi.state_dir / 'kafka'})",
                file=sys.stderr,
            )
        report = Pipeline(spec, settings, broker, options, faults=faults).run(stop)
    print(
        f"streamdi run: {report.batches} batches, {report.events:,} events, "
        f"{report.dead_letters:,} dead letters in {report.seconds:.1f} s; "
        f"commit p50 {report.percentile(50):.0f} ms, p99 {report.percentile(99):.0f} ms",
        file=sys.stderr if args.json == "-" else sys.stdout,
    )
    if args.json:
        write_json(
            {
                "dataflow": spec.flow.name,
                "batches": report.batches,
                "events": report.events,
                "records": report.records,
                "dead_letters": report.dead_letters,
                "commits": report.commits,
                "seconds": report.seconds,
                "resumed_from": report.resumed_from,
                "commit_p50_ms": report.percentile(50),
                "commit_p99_ms": report.percentile(99),
            },
            args.json,
        )
    return EXIT_OK


def _configure_spark(settings: StreamdiSettings, master: str | None) -> None:
    """The Spark executor's session as the settings say (``--spark-master`` beats
    ``SPARK__MASTER``); nothing starts until a batch needs Spark."""
    from etl_dataflows.executors.spark import config_from_settings, configure_spark

    if master is not None and not (master.startswith("local") or master.startswith("spark://")):
        raise ConfigurationError(
            [
                (
                    "--spark-master",
                    f"expected local, local[N], local[*] or spark://host:port (got {master!r})",
                )
            ]
        )
    configure_spark(config_from_settings(settings, master))


def _collect(args: argparse.Namespace, settings: StreamdiSettings) -> int:
    from ingest.broker import open_broker

    with open_broker(settings.kafka, settings.streamdi.state_dir) as broker:
        return _collect_into(args, settings, broker)


def _collect_into(
    args: argparse.Namespace, settings: StreamdiSettings, broker: BrokerHandle
) -> int:
    from ingest.broker import ensure_topics
    from ingest.collector import BatchCollector
    from ingest.eventtime import EventTimeBounds
    from runtime.runspec import load_run_spec

    bootstrap = broker.bootstrap_servers
    spec = load_run_spec(args.spec)
    streams = [s for s, b in spec.streams.items() if b.input is not None]
    if args.stream:
        streams = [s for s in streams if s in args.stream]
    if not streams:
        print("streamdi collect: no stream of this run has an input to collect", file=sys.stderr)
        return EXIT_USAGE
    ensure_topics(
        settings.kafka, bootstrap, {spec.topic(s): spec.streams[s].partitions for s in streams}
    )
    stop = _stop_on_signals()
    faults = crash_at(getattr(args, "crash_at", None))
    reports = []
    for stream in streams:
        source = spec.streams[stream].input
        assert source is not None
        report = BatchCollector(
            stream=stream,
            topic=spec.topic(stream),
            source=source,
            kafka=settings.kafka,
            bootstrap=bootstrap,
            log_id=broker.log_id,
            checkpoint_dir=settings.streamdi.state_dir / "collector" / spec.flow.name,
            batch_events=settings.ingest.batch_events,
            batch_ms=settings.ingest.batch_ms,
            buffer_bytes=settings.ingest.producer_buffer_bytes,
            event_times=EventTimeBounds.from_settings(settings.ingest),
            hook=None if faults is None else faults.collector_hook(stream),
        ).run(stop)
        print(
            f"streamdi collect: {stream}: batches {report.first_batch}..."
            f"{report.first_batch + report.batches - 1}, {report.events:,} events, "
            f"{report.rejects:,} rejects, {report.records:,} records in {report.seconds:.1f} s",
            file=sys.stderr if args.json == "-" else sys.stdout,
        )
        reports.append(
            {
                "stream": stream,
                "first_batch": report.first_batch,
                "batches": report.batches,
                "events": report.events,
                "rejects": report.rejects,
                "records": report.records,
                "seconds": report.seconds,
            }
        )
    if args.json:
        write_json(reports, args.json)
    return EXIT_OK


def _broker(args: argparse.Namespace, settings: StreamdiSettings) -> int:
    from ingest.broker import EmbeddedKafka
    from ingest.class_archive import build_class_archive
    from ingest.kafka_dist import KAFKA_VERSION, kafka_jars

    if args.fetch_only:
        folder = kafka_jars(settings.kafka)
        print(f"Apache Kafka {KAFKA_VERSION}'s jars are in {folder}", flush=True)
        archive = build_class_archive(settings.kafka)
        if archive is not None:
            print(f"its class archive (faster starts) is {archive}", flush=True)
        return EXIT_OK
    stop = _stop_on_signals()
    broker = EmbeddedKafka(settings.streamdi.state_dir, settings.kafka, port=args.port)
    broker.start()
    print(f"KAFKA__BOOTSTRAP_SERVERS={broker.bootstrap_servers}", flush=True)
    print(
        f"streamdi broker: Apache Kafka {KAFKA_VERSION} (pid {broker.pid}), its log in "
        f"{broker.log_dir}; stop it with Ctrl-C or SIGTERM.",
        file=sys.stderr,
        flush=True,
    )
    try:
        while not stop.is_set() and broker.alive():
            stop.wait(0.5)
    finally:
        broker.stop()
    return EXIT_OK if stop.is_set() else EXIT_FAILED


def _deadletters_list(args: argparse.Namespace, settings: StreamdiSettings) -> int:
    from runtime.runspec import load_run_spec
    from staging.store import StagingStore

    spec = load_run_spec(args.spec)
    with StagingStore(settings.staging_path, spec.flow, read_only=True) as store:
        table = store.dead_letters(stream=args.stream, pending_only=args.pending, limit=args.limit)
    rows = table.to_pylist()
    if args.json:
        lines = [json.dumps(_export(row), default=str) for row in rows]
        text = "\n".join(lines) + ("\n" if lines else "")
        if args.json == "-":
            sys.stdout.write(text)
        else:
            Path(args.json).write_text(text, encoding="utf-8")
            print(f"wrote {len(rows)} dead letters to {args.json}")
        return EXIT_OK
    print(
        f"{'id':>6} {'batch':>6} {'stream':<12} {'step':<10} {'where':<24} {'pos':>8} "
        f"{'kept':<15} reason"
    )
    for row in rows:
        where = f"{row['topic']}:{row['partition']}@{row['offset']}"
        replayed = f" (replayed in batch {row['replayed_in']})" if row["replayed_in"] else ""
        size = row.get("payload_bytes")
        kept = f"{row.get('encoding') or 'legacy'} {'?' if size is None else size} B"
        print(
            f"{row['id']:>6} {row['batch_id']:>6} {row['stream']!s:<12} {row['step']:<10} "
            f"{where:<24} {row['pos']!s:>8} {kept:<15} {row['reason']}{replayed}"
        )
    print(f"{len(rows)} dead letters")
    return EXIT_OK


def _export(row: dict[str, Any]) -> dict[str, Any]:
    from staging.dead_letters import dead_letter_view

    return dead_letter_view(row)


def _deadletters_replay(args: argparse.Namespace, settings: StreamdiSettings) -> int:
    from ingest.broker import open_broker
    from ingest.deadletters import replay_file
    from runtime.runspec import load_run_spec

    spec = load_run_spec(args.spec)
    with open_broker(settings.kafka, settings.streamdi.state_dir) as broker:
        sent, refused = replay_file(
            spec.stream_topics(), settings.kafka, broker.bootstrap_servers, Path(args.file)
        )
    for line, reason in refused:
        print(f"line {line}: not re-offered: {reason}", file=sys.stderr)
    print(
        f"re-offered {sent} events ({len(refused)} refused)",
        file=sys.stderr if args.json == "-" else sys.stdout,
    )
    if args.json:
        write_json(
            {"sent": sent, "refused": [{"line": n, "reason": r} for n, r in refused]}, args.json
        )
    return EXIT_OK if not refused else EXIT_FAILED


def _streams_repair(args: argparse.Namespace, settings: StreamdiSettings) -> int:
    from ingest.eventtime import EventTimeBounds
    from ingest.repair import repair_high_mark
    from runtime.runspec import load_run_spec
    from staging.store import StagingStore

    spec = load_run_spec(args.spec)
    streams = args.stream or list(spec.flow.sources)
    bounds = EventTimeBounds.from_settings(settings.ingest)
    with StagingStore(settings.staging_path, spec.flow) as store:
        reports = [
            repair_high_mark(
                store, stream, bounds, to_us=args.to, reset=args.reset, dry_run=args.dry_run
            )
            for stream in streams
        ]
    for report in reports:
        print(report.text(), file=sys.stderr if args.json == "-" else sys.stdout)
    if args.json:
        write_json(
            [
                {
                    "stream": r.stream,
                    "before": r.before,
                    "after": r.after,
                    "changed": r.changed,
                    "why": r.why,
                }
                for r in reports
            ],
            args.json,
        )
    return EXIT_OK


def register(commands: Commands) -> None:
    run = commands.add_parser(
        "run",
        help="run ingest -> engine -> staging for a dataflow (module:attribute)",
        description="Consume the dataflow's topics (and collect its bound inputs into them), run "
        "the engine batch by batch and commit each batch to staging exactly once. SIGTERM or "
        "Ctrl-C finishes the batch in hand, commits it and exits.",
    )
    run.add_argument("spec", help="module:attribute naming a Dataflow or a RunSpec (runtime.bind)")
    run.add_argument("--executor", help="executor name (default: ENGINE__EXECUTOR)")
    run.add_argument(
        "--spark-master",
        metavar="URL",
        help="Spark master of the spark executor: local[N] or spark://host:port "
        "(default: SPARK__MASTER)",
    )
    run.add_argument(
        "--until-idle",
        type=float,
        metavar="SECONDS",
        help="stop after this long with nothing to do",
    )
    run.add_argument("--max-batches", type=int, help="stop after this many engine batches")
    run.add_argument(
        "--no-collect", action="store_true", help="do not run the collectors of bound inputs"
    )
    run.add_argument("--no-progress", action="store_true", help="no live progress line")
    run.add_argument("--json", metavar="PATH", help="also write the report as JSON ('-': stdout)")
    add_upgrade_options(run)
    run.add_argument("--crash-at", help=argparse.SUPPRESS)  # fault injection for the crash tests
    run.set_defaults(handler=_run)

    collect = commands.add_parser(
        "collect",
        help="collect a run's bound inputs into Kafka (the embedded broker unless "
        "KAFKA__BOOTSTRAP_SERVERS)",
        description="Read each bound input, cut logical batches and produce them; resumable "
        "after a crash without producing a batch twice.",
    )
    collect.add_argument("spec", help="module:attribute naming a RunSpec")
    collect.add_argument("--stream", action="append", help="only this stream (repeatable)")
    collect.add_argument(
        "--json", metavar="PATH", help="also write the per-stream reports as JSON ('-': stdout)"
    )
    collect.add_argument("--crash-at", help=argparse.SUPPRESS)  # fault injection (collect-*)
    collect.set_defaults(handler=_collect)

    broker = commands.add_parser(
        "broker",
        help="run the embedded broker (Apache Kafka) until stopped",
        description="Start the state directory's embedded Apache Kafka on 127.0.0.1 (or reuse "
        "the one running there) and print its address; its log stays in <state_dir>/kafka.",
    )
    broker.add_argument("--port", type=int, help="port (default: the last one, or a free one)")
    broker.add_argument(
        "--fetch-only",
        action="store_true",
        help="only fetch Apache Kafka's jars into the cache, and save its class archive for "
        "faster starts (the install does this), and exit",
    )
    broker.set_defaults(handler=_broker)

    dead = commands.add_parser("deadletters", help="list or re-offer dead letters of a run")
    actions = dead.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="show staged dead letters")
    listing.add_argument("spec", help="module:attribute of the run")
    listing.add_argument("--stream", help="only this stream")
    listing.add_argument("--pending", action="store_true", help="only those not replayed yet")
    listing.add_argument("--limit", type=int, help="at most this many")
    listing.add_argument(
        "--json", metavar="PATH", help="write JSON lines (to fix and replay; '-': stdout)"
    )
    listing.set_defaults(handler=_deadletters_list)
    replay = actions.add_parser(
        "replay",
        help="re-offer fixed dead letters (JSON lines from 'list --json', edited)",
    )
    replay.add_argument("spec", help="module:attribute of the run")
    replay.add_argument(
        "--file", required=True, help="JSON lines with id, stream and the fixed event"
    )
    replay.add_argument("--json", metavar="PATH", help="also write the result as JSON ('-')")
    replay.set_defaults(handler=_deadletters_replay)

    streams = commands.add_parser("streams", help="inspect or repair the streams of a run")
    stream_actions = streams.add_subparsers(dest="action", metavar="ACTION", required=True)
    repair = stream_actions.add_parser(
        "repair",
        help="give a stream whose event-time high mark is out of range a sane one",
        description="On the staging file of a stopped service (STAGING__PATH): a stream whose "
        "high mark is out of range (written by a version that did not check event times, so "
        "every later event was dead-lettered as late) gets the newest in-range event time of "
        "its staged rows, or none (the next event starts it). In-range high marks are left "
        "alone unless --to or --reset. Prints what it changed. Exactly-once is not affected: "
        "the high mark only decides lateness.",
    )
    repair.add_argument("spec", help="module:attribute of the run")
    repair.add_argument("--stream", action="append", help="this stream (repeatable; default all)")
    how = repair.add_mutually_exclusive_group()
    how.add_argument("--to", type=int, metavar="MICROS", help="set this high mark (µs, in range)")
    how.add_argument("--reset", action="store_true", help="clear the high mark")
    repair.add_argument("--dry-run", action="store_true", help="say what would change only")
    repair.add_argument("--json", metavar="PATH", help="also write the result as JSON ('-')")
    repair.set_defaults(handler=_streams_repair)
