"""One process running ingest -> engine -> staging, exactly once across crashes.

The main thread polls Kafka, assembles engine batches and runs them through the executor; a
committer thread writes the results to staging, so the engine works on batch k+1 while batch k
commits, and a committer that falls behind merges several batches into one commit (few, large
commits). A bounded queue between them is the backpressure.

The run, in order:

1. Open staging; its watermark, offsets, stream progress and the merge state of streams over
   several partitions (:mod:`ingest.merging`: the events they hold back) are the truth. Load the
   engine's state from it. If its offsets belong to another Kafka log (another cluster, or an
   embedded broker whose log was removed), drop them and the merge state: the new log is read
   from its start and already-applied batch ids are skipped.
2. Create the topics that do not exist and check those that do (partition counts; retention,
   :mod:`ingest.topic_checks`); assign their partitions and seek to the staged offsets (offsets
   retention deleted before they were consumed stop the start: :class:`RetentionGap`).
3. Start a collector thread per bound input (they resume from their checkpoints; one that loses
   the broker waits and runs again, resuming from what the topic holds: :func:`run_collector`).
4. Loop: poll; add records to the assembler; when the pending batch is full (``ENGINE__BATCH_SIZE``
   events), punctuated, idle or older than ``ENGINE__BATCH_TIMEOUT_MS``, take it with the next
   batch id, run it, and queue its commit (outputs, deltas, dead letters, offsets, progress).
5. The committer commits queued batches in order, one staging transaction per group, then tells
   Kafka the committed offsets for monitoring, and the migration worker (``MIGRATION__TARGETS``)
   what it staged; the worker pushes to the warehouses in this process (see
   :mod:`migration.worker`).
   A checkpointer thread writes a checkpoint of the state every ``STAGING__CHECKPOINT_EVERY_S``
   (:mod:`staging.checkpoints`; not for a replay).
6. On stop (SIGTERM/SIGINT, idle, or a batch limit): finish the batch in hand (with
   ``drain_s``, first consume what Kafka holds at the stop, until a poll after it comes back
   empty with the consumer at those end offsets, or the time is up), drain the queue, commit,
   take a checkpoint when one is due, push what is pending (``MIGRATION__PUSH_ON_STOP``), close.

:meth:`Pipeline.pause` stops step 4 from polling (the batch in hand is still cut, run and
committed; collectors keep producing into Kafka, so nothing is lost and the consumer lag grows);
:meth:`Pipeline.resume` polls again from where it stopped. Every committed batch is reported to
the :attr:`Pipeline.observers` (the service's metrics), and the consumer lag per stream (the
brokers' end offsets minus the committed ones) is refreshed every two seconds.

The pieces, each testable on its own: the cut rules (:mod:`runtime.cutting`, a pure function of
the assembler's state and the clock), the consuming loop with drain, pause and idle exit
(:mod:`runtime.consuming`), the engine-to-staging hand-off and the committer
(:mod:`runtime.committer`), the interfaces of the consumer, executor and store they take
(:mod:`runtime.interfaces`). Fault injection for the kill -9 tests is a hook object the harness
installs (:mod:`runtime.faults`); the production default does nothing.

After a crash anywhere, restarting repeats from step 1: batches that were executed but not
committed run again from the same records and the same state, so nothing is lost or applied twice.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from etl_dataflows.dataflow import CompiledDataflow
from etl_dataflows.executors import BaseExecutor, create_executor
from etl_dataflows.scheduling.decision import cores
from ingest.assembler import AssembledBatch, BatchAssembler, TopicPartition
from ingest.broker import BrokerHandle, ensure_topics
from ingest.collector import BatchCollector, ResumePoint
from ingest.consumer import MONITOR_TIMEOUT_MS, RecordConsumer
from ingest.eventtime import EventTimeBounds
from ingest.topic_checks import check_topics
from migration.migrator import Migrator
from migration.worker import MigrationWorker, committed_rows, start_migration_worker
from runtime.bounded_feed import BoundedFeed
from runtime.committer import CommittedBatch, PipelineReport, StagingCommitter, execute_batch
from runtime.consuming import ConsumingLoop, LoopRules, PauseControl
from runtime.cutting import CutRules
from runtime.faults import CRASH_PHASES, PipelineFaults
from runtime.interfaces import BatchExecutor, RecordFeed
from runtime.runspec import RunSpec
from staging.batch_commit import BatchCommit
from staging.checkpoints import Checkpointer
from staging.store import StagingStore
from streamdi.errors import TransientError
from streamdi.memory import release_free_memory
from streamdi.settings import StreamdiSettings

logger = logging.getLogger(__name__)

#: A collector that lost the broker runs again after this long.
COLLECTOR_RETRY_S = 1.0

__all__ = [
    "CRASH_PHASES",
    "CommittedBatch",
    "Pipeline",
    "PipelineOptions",
    "PipelineReport",
]


@dataclass
class PipelineOptions:
    executor: str = "local"
    until_idle_s: float | None = None
    max_batches: int | None = None
    collect: bool = True
    progress: bool = False
    #: On stop, keep consuming what is already in Kafka for up to this long (``streamdi serve``:
    #: ``INGEST__DRAIN_S``); 0 stops after the batch in hand.
    drain_s: float = 0.0
    #: A replay (:mod:`runtime.reprocess`): read each ``(topic, partition)`` up to this offset
    #: only, starting where staging stopped or else at offset 0 (never at the log's start:
    #: records retention deleted are :class:`~ingest.exceptions.RetentionGap`), through a
    #: :class:`~runtime.bounded_feed.BoundedFeed`; no offsets are committed for monitoring.
    replay_to: Mapping[TopicPartition, int] | None = None


class Pipeline:
    """See the module docstring. ``faults`` are the crash tests' hooks (:mod:`runtime.faults`)."""

    def __init__(
        self,
        spec: RunSpec,
        settings: StreamdiSettings,
        broker: BrokerHandle,
        options: PipelineOptions | None = None,
        *,
        out: TextIO | None = None,
        migrator: Migrator | None = None,
        faults: PipelineFaults | None = None,
    ) -> None:
        self.spec = spec
        self.migrator = migrator
        #: Set once the pipeline consumes (staging open, topics assigned, collectors started).
        self.started = threading.Event()
        self.settings = settings
        self.broker = broker
        self.options = options or PipelineOptions(executor=settings.engine.executor)
        self.faults = faults or PipelineFaults()
        self.out = out or sys.stderr
        self.report = PipelineReport()
        self._error: BaseException | None = None
        self._committer: StagingCommitter | None = None
        self._migration: MigrationWorker | None = None
        self._checkpointer: Checkpointer | None = None
        self.control = PauseControl()
        #: Set while ingest is paused (no polling); see :meth:`pause`.
        self.paused = self.control.paused
        #: Called by the committer with every committed batch; must be quick and not raise.
        self.observers: list[Callable[[CommittedBatch], None]] = []
        #: Records in Kafka not committed to staging yet, per stream (refreshed every 2 s).
        self.consumer_lag: dict[str, int] = {}
        self._loop: ConsumingLoop | None = None

    def pause(self, timeout_s: float = 30.0) -> None:
        """Stop polling Kafka; the batch in hand still commits. Returns once the consuming loop
        has seen the pause (a poll in flight when it was asked has returned), so records produced
        after this returns stay in Kafka until :meth:`resume`. Idempotent."""
        if not self.paused.is_set():
            logger.info("ingest paused dataflow=%s", self.spec.flow.name)
        self.control.pause(timeout_s)

    def resume(self) -> None:
        """Poll again from the next uncommitted offset. Idempotent."""
        if self.control.resume():
            logger.info("ingest resumed dataflow=%s", self.spec.flow.name)

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
            threads=settings.staging.threads,
            recent_cache_bytes=settings.staging.recent_cache_mb * 2**20,
        )
        try:
            return self._run(own, stop, started)
        finally:
            own.close()

    def _run(self, store: StagingStore, stop: threading.Event, started: float) -> PipelineReport:
        settings, spec, options = self.settings, self.spec, self.options
        offsets = store.offsets()
        merge_state = store.partitions()
        if store.meta("kafka_log") not in (None, self.broker.log_id):
            logger.warning(
                "staged offsets belong to another Kafka log old=%s new=%s; reading the new log "
                "from its start (applied batch ids are skipped)",
                store.meta("kafka_log"),
                self.broker.log_id,
            )
            offsets, merge_state = {}, {}
        store.set_meta("kafka_log", self.broker.log_id)
        progress = store.streams()
        executor = start_executor(options.executor, spec.flow, store)
        self.report.resumed_from = store.watermark
        logger.info(
            "pipeline start dataflow=%s watermark=%s executor=%s",
            spec.flow.name,
            store.watermark,
            options.executor,
        )
        # 2.
        topics = spec.topics()
        wanted = {
            t: max(spec.streams[s].partitions for s in streams) for t, streams in topics.items()
        }
        ensure_topics(settings.kafka, self.broker.bootstrap_servers, wanted)
        check_topics(settings.kafka, self.broker.bootstrap_servers, wanted)
        replay_to = options.replay_to
        consumer = RecordConsumer(
            settings.kafka,
            self.broker.bootstrap_servers,
            list(topics),
            start=offsets if replay_to is None else {tp: offsets.get(tp, 0) for tp in replay_to},
            start_from=settings.ingest.start_from,
            group_id=f"streamdi.{spec.flow.name}" if replay_to is None else None,
        )
        feed: RecordFeed = consumer if replay_to is None else BoundedFeed(consumer, replay_to)
        assembler = BatchAssembler(
            spec.flow,
            topics,
            progress=progress,
            offsets=offsets,
            max_record_bytes=settings.kafka.max_record_bytes,
            allowed_lateness_ms=settings.ingest.allowed_lateness_ms,
            lateness=spec.lateness(),
            event_times=EventTimeBounds.from_settings(settings.ingest),
            partitions=consumer.partitions,
            merge_state=merge_state,
            partition_idle_ms=settings.ingest.partition_idle_ms,
        )
        # 3.
        collector_threads = self._start_collectors(stop, progress) if options.collect else []
        # 5.
        self._migration = start_migration_worker(
            store, settings, migrator=self.migrator, hook=self.faults.migration_hook()
        )
        committer = StagingCommitter(
            store,
            self.report,
            group=settings.ingest.commit_group,
            observers=self.observers,
            faults=self.faults,
            after_commit=self._after_commit,
            committed_offsets=offsets,
        )
        self._committer = committer
        committer.start(stop)
        every = settings.staging.checkpoint_every_s
        if every > 0 and options.replay_to is None:
            self._checkpointer = Checkpointer(
                store, every, settings.staging.checkpoints_keep, hook=self.faults.checkpoint_hook()
            )
            self._checkpointer.start()
        loop = self.consuming_loop(
            feed,
            assembler,
            executor,
            committer,
            next_batch=store.watermark + 1,
            busy=lambda: any(t.is_alive() for t in collector_threads) or not committer.idle(),
            started=started,
        )
        self._loop = loop
        self.started.set()
        try:
            # 4.
            loop.run(stop)
        finally:
            # 6.
            committer.close()
            if self._checkpointer is not None:
                self._checkpointer.stop()
            if self._migration is not None:
                self._migration.stop(push=None if self._failure() is None else False)
            feed.close()
            stop.set()
            for thread in collector_threads:
                thread.join(timeout=60)
            executor.close()
            # the loop's hand-off holds the engine and its state: a stopped pipeline its owner
            # keeps (a TPC-DI run audits after its updates) must not keep them alive
            loop.release()
            if options.progress:
                self._print_progress(started, loop.fetched_events, final=True)
        error = self._failure()
        if error is not None:
            raise error
        self.report.seconds = time.monotonic() - started
        logger.info(
            "pipeline stop batches=%s events=%s dead_letters=%s watermark=%s",
            self.report.batches,
            self.report.events,
            self.report.dead_letters,
            store.watermark,
        )
        return self.report

    def consuming_loop(
        self,
        feed: RecordFeed,
        assembler: BatchAssembler,
        executor: BatchExecutor,
        committer: StagingCommitter,
        *,
        next_batch: int,
        busy: Callable[[], bool],
        started: float,
    ) -> ConsumingLoop:
        """The loop of step 4 over ``feed``, wired to this pipeline's options, settings, pause
        control, committer, monitoring and progress line."""
        settings, options = self.settings, self.options
        topics = self.spec.topics()

        def hand_off(assembled: AssembledBatch) -> None:
            self.faults.before_execute(assembled.batch.batch_id)
            commit = execute_batch(executor, assembled)
            report = self.report
            report.batches += 1
            report.execute_s += commit.executed_ms / 1000
            for decision in commit.result.decisions:
                ms = decision.figures.get("step_ms", decision.figures.get("execute_ms"))
                if isinstance(ms, int | float):
                    report.step_s[decision.step] = report.step_s.get(decision.step, 0.0) + ms / 1000
            committer.submit(commit)

        def monitor() -> None:
            committed = committer.committed_offsets()
            feed.commit_for_monitoring(committed)
            self.consumer_lag = _lag_per_stream(feed, committed, topics)

        def progress(fetched_events: int) -> None:
            self._print_progress(started, fetched_events)

        rules = LoopRules(
            cut=CutRules(settings.engine.batch_size, settings.engine.batch_timeout_ms / 1000),
            poll_timeout_ms=settings.ingest.poll_timeout_ms,
            drain_s=options.drain_s,
            until_idle_s=options.until_idle_s,
            max_batches=options.max_batches,
        )
        return ConsumingLoop(
            feed,
            assembler,
            rules,
            next_batch=next_batch,
            hand_off=hand_off,
            control=self.control,
            check=self._raise_failure,
            busy=busy,
            monitor=monitor,
            progress=progress if options.progress else None,
        )

    def timings(self) -> dict[str, float]:
        """Seconds spent so far, by where (cumulative, for a caller that diffs two snapshots):
        ``kafka.poll`` (polls that brought records), ``assemble`` (filling and cutting batches),
        ``engine`` (running them; of it, ``step.<id>`` each transactional step as the executor
        timed it), ``staging.commit``, and per migration target ``load.<t>`` and ``merge.<t>``
        with ``staging.read`` (reading the deltas to migrate). Read from other threads without
        a lock: a snapshot may be a moment old."""
        out = {
            "kafka.poll": self._loop.poll_s if self._loop is not None else 0.0,
            "assemble": self._loop.assemble_s if self._loop is not None else 0.0,
            "engine": self.report.execute_s,
            "staging.commit": self.report.commit_s,
            **{f"step.{step}": s for step, s in list(self.report.step_s.items())},
        }
        if self._migration is not None:
            out.update(self._migration.migrator.spent())
        return out

    def _after_commit(self, commits: Sequence[BatchCommit]) -> None:
        if self._migration is not None:
            self._migration.notify(len(commits), committed_rows(commits))
        if self._checkpointer is not None:
            self._checkpointer.notify()

    def _failure(self) -> BaseException | None:
        """The first error of a collector or the committer, or None."""
        if self._error is not None:
            return self._error
        return self._committer.error if self._committer is not None else None

    def _raise_failure(self) -> None:
        error = self._failure()
        if error is not None:
            raise error
        if self._migration is not None and self._migration.error is not None:
            raise self._migration.error

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
                hook=self.faults.collector_hook(stream),
            )
            self.report.collectors.append(collector.report)

            def work(c: BatchCollector = collector) -> None:
                try:
                    run_collector(c, stop)
                except BaseException as exc:
                    logger.error("collector failed stream=%s: %s", c.stream, exc)
                    self._error = exc
                    stop.set()

            thread = threading.Thread(target=work, name=f"collector-{stream}", daemon=True)
            thread.start()
            threads.append(thread)
        return threads

    def _print_progress(self, started: float, fetched_events: int, *, final: bool = False) -> None:
        elapsed = max(time.monotonic() - started, 1e-9)
        committer = self._committer
        if committer is None:
            return
        with committer.lock:
            events = self.report.events
            batches = committer.committed_batches
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


def start_executor(name: str, flow: CompiledDataflow, store: StagingStore) -> BaseExecutor:
    """The executor ``name`` of ``flow`` holding the state of ``store``'s last commit, warmed up
    (compiled). Building it moves every state row through temporaries (the Arrow image read
    from staging, the columns converted for the executor), which the allocators keep for reuse
    once freed; they are given back to the system here (:func:`release_free_memory`), before
    the first batch: at TPC-DI SF 10 the built engine held 1,076 MB, 905 MB once released.
    The state is read with every core: the pipeline commits nothing before it holds its executor."""
    image = store.load_state(sorted_rows=False, threads=cores())
    executor = create_executor(name, flow, image)
    executor.warm_up()
    release_free_memory()
    return executor


def run_collector(
    collector: BatchCollector, stop: threading.Event, retry_s: float = COLLECTOR_RETRY_S
) -> None:
    """Run ``collector`` until its source ends or ``stop`` is set; while the broker is away (a
    :class:`~streamdi.errors.TransientError`), wait ``retry_s`` and run it again: it resumes
    from what the topic holds. Terminal errors are raised."""
    while True:
        try:
            collector.run(stop)
            return
        except TransientError as exc:
            if stop.is_set():
                logger.warning(
                    "collector stops without the broker stream=%s: %s", collector.stream, exc
                )
                return
            logger.warning(
                "collector waits for the broker stream=%s: %s; retrying in %.0f s",
                collector.stream,
                exc,
                retry_s,
            )
            stop.wait(retry_s)


def _lag_per_stream(
    consumer: RecordFeed,
    committed: dict[tuple[str, int], int],
    topics: dict[str, list[str]],
) -> dict[str, int]:
    """Records the brokers hold beyond the committed offsets, per stream (streams sharing a
    topic share its lag). Empty when the brokers do not answer: monitoring never stops the run."""
    ends = consumer.end_offsets(MONITOR_TIMEOUT_MS)
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
