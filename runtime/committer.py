"""The hand-off from the engine to staging and migration: running a batch, and committing it.

The consuming loop runs each batch it cuts (:func:`execute_batch`) and submits the result to the
:class:`StagingCommitter`, whose thread commits while the engine works on the next batch. A bounded
queue between them (``INGEST__COMMIT_GROUP``) is the backpressure; a committer that falls behind
takes several queued batches into one commit.

The committer's protocol, per group, in this order:

1. Take the next queued batch and, without waiting, up to ``group - 1`` more (a ``None`` in the
   queue is the end: commit what was taken, then stop).
2. Commit the group to staging in one transaction (:meth:`BatchStage.commit`); on failure record
   the error, set ``stop`` and end (nothing of the group is staged; the run fails).
3. Tell the migration worker what was staged (``after_commit``).
4. Tell every observer of each committed batch (an observer that raises is logged, never fatal).
5. Account the group in the report and the committed offsets (for monitoring and lag).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from etl_dataflows.batch import StepDecision, StepStats
from ingest.assembler import AssembledBatch, TopicPartition, engine_dead_letters
from ingest.collector import CollectorReport
from runtime.faults import PipelineFaults
from runtime.interfaces import BatchExecutor, BatchStage
from staging.batch_commit import BatchCommit, StreamProgress

logger = logging.getLogger(__name__)


@dataclass
class PipelineReport:
    batches: int = 0
    events: int = 0
    records: int = 0
    dead_letters: int = 0
    commits: int = 0
    seconds: float = 0.0
    resumed_from: int = 0
    #: seconds the engine spent running batches (the consuming loop's thread)
    execute_s: float = 0.0
    #: seconds spent in staging commits (the committer's thread)
    commit_s: float = 0.0
    #: seconds each transactional step took to run (of ``execute_s``; the engine's decisions)
    step_s: dict[str, float] = field(default_factory=dict)
    commit_latency_ms: list[float] = field(default_factory=list)
    collectors: list[CollectorReport] = field(default_factory=list)

    def percentile(self, q: float) -> float:
        if not self.commit_latency_ms:
            return 0.0
        return float(np.percentile(np.asarray(self.commit_latency_ms), q))


@dataclass(frozen=True)
class CommittedBatch:
    """What :attr:`runtime.pipeline.Pipeline.observers` learn of each committed batch (the
    service's metrics and its console, :class:`api.hosted.CommittedBatchFacts`). It holds only
    small facts and references the engine already made (no row data), so an observer may keep
    it."""

    batch_id: int
    events: int
    #: time the engine spent running the batch
    executed_s: float
    #: from the batch's first record arriving to its staging commit
    latency_s: float
    records: int = 0
    #: dead letters the commit wrote (ingest's rejects and the engine's)
    dead_letters: int = 0
    #: epoch seconds: the batch's first record arrived; its staging commit returned
    arrived_at: float = 0.0
    committed_at: float = 0.0
    #: duration of the staging commit that took the batch (a group commit's batches share it)
    commit_s: float = 0.0
    #: the engine's decision per transactional step (none from the serial executor)
    decisions: tuple[StepDecision, ...] = ()
    #: the engine's counts per step
    steps: Mapping[str, StepStats] = field(default_factory=dict)
    #: per stream, its progress after this batch (the streams the batch consumed from)
    streams: Mapping[str, StreamProgress] = field(default_factory=dict)

    @classmethod
    def of(
        cls, commit: BatchCommit, latency_s: float, committed_at: float, commit_s: float
    ) -> CommittedBatch:
        """The facts of ``commit``, committed at ``committed_at`` by a commit of
        ``commit_s``."""
        result = commit.result
        return cls(
            batch_id=commit.batch_id,
            events=commit.events,
            executed_s=commit.executed_ms / 1000,
            latency_s=latency_s,
            records=commit.records,
            dead_letters=commit.dead_letters.num_rows,
            arrived_at=commit.arrived_at,
            committed_at=committed_at,
            commit_s=commit_s,
            decisions=tuple(result.decisions),
            steps=dict(result.stats),
            streams=dict(commit.streams),
        )


def execute_batch(executor: BatchExecutor, assembled: AssembledBatch) -> BatchCommit:
    """Run ``assembled`` through the engine; what its staging commit writes: the engine's result,
    the assembler's and the engine's dead letters, the offsets and stream progress it covers."""
    t0 = time.monotonic()
    result = executor.run_batch(assembled.batch)
    executed_ms = (time.monotonic() - t0) * 1000
    dead = pa.concat_tables(
        [assembled.dead_letters, engine_dead_letters(assembled, result.dead_letters)]
    )
    return BatchCommit(
        batch_id=assembled.batch.batch_id,
        result=result,
        dead_letters=dead,
        offsets=assembled.offsets,
        streams=assembled.streams,
        events=assembled.events,
        records=assembled.records,
        arrived_at=assembled.arrived_at,
        executed_ms=executed_ms,
        replayed=assembled.replayed,
        partitions=assembled.partitions,
    )


@dataclass
class _Queued:
    commit: BatchCommit
    arrived_mono: float


class StagingCommitter:
    """Commits submitted batches in a thread; see the module docstring. ``observers`` and
    ``after_commit`` are called from that thread."""

    def __init__(
        self,
        store: BatchStage,
        report: PipelineReport,
        *,
        group: int,
        observers: list[Callable[[CommittedBatch], None]],
        faults: PipelineFaults,
        after_commit: Callable[[Sequence[BatchCommit]], None] | None = None,
        committed_offsets: dict[TopicPartition, int] | None = None,
    ) -> None:
        self.store = store
        self.report = report
        self.group = group
        self.observers = observers
        self.faults = faults
        self.after_commit = after_commit
        #: The error that ended the committer (then nothing more commits), or None.
        self.error: BaseException | None = None
        #: Batches committed by this committer.
        self.committed_batches = 0
        self.lock = threading.Lock()
        self._offsets: dict[TopicPartition, int] = dict(committed_offsets or {})
        self._queue: queue.Queue[_Queued | None] = queue.Queue(maxsize=group)
        self._thread: threading.Thread | None = None

    def start(self, stop: threading.Event) -> None:
        self._thread = threading.Thread(
            target=self._loop, args=(stop,), name="staging-committer", daemon=True
        )
        self._thread.start()

    def submit(self, commit: BatchCommit) -> None:
        """Queue ``commit`` (blocks while the queue is full: the backpressure). Raises the
        committer's error once it has failed: nothing takes from the queue any more."""
        arrived_mono = time.monotonic() - max(0.0, time.time() - commit.arrived_at)
        self._put(_Queued(commit, arrived_mono))

    def idle(self) -> bool:
        """Nothing is waiting to be committed."""
        return self._queue.empty()

    def committed_offsets(self) -> dict[TopicPartition, int]:
        with self.lock:
            return dict(self._offsets)

    def close(self) -> None:
        """Commit what is queued, then end the thread (at once if it has failed)."""
        # a failed committer takes nothing more: its error is :attr:`error`
        with contextlib.suppress(BaseException):
            self._put(None)
        if self._thread is not None:
            self._thread.join()

    def _put(self, item: _Queued | None) -> None:
        while True:
            if self.error is not None:
                raise self.error
            try:
                self._queue.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def _take_group(self) -> tuple[list[_Queued], bool]:
        # 1.
        item = self._queue.get()
        if item is None:
            return [], True
        group = [item]
        while len(group) < self.group:
            try:
                more = self._queue.get_nowait()
            except queue.Empty:
                break
            if more is None:
                return group, True
            group.append(more)
        return group, False

    def _loop(self, stop: threading.Event) -> None:
        done = False
        while not done:
            group, done = self._take_group()
            if not group:
                break
            ids = [g.commit.batch_id for g in group]
            # 2.
            commit_started = time.monotonic()
            try:
                self.store.commit(
                    [g.commit for g in group], hook=self.faults.commit_hook(ids[0], ids[-1])
                )
            except BaseException as exc:
                logger.error("staging commit failed batch_ids=%s: %s", ids, exc)
                self.error = exc
                stop.set()
                return
            commit_s = time.monotonic() - commit_started
            self.faults.after_commit(ids[0], ids[-1])
            # 3.
            if self.after_commit is not None:
                self.after_commit([g.commit for g in group])
            # 4.
            now = time.monotonic()
            committed_at = time.time()
            for g in group if self.observers else ():
                seen = CommittedBatch.of(g.commit, now - g.arrived_mono, committed_at, commit_s)
                for observe in self.observers:
                    try:
                        observe(seen)
                    except Exception as exc:  # an observer must never stop the pipeline
                        logger.warning("batch observer failed: %s", exc)
            # 5.
            with self.lock:
                for g in group:
                    self.report.commit_latency_ms.append((now - g.arrived_mono) * 1000)
                    self.report.events += g.commit.events
                    self.report.records += g.commit.records
                    self.report.dead_letters += g.commit.dead_letters.num_rows
                    self._offsets.update(g.commit.offsets)
                self.report.commits += 1
                self.report.commit_s += now - commit_started
                self.committed_batches += len(group)
