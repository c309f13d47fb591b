"""``streamdi bench ingest``: Kafka -> engine -> staging, batched records against single-event
records, side by side in one run.

For each dataflow — the ledger workload on the chosen executor, and a pass-through dataflow (no
state: the ingest + staging path's own ceiling) — it produces events into a fresh topic, then runs
the pipeline in this process until the topic is drained, and reports events/s, the time from a
batch's arrival to its staging commit (p50/p99), events per engine batch, and staging bytes per
staged event. Modes: ``batched`` (Arrow records of 10,000 events, the topic filled first: the most
the pipeline drains), ``steady`` (the same records offered at 500,000 events/s by a producer
process while the pipeline runs: latency without a backlog), ``single`` (one JSON event per
record), and the cost of Kafka transactions: ``txn`` (the batched records, each produced in its own
transaction, read ``read_committed``) and ``4-part`` (the same over four partitions, round-robin by
record, merged by event time in the consumer: what a stream bound with ``partitions=4`` costs).

The full run streams 4,000,000 ledger events per mode (8 s at 500,000/s): long enough that
staging's own checkpoints (DuckDB folds its WAL into the file every ~256 MB, inside a commit) fall
inside the figures, which a run of a second or two leaves out. It also measures how long a restart
takes to resume with 1,000,000 keys of state (open staging, read the state, build the executor).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import multiprocessing.process
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from cli.commands import EXIT_OK, Commands, write_json
from etl_dataflows.batch import BatchResult, TableDelta
from etl_dataflows.dataflow import Dataflow
from etl_dataflows.executors import create_executor
from etl_dataflows.state import image_schema
from etl_dataflows.testing import ledger_dataflow
from ingest.broker import BrokerHandle, client_config, ensure_topics, open_broker
from ingest.kafka_dist import KAFKA_VERSION
from ingest.ledger import ledger_events
from ingest.records import OutgoingRecord, encode_batch
from runtime.pipeline import Pipeline, PipelineOptions
from runtime.runspec import StreamBinding, bind
from staging.batch_commit import BatchCommit
from staging.layout import DEAD_LETTER_INPUT_SCHEMA
from staging.segments import staging_disk_bytes
from staging.store import StagingStore
from streamdi.settings import StreamdiSettings, load_settings

RECORD_EVENTS = 10_000
#: The steady mode offers events at this rate while the pipeline runs (arrival-to-commit latency
#: without a backlog); the batched mode measures the most the pipeline drains from a full topic.
STEADY_RATE = 500_000.0
IDLE_S = 0.5


def passthrough_dataflow() -> Dataflow:
    """The ledger source straight into a sink: no state, so only ingest and staging work."""
    flow = Dataflow("passthrough")
    flow.source(
        "txns",
        schema={
            "kind": "string",
            "src": "int64",
            "dst": "int64",
            "amount": "int64",
            "amount2": "int64",
        },
    )
    flow.sink("events")
    return flow


def _events(n: int, seed: int) -> pa.Table:
    table = ledger_events(n, keys=min(10_000, max(2, n // 10)), seed=seed)
    return table.rename_columns([*table.column_names[:-1], "_ts"]).append_column(
        "_pos", pa.array(np.arange(n, dtype=np.int64))
    )


#: Partitions of the topic, and whether each record is produced in a transaction, per mode.
_LAYOUT = {"txn": (1, True), "4-part": (4, True)}


def _batched_records(events: pa.Table, cap: int) -> Iterator[tuple[int, list[OutgoingRecord]]]:
    """``events`` as the collector would send them: logical batches of :data:`RECORD_EVENTS`
    (ids from 1), each with the position of its first event, encoded as it is taken."""
    for i, start in enumerate(range(0, events.num_rows, RECORD_EVENTS)):
        piece = events.slice(start, RECORD_EVENTS)
        last = int(piece.column("_pos")[-1].as_py())
        yield start, encode_batch("txns", i + 1, piece, [], cap=cap, last_pos=last)


def _produce(
    settings: StreamdiSettings, broker: BrokerHandle, topic: str, events: pa.Table, mode: str
) -> float:
    from kafka import KafkaProducer

    partitions, transactional = _LAYOUT.get(mode, (1, False))
    ensure_topics(settings.kafka, broker.bootstrap_servers, {topic: partitions})
    extra: dict[str, Any] = (
        {"transactional_id": f"bench.{topic}", "retry_backoff_ms": 20} if transactional else {}
    )
    producer = KafkaProducer(
        **client_config(settings.kafka, broker.bootstrap_servers),
        acks="all",
        linger_ms=5,
        max_request_size=settings.kafka.max_record_bytes + 256 * 1024,
        **extra,
    )
    if transactional:
        producer.init_transactions()
    started = time.perf_counter()
    if mode != "single":
        for i, (_, batch) in enumerate(_batched_records(events, settings.kafka.max_record_bytes)):
            if transactional:
                producer.begin_transaction()
            for record in batch:
                producer.send(
                    topic, value=record.value, headers=record.headers, partition=i % partitions
                )
            if transactional:
                producer.commit_transaction()
    else:
        for row in events.to_pylist():
            producer.send(topic, value=json.dumps(row).encode(), partition=0)
    producer.flush()
    seconds = time.perf_counter() - started
    producer.close()
    rate: float = events.num_rows / seconds
    return rate


def _paced_producer(
    kafka: dict[str, Any], bootstrap: str, topic: str, n: int, seed: int, rate: float, ready: Any
) -> None:
    """The steady mode's producer, run in its own process (a load generator should not share an
    interpreter with the pipeline it feeds): encode ``n`` events as batched records first, set
    ``ready``, then send them at ``rate`` events/s."""
    from kafka import KafkaProducer

    from streamdi.settings import KafkaSettings

    settings = KafkaSettings(**kafka)
    events = _events(n, seed)
    producer = KafkaProducer(
        **client_config(settings, bootstrap),
        acks="all",
        linger_ms=0,
        max_request_size=settings.max_record_bytes + 256 * 1024,
    )
    records = list(_batched_records(events, settings.max_record_bytes))
    ready.set()
    started = time.perf_counter()
    for start, batch in records:
        pause = started + start / rate - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        for record in batch:
            producer.send(topic, value=record.value, headers=record.headers, partition=0)
        producer.flush()
    producer.close()


def _produce_paced(
    settings: StreamdiSettings, broker: BrokerHandle, topic: str, n: int, seed: int, rate: float
) -> multiprocessing.process.BaseProcess:
    """Start a process producing ``n`` events (``_events(n, seed)``) as batched records at a
    steady ``rate`` (events/s); returns once it sends."""
    ensure_topics(settings.kafka, broker.bootstrap_servers, {topic: 1})
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    process = context.Process(
        target=_paced_producer,
        args=(settings.kafka.model_dump(), broker.bootstrap_servers, topic, n, seed, rate, ready),
        name="bench-producer",
        daemon=True,
    )
    process.start()
    while not ready.wait(0.5):
        if not process.is_alive():
            raise RuntimeError(f"the steady producer exited with code {process.exitcode}")
    return process


def _run_one(
    settings: StreamdiSettings,
    broker: BrokerHandle,
    work: Path,
    flow: Dataflow,
    mode: str,
    n: int,
    executor: str,
) -> dict[str, Any]:
    name = f"{flow.name}-{mode}"
    topic = f"bench.{name}.{int(time.time() * 1000)}"
    producer = None
    if mode == "steady":
        producer = _produce_paced(settings, broker, topic, n, len(name), STEADY_RATE)
        produce_rate = STEADY_RATE
    else:
        produce_rate = _produce(settings, broker, topic, _events(n, seed=len(name)), mode)
    staging = work / f"{name}.duckdb"
    run_settings = load_settings(
        streamdi={"state_dir": str(work / name)},
        staging={"path": str(staging)},
        kafka=settings.kafka.model_dump(),
        engine=settings.engine.model_dump(),
        # a drained partition stops holding the others back soon (4-part's end of the topic)
        ingest={
            **settings.ingest.model_dump(),
            "allowed_lateness_ms": None,
            "partition_idle_ms": 100,
        },
    )
    spec = bind(flow, txns=StreamBinding(topic=topic, partitions=_LAYOUT.get(mode, (1, False))[0]))
    options = PipelineOptions(executor=executor, until_idle_s=IDLE_S, collect=False)
    report = Pipeline(spec, run_settings, broker, options).run()
    if producer is not None:
        producer.join(timeout=60)
    busy = max(report.seconds - IDLE_S, 1e-9)
    return {
        "mode": mode,
        "dataflow": flow.name,
        "executor": executor,
        "events": report.events,
        "events_per_s": report.events / busy,
        "produced_per_s": produce_rate,
        "p50_commit_ms": report.percentile(50),
        "p99_commit_ms": report.percentile(99),
        "batch_events": report.events / max(report.batches, 1),
        "batches": report.batches,
        "commits": report.commits,
        "staging_bytes_per_event": staging_disk_bytes(staging) / max(report.events, 1),
    }


def _resume_seconds(work: Path, keys: int, executor: str) -> dict[str, Any]:
    """Stage ``keys`` accounts of ledger state, then time a restart's resume."""
    flow = ledger_dataflow().build()
    path = work / "resume.duckdb"
    accounts = flow.tables["accounts"]
    ids = np.arange(keys, dtype=np.int64)
    upserts = pa.Table.from_arrays(
        [pa.array(ids), pa.array(ids + 1), pa.array(np.full(keys, 1_000, dtype=np.int64))],
        schema=image_schema(accounts),
    )
    deletes = pa.table({"id": pa.array([], pa.int64())})
    book = flow.tables["book"]
    result = BatchResult(
        batch_id=1,
        outputs={},
        dead_letters=pa.table({}),
        aborts=pa.table({"step": pa.array([], pa.string())}),
        deltas={
            "accounts": TableDelta(upserts, deletes),
            "book": TableDelta(
                pa.Table.from_arrays(
                    [pa.array(ids), upserts.column("balance")], schema=image_schema(book)
                ),
                deletes,
            ),
        },
        sequences={"accounts": keys + 1, "book": 1},
    )
    with StagingStore(path, flow) as store:
        store.commit(
            [
                BatchCommit(
                    1,
                    result,
                    DEAD_LETTER_INPUT_SCHEMA.empty_table(),
                    {},
                    {},
                    0,
                    0,
                    time.time(),
                    0.0,
                )
            ]
        )
    started = time.perf_counter()
    with StagingStore(path, flow) as store:
        image = store.load_state()
        loaded = time.perf_counter()
        engine = create_executor(executor, flow, image)
        ready = time.perf_counter()
        engine.close()
    return {
        "keys": keys,
        "resume_s": ready - started,
        "read_state_s": loaded - started,
        "build_executor_s": ready - loaded,
        "staging_bytes": path.stat().st_size,
    }


def describe_broker(broker: BrokerHandle) -> dict[str, Any]:
    """What the events travelled through, for the report: the embedded Apache Kafka (its version)
    or an external Kafka (its address)."""
    if broker.embedded:
        return {
            "kind": "embedded",
            "software": f"Apache Kafka {KAFKA_VERSION}",
            "log": broker.log_id,
        }
    return {"kind": "external", "bootstrap_servers": broker.bootstrap_servers, "log": broker.log_id}


#: What a repeated row reports as its median and its spread (min, max).
_SPREAD = ("events_per_s", "p50_commit_ms", "p99_commit_ms")


def _median_row(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One row for ``runs`` of the same mode: the median of every figure, ``runs`` and the
    ``spread`` (min, max) of the throughput and the latencies."""
    row = dict(runs[0])
    for key, value in runs[0].items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            row[key] = float(np.median([r[key] for r in runs]))
    row["runs"] = len(runs)
    row["spread"] = {k: [min(r[k] for r in runs), max(r[k] for r in runs)] for k in _SPREAD}
    return row


def run_bench(
    settings: StreamdiSettings, *, quick: bool, executor: str, repeat: int = 1
) -> dict[str, Any]:
    sizes = (
        {"ledger": (100_000, 5_000), "passthrough": (200_000, 20_000)}
        if quick
        else {"ledger": (4_000_000, 30_000), "passthrough": (1_000_000, 100_000)}
    )
    load_before = os.getloadavg()
    with (
        tempfile.TemporaryDirectory(prefix="streamdi-bench-") as tmp,
        open_broker(settings.kafka, Path(tmp)) as broker,
    ):
        work = Path(tmp)
        described = describe_broker(broker)
        runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
        # rounds, not one mode repeated in a row: a noisy minute spreads over every mode
        for round_ in range(repeat):
            for mode in ("batched", "steady", "single", "txn", "4-part"):
                n = sizes["ledger"][1 if mode == "single" else 0]
                runs.setdefault(("ledger", mode), []).append(
                    _run_one(
                        settings, broker, work / str(round_), ledger_dataflow(), mode, n, executor
                    )
                )
            for mode in ("batched", "single"):
                n = sizes["passthrough"][0 if mode == "batched" else 1]
                runs.setdefault(("passthrough", mode), []).append(
                    _run_one(
                        settings,
                        broker,
                        work / str(round_),
                        passthrough_dataflow(),
                        mode,
                        n,
                        executor,
                    )
                )
        resume = _resume_seconds(work, 1_000_000, executor)
    rows = {key: _median_row(found) for key, found in runs.items()}
    return {
        "benchmark": "ingest",
        "broker": described,
        "quick": quick,
        "repeat": repeat,
        "load_average": {"before": list(load_before), "after": list(os.getloadavg())},
        "executor": executor,
        "engine_batch_size": settings.engine.batch_size,
        "record_events": RECORD_EVENTS,
        "results": [row for (flow, _), row in rows.items() if flow == "ledger"],
        "ceiling": [row for (flow, _), row in rows.items() if flow == "passthrough"],
        "resume": resume,
    }


def render(report: dict[str, Any]) -> str:
    lines = [
        f"streamdi bench ingest — Kafka -> engine ({report['executor']}) -> staging; broker: "
        + (
            report["broker"].get("software", "")
            if report["broker"]["kind"] == "embedded"
            else f"external {report['broker']['bootstrap_servers']}"
        ),
        f"{'dataflow':<12} {'mode':<8} {'events':>9} {'events/s':>10} {'produced/s':>11} "
        f"{'p50 ms':>8} {'p99 ms':>8} {'ev/batch':>9} {'B/event':>8}",
    ]
    for r in [*report["results"], *report["ceiling"]]:
        lines.append(
            f"{r['dataflow']:<12} {r['mode']:<8} {r['events']:>9,.0f} {r['events_per_s']:>10,.0f} "
            f"{r['produced_per_s']:>11,.0f} {r['p50_commit_ms']:>8.0f} {r['p99_commit_ms']:>8.0f} "
            f"{r['batch_events']:>9,.0f} {r['staging_bytes_per_event']:>8.0f}"
        )
    if report.get("repeat", 1) > 1:
        lines.append(f"medians of {report['repeat']} runs each; spread (min-max):")
        for r in [*report["results"], *report["ceiling"]]:
            spread = r["spread"]
            lines.append(
                f"  {r['dataflow']:<12} {r['mode']:<8} events/s "
                f"{spread['events_per_s'][0]:,.0f}-{spread['events_per_s'][1]:,.0f}  p50 "
                f"{spread['p50_commit_ms'][0]:.0f}-{spread['p50_commit_ms'][1]:.0f} ms  p99 "
                f"{spread['p99_commit_ms'][0]:.0f}-{spread['p99_commit_ms'][1]:.0f} ms"
            )
    load = report.get("load_average")
    if load:
        lines.append(
            "load average before/after: "
            + " / ".join(", ".join(f"{x:.2f}" for x in load[k]) for k in ("before", "after"))
        )
    resume = report["resume"]
    lines.append(
        f"resume with {resume['keys']:,} keys: {resume['resume_s']:.2f} s (read state "
        f"{resume['read_state_s']:.2f} s, build executor {resume['build_executor_s']:.2f} s)"
    )
    return "\n".join(lines)


def _bench(args: argparse.Namespace, settings: StreamdiSettings) -> int:
    import logging

    logging.getLogger("kafka").setLevel(logging.WARNING)
    report = run_bench(
        settings,
        quick=args.quick,
        executor=args.executor or settings.engine.executor,
        repeat=args.repeat,
    )
    if args.json:
        write_json(report, args.json)
    if args.json != "-":
        print(render(report))
    return EXIT_OK


def _rounds(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"--repeat takes 1 or more rounds, not {value}")
    return value


def register(benches: Commands) -> None:
    bench = benches.add_parser(
        "ingest",
        help="Kafka -> engine -> staging: batched vs single-event records, resume time",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bench.add_argument("--quick", action="store_true", help="smaller workloads (a minute or so)")
    bench.add_argument("--executor", help="executor (default: ENGINE__EXECUTOR)")
    bench.add_argument(
        "--repeat",
        type=_rounds,
        default=1,
        help="rounds of every mode; each row reports the median and the spread (default 1)",
    )
    bench.add_argument(
        "--json", metavar="PATH", help="also write the results as JSON ('-': stdout)"
    )
    bench.set_defaults(handler=_bench)
