"""The pipeline loop without a broker: an in-memory feed of Kafka records, a real staging DuckDB
file, the real serial executor, and the loop and committer wired as :mod:`runtime.pipeline` wires
them."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from etl_dataflows import Dataflow, col
from etl_dataflows.dataflow import CompiledDataflow
from etl_dataflows.executors import create_executor
from ingest.assembler import AssembledBatch, BatchAssembler, RawRecord, TopicPartition
from ingest.records import encode_batch
from runtime.committer import PipelineReport, StagingCommitter, execute_batch
from runtime.consuming import ConsumingLoop, LoopRules, PauseControl
from runtime.cutting import CutRules
from runtime.faults import PipelineFaults
from runtime.interfaces import BatchStage
from staging.batch_commit import BatchCommit
from staging.store import CommitHook, StagingStore


def pair_dataflow() -> CompiledDataflow:
    """Two streams, ``a`` and ``b`` (topics ``pair.a`` and ``pair.b``), each writing the shared
    table ``kv`` and logging what it applied to its own sink."""
    flow = Dataflow("pair")
    kv = flow.table("kv", key={"key": "int64"}, columns={"value": "int64", "stream": "string"})
    for stream in ("a", "b"):
        flow.source(stream, schema={"key": "int64", "value": "int64"})
        step = flow.transact(f"write_{stream}", input=stream)
        step.write(kv, "key", {"value": col("value"), "stream": stream})
        step.emit(key=col("key"), value=col("value"))
        flow.sink(f"log_{stream}", input=f"write_{stream}")
    return flow.build()


class MemoryFeed:
    """A :class:`runtime.interfaces.RecordFeed` over records held in memory: each poll returns
    up to ``per_poll`` of them in the order they were added (more may be added while it runs)."""

    def __init__(
        self,
        records: Iterable[RawRecord] = (),
        per_poll: int = 1_000,
        partitions: Iterable[TopicPartition] = (),
    ) -> None:
        self.per_poll = per_poll
        self.waiting: deque[RawRecord] = deque()
        #: End offsets; ``partitions`` start at 0 (as Kafka answers for an empty partition).
        self.ends: dict[TopicPartition, int] = dict.fromkeys(partitions, 0)
        self.positions: dict[TopicPartition, int] = {}
        self.polls = 0
        self.monitored: dict[TopicPartition, int] = {}
        self.closed = False
        #: Partitions whose records poll skips now (they keep their order), and every one that
        #: was ever paused.
        self.paused: set[TopicPartition] = set()
        self.ever_paused: set[TopicPartition] = set()
        self.lock = threading.Lock()
        #: Polls still to come back empty whatever waits (a fetch still on its way).
        self.withheld_polls = 0
        self.add(records)

    def add(self, records: Iterable[RawRecord]) -> None:
        with self.lock:
            for record in records:
                self.waiting.append(record)
                tp = (record.topic, record.partition)
                self.ends[tp] = max(self.ends.get(tp, 0), record.offset + 1)

    def poll(self, timeout_ms: int) -> list[RawRecord]:
        with self.lock:
            self.polls += 1
            out: list[RawRecord] = []
            if self.withheld_polls > 0:
                self.withheld_polls -= 1
                return out
            kept: deque[RawRecord] = deque()
            while self.waiting and len(out) < self.per_poll:
                record = self.waiting.popleft()
                paused = (record.topic, record.partition) in self.paused
                (kept if paused else out).append(record)
            kept.extend(self.waiting)
            self.waiting = kept
            for record in out:
                self.positions[(record.topic, record.partition)] = record.offset + 1
            return out

    def end_offsets(self, timeout_ms: int | None = None) -> dict[TopicPartition, int]:
        with self.lock:
            return dict(self.ends)

    def position(self, tp: TopicPartition) -> int:
        with self.lock:
            return self.positions.get(tp, 0)

    def pause(self, partitions: set[TopicPartition]) -> None:
        with self.lock:
            self.paused |= partitions
            self.ever_paused |= partitions

    def resume(self, partitions: set[TopicPartition]) -> None:
        with self.lock:
            self.paused -= partitions

    def commit_for_monitoring(self, offsets: Mapping[TopicPartition, int]) -> None:
        self.monitored = dict(offsets)

    def close(self) -> None:
        self.closed = True


class StreamWriter:
    """Kafka records as our collector writes them: one logical batch per record, batch ids and
    positions counting up per stream, offsets counting up per topic."""

    def __init__(self, flow: str = "pair") -> None:
        self.flow = flow
        self.batch: dict[str, int] = {}
        self.pos: dict[str, int] = {}
        self.offset: dict[str, int] = {}

    def records(self, stream: str, keys: list[int], *, ts: int = 0) -> list[RawRecord]:
        first = self.pos.get(stream, 0)
        n = len(keys)
        pos = np.arange(first, first + n, dtype=np.int64)
        events = pa.table(
            {
                "key": pa.array(keys, pa.int64()),
                "value": pa.array(pos * 10, pa.int64()),
                "_ts": pa.array(ts + pos, pa.int64()),
                "_pos": pa.array(pos),
            }
        )
        batch_id = self.batch.get(stream, 0) + 1
        out = encode_batch(stream, batch_id, events, [], cap=1_000_000, last_pos=first + n - 1)
        topic = f"{self.flow}.{stream}"
        offset = self.offset.get(topic, 0)
        self.batch[stream], self.pos[stream] = batch_id, first + n
        self.offset[topic] = offset + len(out)
        return [RawRecord(topic, 0, offset + i, r.value, r.headers) for i, r in enumerate(out)]


class FailingStage:
    """The real store, except that committing batch ``fail_at`` raises ``error`` (nothing of
    that commit is applied)."""

    def __init__(self, store: StagingStore, fail_at: int, error: BaseException) -> None:
        self.store, self.fail_at, self.error = store, fail_at, error

    def commit(self, commits: list[BatchCommit], *, hook: CommitHook | None = None) -> None:
        if any(c.batch_id == self.fail_at for c in commits):
            raise self.error
        self.store.commit(commits, hook=hook)


class LoopRig:
    """A :class:`~runtime.consuming.ConsumingLoop` over a :class:`MemoryFeed`, committing to a
    staging file through a :class:`~runtime.committer.StagingCommitter` (``group`` batches at
    most per commit), as the pipeline wires them."""

    def __init__(
        self,
        path: Path,
        feed: MemoryFeed,
        *,
        batch_size: int = 1_000,
        timeout_s: float = 60.0,
        drain_s: float = 0.0,
        until_idle_s: float | None = None,
        max_batches: int | None = None,
        group: int = 1,
        stage: Any = None,
        partitions: Sequence[TopicPartition] = (),
        partition_idle_ms: int = 2_000,
    ) -> None:
        self.flow = pair_dataflow()
        self.store = StagingStore(path, self.flow)
        self.feed = feed
        self.stop = threading.Event()
        self.executor = create_executor("serial", self.flow, self.store.load_state())
        self.report = PipelineReport()
        self.cut: list[tuple[int, int]] = []
        stage_: BatchStage = stage(self.store) if stage is not None else self.store
        self.committer = StagingCommitter(
            stage_, self.report, group=group, observers=[], faults=PipelineFaults()
        )
        assembler = BatchAssembler(
            self.flow,
            {f"pair.{s}": [s] for s in self.flow.sources},
            progress=self.store.streams(),
            offsets=self.store.offsets(),
            max_record_bytes=1_000_000,
            allowed_lateness_ms=None,
            partitions=partitions,
            merge_state=self.store.partitions(),
            partition_idle_ms=partition_idle_ms,
        )
        self.control = PauseControl()
        self.busy = False
        self.loop = ConsumingLoop(
            feed,
            assembler,
            LoopRules(
                cut=CutRules(batch_size, timeout_s),
                poll_timeout_ms=10,
                drain_s=drain_s,
                until_idle_s=until_idle_s,
                max_batches=max_batches,
                monitor_every_s=0.0,
                idle_check_s=0.01,
            ),
            next_batch=self.store.watermark + 1,
            hand_off=self._hand_off,
            control=self.control,
            check=self._check,
            busy=lambda: self.busy or not self.committer.idle(),
            monitor=lambda: feed.commit_for_monitoring(self.committer.committed_offsets()),
        )

    def _hand_off(self, assembled: AssembledBatch) -> None:
        self.cut.append((assembled.batch.batch_id, assembled.events))
        self.committer.submit(execute_batch(self.executor, assembled))

    def _check(self) -> None:
        if self.committer.error is not None:
            raise self.committer.error

    def run(self) -> None:
        """Run the loop to its end, then close the committer (the pipeline's step 6)."""
        self.committer.start(self.stop)
        try:
            self.loop.run(self.stop)
        finally:
            self.committer.close()

    def start(self) -> threading.Thread:
        """:meth:`run` in a thread; its error, if any, in :attr:`error`."""
        self.error: BaseException | None = None

        def work() -> None:
            try:
                self.run()
            except BaseException as exc:
                self.error = exc

        thread = threading.Thread(target=work, daemon=True)
        thread.start()
        return thread

    def staged(self, sink: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self.store.query(
            f'SELECT batch_id, "key", "value", "_pos" FROM outputs."{sink}" ORDER BY batch_id, "_pos"'
        ).to_pylist()
        return rows

    def close(self) -> None:
        self.executor.close()
        self.store.close()
