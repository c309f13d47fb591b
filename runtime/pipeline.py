"""One process running ingest -> engine -> staging, exactly once across crashes.

The main thread polls Kafka, assembles engine batches and runs them through the executor; a
committer thread writes the results to staging, so the engine works on batch k+1 while batch k
commits, and a committer that falls behind merges several batches into one commit (few, large
commits). A bounded queue between them is the backpressure.

The run, in order:

1. Open staging; its watermark, offsets and stream progress are the truth. Load the engine's
   state from it. If its offsets belong to another Kafka log (a restarted embedded broker), drop
   them: the new log is read from its start and already-applied batch ids are skipped.
2. Create the topics that do not exist; assign their partitions and seek to the staged offsets.
3. Start a collector thread per bound input (they resume from their checkpoints).
4. Loop: poll; add records to the assembler; when the pending batch is full (``ENGINE__BATCH_SIZE``
   events), punctuated, idle or older than ``ENGINE__BATCH_TIMEOUT_MS``, take it with the next
   batch id, run it, and queue its commit (outputs, deltas, dead letters, offsets, progress).
5. The committer commits queued batches in order, one staging transaction per group, then tells
   Kafka the committed offsets for monitoring, and the migration worker (``MIGRATION__TARGETS``)
   what it staged; the worker pushes to the warehouses in this process (see
   :mod:`migration.worker`).
6. On stop (SIGTERM/SIGINT, idle, or a batch limit): finish the batch in hand (with
   ``drain_s``, first consume what Kafka already holds, until a poll comes back empty or the
   time is up), drain the queue, commit, push what is pending (``MIGRATION__PUSH_ON_STOP``), close.

:meth:`Pipeline.pause` stops step 4 from polling (the batch in hand is still cut, run and
committed; collectors keep producing into Kafka, so nothing is lost and the consumer lag grows);
:meth:`Pipeline.resume` polls again from where it stopped. Every committed batch is reported to
the :attr:`Pipeline.observers` (the service's metrics), and the consumer lag per stream (the
brokers' end offsets minus the committed ones) is refreshed every two seconds.

After a crash anywhere, restarting repeats from step 1: batches that were executed but not
committed run again from the same records and the same state, so nothing is lost or applied twice.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

import numpy as np
import pyarrow as pa

from etl_dataflows.executors import create_executor
from ingest.assembler import AssembledBatch, BatchAssembler, RawRecord, engine_dead_letters
from ingest.broker import BrokerHandle, ensure_topics
from ingest.collector import BatchCollector, CollectorReport, ResumePoint
from ingest.consumer import RecordConsumer
from ingest.eventtime import EventTimeBounds
from migration.migrator import Migrator
from migration.worker import MigrationWorker, committed_rows, start_migration_worker
from runtime.runspec import RunSpec
from staging.store import BatchCommit, StagingStore
from streamdi.settings import StreamdiSettings

logger = logging.getLogger(__name__)

CRASH_PHASES = ("poll", "execute", "commit", "committed")


@dataclass
class PipelineOptions:
    executor: str = "local"
    until_idle_s: float | None = None
    max_batches: int | None = None
    collect: bool = True
    progress: bool = False
    crash_at: tuple[str, int] | None = None
    #: On stop, keep consuming what is already in Kafka for up to this long (``streamdi serve``:
    #: ``INGEST__DRAIN_S``); 0 stops after the batch in hand.
    drain_s: float = 0.0


@dataclass
class PipelineReport:
    batches: int = 0
    events: int = 0
    records: int = 0
    dead_letters: int = 0
    commits: int = 0
    seconds: float = 0.0
    resumed_from: int = 0
    commit_latency_ms: list[float] = field(default_factory=list)
    collectors: list[CollectorReport] = field(default_factory=list)

    def percentile(self, q: float) -> float:
        if not self.commit_latency_ms:
            return 0.0
        return float(np.percentile(np.asarray(self.commit_latency_ms), q))


@dataclass(frozen=True)
class CommittedBatch:
    """What :attr:`Pipeline.observers` learn of each committed batch."""

    batch_id: int
    events: int
    #: time the engine spent running the batch
    executed_s: float
    #: from the batch's first record arriving to its staging commit
    latency_s: float


@dataclass
class _Queued:
    commit: BatchCommit
    arrived_mono: float


def _kill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class Pipeline:
    """See the module docstring."""

    def __init__(
        self,
        spec: RunSpec,
        settings: StreamdiSettings,
        broker: BrokerHandle,
        options: PipelineOptions | None = None,
        *,
        out: TextIO | None = None,
        migrator: Migrator | None = None,
    ) -> None:
        self.spec = spec
        self.migrator = migrator
        #: Set once the pipeline consumes (staging open, topics assigned, collectors started).
        self.started = threading.Event()
        self.settings = settings
        self.broker = broker
        self.options = options or PipelineOptions(executor=settings.engine.executor)
        self.out = out or sys.stderr
        self.report = PipelineReport()
        self._queue: queue.Queue[_Queued | None] = queue.Queue(
            maxsize=self.settings.ingest.commit_group
        )
        self._error: BaseException | None = None
        self._committed_events = 0
        self._committed_batches = 0
        self._committed_offsets: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()
        self._migration: MigrationWorker | None = None
        #: Set while ingest is paused (no polling); see :meth:`pause`.
        self.paused = threading.Event()
        self._pause_seen = threading.Event()
        self._consuming = False
        #: Called by the committer with every committed batch; must be quick and not raise.
        self.observers: list[Callable[[CommittedBatch], None]] = []
        #: Records in Kafka not committed to staging yet, per stream (refreshed every 2 s).
        self.consumer_lag: dict[str, int] = {}

    def pause(self, timeout_s: float = 30.0) -> None:
        """Stop polling Kafka; the batch in hand still commits. Returns once the consuming loop
        has seen the pause (a poll in flight when it was asked has returned), so records produced
        after this returns stay in Kafka until :meth:`resume`. Idempotent."""
        if not self.paused.is_set():
            logger.info("ingest paused dataflow=%s", self.spec.flow.name)
        self._pause_seen.clear()
        self.paused.set()
        deadline = time.monotonic() + timeout_s
        while self._consuming and time.monotonic() < deadline:
            if self._pause_seen.wait(0.05):
                return

    def resume(self) -> None:
        """Poll again from the next uncommitted offset. Idempotent."""
        if self.paused.is_set():
            logger.info("ingest resumed dataflow=%s", self.spec.flow.name)
        self.paused.clear()

    # -- the run -----------------------------------------------------------------------------------

    def run(
        self, stop: threading.Event | None = None, *, store: StagingStore | None = None
    ) -> PipelineReport:
        """Run until ``stop`` (or idle, or the batch limit). ``store`` is a staging store the
        caller opened and keeps (the query service shares it); by default the run opens and
        closes its own. A ``migrator`` given at construction is the one the run pushes with."""
        stop = stop or threading.Event()
        settings = self.settings
        started = time.monotonic()
        # 1.
        if store is not None:
            return self._run(store, stop, started)
        own = StagingStore(
            settings.staging_path,
            self.spec.flow,
            memory_limit=settings.staging.memory_limit,
            recent_cache_bytes=settings.staging.recent_cache_mb * 2**20,
        )
        try:
            return self._run(own, stop, started)
        finally:
            own.close()

    def _run(self, store: StagingStore, stop: threading.Event, started: float) -> PipelineReport:
        settings, spec, options = self.settings, self.spec, self.options
        offsets = store.offsets()
        if store.meta("kafka_log") not in (None, self.broker.log_id):
            logger.warning(
                "staged offsets belong to another Kafka log old=%s new=%s; reading the new log "
                "from its start (applied batch ids are skipped)",
                store.meta("kafka_log"),
                self.broker.log_id,
            )
            offsets = {}
        store.set_meta("kafka_log", self.broker.log_id)
        progress = store.streams()
        executor = create_executor(options.executor, spec.flow, store.load_state())
        executor.warm_up()
        self.report.resumed_from = store.watermark
        self._committed_batches = 0
        self._committed_offsets = dict(offsets)
        logger.info(
            "pipeline start dataflow=%s watermark=%s executor=%s",
            spec.flow.name,
            store.watermark,
            options.executor,
        )
        # 2.
        topics = spec.topics()
        ensure_topics(
            settings.kafka,
            self.broker.bootstrap_servers,
            {t: max(spec.streams[s].partitions for s in streams) for t, streams in topics.items()},
        )
        consumer = RecordConsumer(
            settings.kafka,
            self.broker.bootstrap_servers,
            list(topics),
            start=offsets,
            start_from=settings.ingest.start_from,
            group_id=f"streamdi.{spec.flow.name}",
        )
        assembler = BatchAssembler(
            spec.flow,
            topics,
            progress=progress,
            offsets=offsets,
            max_record_bytes=settings.kafka.max_record_bytes,
            allowed_lateness_ms=settings.ingest.allowed_lateness_ms,
            lateness=spec.lateness(),
            event_times=EventTimeBounds.from_settings(settings.ingest),
        )
        # 3.
        collector_threads = self._start_collectors(stop, progress) if options.collect else []
        # 5.
        self._migration = start_migration_worker(store, settings, migrator=self.migrator)
        committer = threading.Thread(
            target=self._commit_loop, args=(store, stop), name="staging-committer", daemon=True
        )
        committer.start()
        next_batch = store.watermark + 1
        batch_size = settings.engine.batch_size
        timeout_s = settings.engine.batch_timeout_ms / 1000
        last_activity = time.monotonic()
        last_print = 0.0
        last_monitor = 0.0
        fetched_events = 0
        self.started.set()
        try:
            # 4.
            buffered: deque[RawRecord] = deque()
            added: dict[tuple[str, int], int] = {}
            self._consuming = True
            drain_until: float | None = None
            drain_to: dict[tuple[str, int], int] = {}
            drained = limit_reached = False
            while True:
                if stop.is_set():
                    if drain_until is None:
                        drain_until = time.monotonic() + options.drain_s
                        # what Kafka holds now is what the drain consumes (an empty poll alone
                        # can come back while a fetch is still on its way)
                        drain_to = consumer.end_offsets() if options.drain_s > 0 else {}
                    if (
                        limit_reached
                        or drained
                        or self.paused.is_set()
                        or time.monotonic() >= drain_until
                    ):
                        break
                paused = self.paused.is_set()
                if paused:
                    self._pause_seen.set()
                did_poll = not buffered and not paused
                polled = consumer.poll(settings.ingest.poll_timeout_ms) if did_poll else []
                buffered.extend(polled)
                if polled:
                    last_activity = time.monotonic()
                while buffered and assembler.pending_events < batch_size:
                    if assembler.punctuated:
                        break
                    record = buffered.popleft()
                    assembler.add(record)
                    added[(record.topic, record.partition)] = record.offset
                arrived = assembler.arrived_at
                cut = assembler.pending and (
                    assembler.pending_events >= batch_size
                    or assembler.punctuated
                    or (did_poll and not polled)
                    or paused
                    or (arrived is not None and time.time() - arrived >= timeout_s)
                )
                if cut:
                    fetched_events += assembler.pending_events
                    assembled = assembler.take(next_batch, added)
                    self._execute(executor, assembled)
                    last_activity = time.monotonic()
                    next_batch += 1
                    if options.max_batches and self.report.batches >= options.max_batches:
                        limit_reached = True
                        stop.set()
                drained = (
                    did_poll
                    and not polled
                    and not buffered
                    and not assembler.pending
                    and all(consumer.position(tp) >= end for tp, end in drain_to.items())
                )
                now = time.monotonic()
                if self._error is not None:
                    raise self._error
                if self._migration is not None and self._migration.error is not None:
                    raise self._migration.error
                if now - last_monitor >= 2.0:
                    with self._lock:
                        committed = dict(self._committed_offsets)
                    consumer.commit_for_monitoring(committed)
                    self.consumer_lag = _lag_per_stream(consumer, committed, topics)
                    last_monitor = now
                if paused and not buffered and not assembler.pending:
                    stop.wait(0.05)
                if options.progress and now - last_print >= 1.0:
                    self._print_progress(started, fetched_events)
                    last_print = now
                if options.until_idle_s is not None and not assembler.pending and not buffered:
                    collecting = any(t.is_alive() for t in collector_threads)
                    if (
                        not collecting
                        and self._queue.empty()
                        and now - last_activity >= options.until_idle_s
                    ):
                        break
        finally:
            # 6.
            self._consuming = False
            self._queue.put(None)
            committer.join()
            if self._migration is not None:
                self._migration.stop(push=None if self._error is None else False)
            consumer.close()
            stop.set()
            for thread in collector_threads:
                thread.join(timeout=60)
            executor.close()
            if options.progress:
                self._print_progress(started, fetched_events, final=True)
        if self._error is not None:
            raise self._error
        self.report.seconds = time.monotonic() - started
        logger.info(
            "pipeline stop batches=%s events=%s dead_letters=%s watermark=%s",
            self.report.batches,
            self.report.events,
            self.report.dead_letters,
            store.watermark,
        )
        return self.report

    def _start_collectors(
        self, stop: threading.Event, progress: dict[str, Any]
    ) -> list[threading.Thread]:
        threads = []
        settings = self.settings
        for stream, binding in self.spec.streams.items():
            if binding.input is None:
                continue
            staged = progress.get(stream)
            fallback = ResumePoint(staged.last_batch + 1, staged.last_pos + 1) if staged else None
            collector = BatchCollector(
                stream=stream,
                topic=self.spec.topic(stream),
                source=binding.input,
                kafka=settings.kafka,
                bootstrap=self.broker.bootstrap_servers,
                log_id=self.broker.log_id,
                checkpoint_dir=settings.streamdi.state_dir / "collector" / self.spec.flow.name,
                batch_events=settings.ingest.batch_events,
                batch_ms=settings.ingest.batch_ms,
                buffer_bytes=settings.ingest.producer_buffer_bytes,
                fallback=fallback,
                event_times=EventTimeBounds.from_settings(settings.ingest),
            )
            self.report.collectors.append(collector.report)

            def work(c: BatchCollector = collector) -> None:
                try:
                    c.run(stop)
                except BaseException as exc:
                    logger.error("collector failed stream=%s: %s", c.stream, exc)
                    self._error = exc
                    stop.set()

            thread = threading.Thread(target=work, name=f"collector-{stream}", daemon=True)
            thread.start()
            threads.append(thread)
        return threads

    def _execute(self, executor: Any, assembled: AssembledBatch) -> None:
        crash = self.options.crash_at
        batch_id = assembled.batch.batch_id
        if crash is not None and batch_id == crash[1]:
            if crash[0] == "poll":
                _kill_self()
            elif crash[0] == "execute":
                threading.Timer(0.005, _kill_self).start()
        t0 = time.monotonic()
        result = executor.run_batch(assembled.batch)
        executed_ms = (time.monotonic() - t0) * 1000
        dead = pa.concat_tables(
            [assembled.dead_letters, engine_dead_letters(assembled, result.dead_letters)]
        )
        commit = BatchCommit(
            batch_id=batch_id,
            result=result,
            dead_letters=dead,
            offsets=assembled.offsets,
            streams=assembled.streams,
            events=assembled.events,
            records=assembled.records,
            arrived_at=assembled.arrived_at,
            executed_ms=executed_ms,
            replayed=assembled.replayed,
        )
        self.report.batches += 1
        arrived_mono = time.monotonic() - max(0.0, time.time() - assembled.arrived_at)
        self._queue.put(_Queued(commit, arrived_mono))

    def _commit_loop(self, store: StagingStore, stop: threading.Event) -> None:
        crash = self.options.crash_at
        limit = self.settings.ingest.commit_group
        done = False
        while not done:
            item = self._queue.get()
            if item is None:
                break
            group = [item]
            while len(group) < limit:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    done = True
                    break
                group.append(more)
            ids = [g.commit.batch_id for g in group]
            targeted = crash is not None and ids[0] <= crash[1] <= ids[-1]

            def hook(step: str, targeted: bool = targeted) -> None:
                if targeted and crash is not None and crash[0] == "commit" and step == "ledger":
                    _kill_self()

            try:
                store.commit([g.commit for g in group], hook=hook)
            except BaseException as exc:
                logger.error("staging commit failed batch_ids=%s: %s", ids, exc)
                self._error = exc
                stop.set()
                return
            if targeted and crash is not None and crash[0] == "committed":
                _kill_self()
            if self._migration is not None:
                self._migration.notify(len(group), committed_rows(g.commit for g in group))
            now = time.monotonic()
            for g in group:
                seen = CommittedBatch(
                    g.commit.batch_id,
                    g.commit.events,
                    g.commit.executed_ms / 1000,
                    now - g.arrived_mono,
                )
                for observe in self.observers:
                    try:
                        observe(seen)
                    except Exception as exc:  # an observer must never stop the pipeline
                        logger.warning("batch observer failed: %s", exc)
            with self._lock:
                for g in group:
                    self.report.commit_latency_ms.append((now - g.arrived_mono) * 1000)
                    self.report.events += g.commit.events
                    self.report.records += g.commit.records
                    self.report.dead_letters += g.commit.dead_letters.num_rows
                    self._committed_offsets.update(g.commit.offsets)
                self.report.commits += 1
                self._committed_batches += len(group)

    def _print_progress(self, started: float, fetched_events: int, *, final: bool = False) -> None:
        elapsed = max(time.monotonic() - started, 1e-9)
        with self._lock:
            events = self.report.events
            batches = self._committed_batches
            p99 = self.report.percentile(99)
        lag = max(0, fetched_events - events)
        line = (
            f"batches {batches:,}  events {events:,}  {events / elapsed:,.0f} events/s  "
            f"lag {lag:,} events  commit p99 {p99:,.0f} ms"
        )
        if self.out.isatty():
            self.out.write("\r" + line + ("\n" if final else ""))
        else:
            self.out.write(line + "\n")
        self.out.flush()


def _lag_per_stream(
    consumer: RecordConsumer,
    committed: dict[tuple[str, int], int],
    topics: dict[str, list[str]],
) -> dict[str, int]:
    """Records the brokers hold beyond the committed offsets, per stream (streams sharing a
    topic share its lag). Empty when the brokers do not answer: monitoring never stops the run."""
    ends = consumer.end_offsets()
    if not ends:
        return {}
    lag: dict[str, int] = {}
    for topic, streams in topics.items():
        behind = sum(
            max(0, end - committed.get((t, p), 0)) for (t, p), end in ends.items() if t == topic
        )
        for stream in streams:
            lag[stream] = behind
    return lag
