"""The collector: reads a source, cuts logical batches, and produces each as Kafka records.

A logical batch closes at ``batch_events`` events (by count), ``batch_ms`` after its first event
(by time), or at a punctuation of the source (e.g. the end of a file). Batch ids increase by one per
stream from 1. Each batch becomes one record in Arrow IPC form, or several when it exceeds the
record byte cap (:mod:`ingest.records`). On a topic of several partitions the batches are spread
round-robin by batch id and produced in Kafka transactions (:mod:`ingest.spreading`).

Producing is safe to repeat after a crash. The protocol of :meth:`BatchCollector.run`:

1. Take the stream's lock file (one collector per stream).
2. Read the checkpoint (last batch id, last source position and record offset per partition, for
   this log and this source), then read the topic after those offsets (``read_committed``) up
   to its end offsets of now (exactly: never "until a poll comes back empty"): the last
   *complete* batch found there is the true resume point (it may be newer than the checkpoint
   when the collector died between producing and checkpointing). Resume at the next position with
   the next batch id; a batch that was cut off half-way is produced again from its first part
   (the consumer drops the torn copy; on several partitions a torn batch is an aborted
   transaction that no reader sees).
3. Read, cut and produce batches. Every chunk's event times are checked against the run's bounds
   (:mod:`ingest.eventtime`; a source checks them too, this covers sources that build ``_ts``
   themselves): an event out of range becomes a reject with its row as JSON. The producer waits
   for all in-sync replicas (``acks=all``), retries, is idempotent, and blocks when its bounded
   buffer is full (backpressure). On several partitions, the open transaction commits at the end
   of every chunk the source hands over (a push source's request waits for it).
4. Every few batches and at the end: commit the open transaction, flush the producer, then write
   the checkpoint (atomically, by rename). A chunk that waits for its fate (an HTTP push) is told
   its batch ids only after this step; if the run fails first, the source's iterator is closed
   and the push is told it was not produced.

``hook(point, batch_id)`` (fault injection: :mod:`runtime.faults`) is called at the dangerous
points between steps 3 and 4: ``sent`` (a batch's records handed to the producer), ``flushed``
(Kafka acknowledged the batches up to ``batch_id``; no checkpoint) and ``checkpointed`` (the
checkpoint written; the waiting source not told yet).

A broker that goes away is ridden out by the producer (it retries for
:data:`DELIVERY_TIMEOUT_MS`); longer, and the run raises :class:`BrokerUnavailable` (transient):
the caller runs the collector again, which resumes from step 2 (the topic, not memory, says
where).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ingest.broker import client_config
from ingest.eventtime import EventTimeBounds
from ingest.exceptions import BrokerUnavailable, CollectorBusy
from ingest.records import BATCH, LAST_POS, PART, STREAM, encode_batch, header_map
from ingest.sources import BaseSource, Reject, SourceChunk, json_payload
from ingest.spreading import BatchSender, open_sender
from ingest.topic_checks import topic_partitions
from streamdi.settings import KafkaSettings

logger = logging.getLogger(__name__)

#: Flush and checkpoint after this many batches.
CHECKPOINT_EVERY = 16
#: The resume scan gives up (the broker is unavailable) when the topic's end is not reached in
#: this long.
SCAN_TIMEOUT_S = 120.0
#: How long the producer tries to deliver a record (riding out a broker restart) before the
#: collector gives up and is restarted by its run.
DELIVERY_TIMEOUT_MS = 120_000


@dataclass(frozen=True)
class ResumePoint:
    """Where a collector goes on: the next batch id and the first source position to read."""

    next_batch: int
    start_pos: int
    offset: int = -1
    #: On a topic of several partitions: the offset of the last record checkpointed per partition.
    offsets: Mapping[int, int] = field(default_factory=dict)


@dataclass
class CollectorReport:
    stream: str
    batches: int = 0
    records: int = 0
    events: int = 0
    rejects: int = 0
    resumed_at: int = 0
    first_batch: int = 1
    seconds: float = 0.0


class BatchCollector:
    """Collects one source into one stream's topic; see the module docstring."""

    def __init__(
        self,
        *,
        stream: str,
        topic: str,
        source: BaseSource,
        kafka: KafkaSettings,
        bootstrap: str,
        log_id: str,
        checkpoint_dir: Path,
        batch_events: int = 10_000,
        batch_ms: int = 1_000,
        buffer_bytes: int = 64 * 1024 * 1024,
        fallback: ResumePoint | None = None,
        event_times: EventTimeBounds | None = None,
        hook: Callable[[str, int], None] | None = None,
    ) -> None:
        self.stream = stream
        self.hook = hook
        self.topic = topic
        self.source = source
        self.kafka = kafka
        self.bootstrap = bootstrap
        self.log_id = log_id
        self.checkpoint_path = Path(checkpoint_dir) / f"{stream}.json"
        self.batch_events = batch_events
        self.batch_ms = batch_ms
        self.buffer_bytes = buffer_bytes
        self.cap = kafka.max_record_bytes
        self.fallback = fallback
        self.event_times = event_times or EventTimeBounds()
        source.event_time_bounds = self.event_times
        source.max_record_bytes = self.cap
        self.report = CollectorReport(stream)
        #: The topic's partitions, as the last resume scan found them.
        self.partitions = 1

    # -- 1. and 2. ---------------------------------------------------------------------------------

    def _read_checkpoint(self) -> ResumePoint | None:
        try:
            data = json.loads(self.checkpoint_path.read_text())
        except (OSError, ValueError):
            return None
        if data.get("log_id") != self.log_id or data.get("source") != self.source.identity:
            return None
        return ResumePoint(
            int(data["batch_id"]) + 1,
            int(data["last_pos"]) + 1,
            int(data["offset"]),
            {int(p): int(o) for p, o in data.get("offsets", {}).items()},
        )

    def _write_checkpoint(
        self, batch_id: int, last_pos: int, offset: int, offsets: Mapping[int, int]
    ) -> None:
        data = {
            "log_id": self.log_id,
            "source": self.source.identity,
            "stream": self.stream,
            "batch_id": batch_id,
            "last_pos": last_pos,
            "offset": offset,
            "offsets": {str(p): o for p, o in sorted(offsets.items())},
        }
        tmp = self.checkpoint_path.with_suffix(".tmp")
        with tmp.open("w") as handle:
            json.dump(data, handle)
            handle.flush()
            os.fsync(handle.fileno())
        tmp.replace(self.checkpoint_path)

    def resume_point(self) -> ResumePoint:
        """Step 2 of the protocol: the checkpoint, corrected by what the topic really holds."""
        point = self._read_checkpoint() or self.fallback or ResumePoint(1, 0)
        scanned = self._scan_topic(point)
        if scanned is not None and scanned.next_batch > point.next_batch:
            return ResumePoint(
                scanned.next_batch,
                scanned.start_pos,
                scanned.offset,
                {**point.offsets, **scanned.offsets},
            )
        return point

    def _scan_topic(self, point: ResumePoint) -> ResumePoint | None:
        """The last complete batch of this stream after ``point``'s offsets (one partition:
        ``point.offset``; several: ``point.offsets``, from the start of a partition it has none
        for). The topic is read (``read_committed``) up to its end offsets of now (exactly, not
        until polls come back empty), so a batch produced before a crash is always found. A
        broker that does not answer, or does not deliver up to its end within
        :data:`SCAN_TIMEOUT_S`, is :class:`BrokerUnavailable` (the caller waits and retries)."""
        from kafka import KafkaConsumer, TopicPartition
        from kafka.errors import KafkaError

        try:
            consumer = KafkaConsumer(
                **client_config(self.kafka, self.bootstrap),
                enable_auto_commit=False,
                group_id=None,
                max_partition_fetch_bytes=16 * 1024 * 1024,
                isolation_level="read_committed",
                reconnect_backoff_max_ms=1000,
            )
        except KafkaError as exc:
            raise BrokerUnavailable(f"cannot read topic {self.topic!r}: {exc}") from exc
        try:
            partitions = topic_partitions(consumer, self.topic)
            tps = [TopicPartition(self.topic, p) for p in sorted(partitions)]
            self.partitions = len(tps)
            consumer.assign(tps)
            ends = consumer.end_offsets(tps)
            left: dict[Any, int] = {}
            for tp in tps:
                after = point.offset if len(tps) == 1 else point.offsets.get(tp.partition, -1)
                start = max(0, after + 1)
                if int(ends.get(tp, 0)) > start:
                    left[tp] = int(ends[tp])
                    consumer.seek(tp, start)
            best: ResumePoint | None = None
            deadline = time.monotonic() + SCAN_TIMEOUT_S
            while left:
                if time.monotonic() > deadline:
                    raise BrokerUnavailable(
                        f"reading topic {self.topic!r} up to its end offsets {left} took more "
                        f"than {SCAN_TIMEOUT_S:.0f} s"
                    )
                polled = consumer.poll(timeout_ms=400, max_records=2000)
                for records in polled.values():
                    for record in records:
                        found = self._complete_batch(record)
                        if found is not None and (best is None or found[0] >= best.next_batch):
                            best = ResumePoint(
                                found[0] + 1,
                                found[1] + 1,
                                record.offset,
                                {record.partition: record.offset},
                            )
                for tp in list(left):
                    if consumer.position(tp) >= left[tp]:
                        del left[tp]
            return best
        except KafkaError as exc:
            raise BrokerUnavailable(f"cannot read topic {self.topic!r}: {exc}") from exc
        finally:
            consumer.close()

    def _complete_batch(self, record: Any) -> tuple[int, int] | None:
        """``(batch id, last position)`` of ``record`` when it is the last part of a batch of
        this stream, else None."""
        headers = header_map(record.headers)
        if headers.get(STREAM) != self.stream or LAST_POS not in headers:
            return None
        part, _, parts = headers.get(PART, "0/1").partition("/")
        if int(part) != int(parts) - 1:
            return None
        return int(headers[BATCH]), int(headers[LAST_POS])

    # -- 3. and 4. ---------------------------------------------------------------------------------

    def _sender(self) -> BatchSender:
        """A sender for the topic (:func:`~ingest.spreading.open_sender`: transactional when the
        topic has several partitions, as the resume scan found it)."""
        config = dict(
            **client_config(self.kafka, self.bootstrap),
            acks="all",
            enable_idempotence=True,
            linger_ms=5,
            max_request_size=self.cap + 256 * 1024,
            max_block_ms=DELIVERY_TIMEOUT_MS,
            delivery_timeout_ms=DELIVERY_TIMEOUT_MS,
            reconnect_backoff_max_ms=1000,
        )
        return open_sender(config, self.topic, self.partitions, self.stream)

    def _backpressure(self, in_flight: deque[tuple[Any, int]], held: int) -> int:
        """Wait for the oldest sends until at most ``buffer_bytes`` are unacknowledged (the
        client's own buffer is unbounded, so the collector bounds it). Returns the bytes held."""
        from kafka.errors import KafkaError

        while in_flight and (held > self.buffer_bytes or in_flight[0][0].is_done):
            future, size = in_flight.popleft()
            try:
                future.get(timeout=120)
            except KafkaError as exc:
                raise BrokerUnavailable(f"producing to {self.topic!r} failed: {exc}") from exc
            held -= size
        return held

    def run(self, stop: threading.Event | None = None) -> CollectorReport:
        """Collect the source to its end (or until ``stop`` is set); see the module docstring."""
        self.checkpoint_path.parent.mkdir(parents=True, exist_ok=True)
        lock = self.checkpoint_path.with_suffix(".lock").open("w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            lock.close()
            raise CollectorBusy(
                f"another collector is collecting stream {self.stream!r} ({self.checkpoint_path})"
            ) from exc
        try:
            return self._run(stop)
        finally:
            lock.close()

    def _run(self, stop: threading.Event | None) -> CollectorReport:
        started = time.monotonic()
        point = self.resume_point()
        report = self.report
        report.resumed_at = point.start_pos
        report.first_batch = point.next_batch
        logger.info(
            "collector start stream=%s topic=%s batch_id=%s pos=%s",
            self.stream,
            self.topic,
            point.next_batch,
            point.start_pos,
        )
        sender = self._sender()
        checkpointed: dict[int, int] = dict(point.offsets)
        batch_id = point.next_batch
        pending: list[pa.Table] = []
        pending_rejects: list[Reject] = []
        pending_events = 0
        opened_at: float | None = None
        covered = point.start_pos - 1
        last_future: Any = None
        unflushed = 0
        in_flight: deque[tuple[Any, int]] = deque()
        held = 0

        def flush(last_pos: int, punctuation: bool) -> None:
            nonlocal batch_id, pending, pending_rejects, pending_events, opened_at
            nonlocal last_future, unflushed, held
            if not pending and not pending_rejects:
                return
            events = pa.concat_tables(pending) if pending else self.source.schema.empty_table()
            records = encode_batch(
                self.stream,
                batch_id,
                events,
                pending_rejects,
                cap=self.cap,
                last_pos=last_pos,
                punctuation=punctuation,
            )
            for record in records:
                last_future = sender.send(batch_id, record.value, record.headers)
                in_flight.append((last_future, len(record.value)))
                held += len(record.value)
                held = self._backpressure(in_flight, held)
            if self.hook is not None:
                self.hook("sent", batch_id)
            if events.num_rows:
                sender.sent_events_up_to(int(pc.max(events.column("_ts")).as_py()))
            report.batches += 1
            report.records += len(records)
            report.events += events.num_rows
            report.rejects += len(pending_rejects)
            pending, pending_rejects, pending_events, opened_at = [], [], 0, None
            unflushed += 1
            if unflushed >= CHECKPOINT_EVERY:
                self._checkpoint(sender, last_future, batch_id, last_pos, checkpointed)
                unflushed = 0
            batch_id += 1

        chunks = self.source.read(point.start_pos)
        try:
            for chunk in chunks:
                reject_out_of_range(chunk, self.event_times)
                first_batch = batch_id
                events = chunk.events
                rejects = list(chunk.rejects)
                offset = 0
                while offset < events.num_rows:
                    if opened_at is None:
                        opened_at = time.monotonic()
                    take = min(self.batch_events - pending_events, events.num_rows - offset)
                    piece = events.slice(offset, take)
                    offset += take
                    cut_pos = int(piece.column("_pos")[-1].as_py())
                    pending.append(piece)
                    pending_events += take
                    pending_rejects.extend(r for r in rejects if r[0] <= cut_pos)
                    rejects = [r for r in rejects if r[0] > cut_pos]
                    if pending_events >= self.batch_events:
                        # The cut is right after this event: later rejects go with the next batch.
                        flush(cut_pos, False)
                        covered = cut_pos
                pending_rejects.extend(rejects)
                if rejects and opened_at is None:
                    opened_at = time.monotonic()
                covered = max(covered, chunk.last_pos)
                timed_out = opened_at is not None and (
                    (time.monotonic() - opened_at) * 1000 >= self.batch_ms
                )
                if chunk.punctuation or timed_out:
                    flush(covered, chunk.punctuation)
                if chunk.on_produced is not None:
                    # the source waits for its events to be durable in the topic
                    if last_future is not None:
                        self._checkpoint(sender, last_future, batch_id - 1, covered, checkpointed)
                        unflushed = 0
                    chunk.on_produced(first_batch, batch_id - 1)
                sender.commit()
                if stop is not None and stop.is_set():
                    break
            flush(covered, False)
            if stop is None or not stop.is_set():
                sender.end_of_source()
            if last_future is not None:
                self._checkpoint(sender, last_future, batch_id - 1, covered, checkpointed)
        finally:
            # a source waiting for a chunk's fate (an HTTP push) learns it was not produced
            close = getattr(chunks, "close", None)
            if close is not None:
                close()
            sender.close(timeout_s=30)
        report.seconds = time.monotonic() - started
        logger.info(
            "collector done stream=%s batches=%s events=%s rejects=%s seconds=%.2f",
            self.stream,
            report.batches,
            report.events,
            report.rejects,
            report.seconds,
        )
        return report

    def _checkpoint(
        self,
        sender: BatchSender,
        future: Any,
        batch_id: int,
        last_pos: int,
        offsets: dict[int, int],
    ) -> None:
        """Step 4: commit the open transaction, flush, write the checkpoint (``offsets``: the
        last offset checkpointed per partition, updated)."""
        from kafka.errors import KafkaError

        sender.commit()
        try:
            sender.producer.flush(timeout=120)
            metadata = future.get(timeout=120)
        except KafkaError as exc:
            raise BrokerUnavailable(f"producing to {self.topic!r} failed: {exc}") from exc
        offsets.update(sender.offsets())
        if self.hook is not None:
            self.hook("flushed", batch_id)
        self._write_checkpoint(batch_id, last_pos, int(metadata.offset), offsets)
        if self.hook is not None:
            self.hook("checkpointed", batch_id)


def reject_out_of_range(chunk: SourceChunk, bounds: EventTimeBounds) -> None:
    """Move the events of ``chunk`` whose event time is null or out of ``bounds`` to its rejects
    (each with its row as JSON, ``_ts`` included)."""
    events = chunk.events
    if not events.num_rows:
        return
    ts = events.column("_ts")
    values = np.asarray(ts.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
    problems = bounds.check(values)
    for i in np.flatnonzero(np.asarray(ts.is_null())).tolist():
        problems[int(i)] = "no event time"
    if not problems:
        return
    rows = sorted(problems)
    for i, row in zip(rows, events.take(pa.array(rows, pa.int64())).to_pylist(), strict=True):
        pos = int(row.pop("_pos"))
        chunk.rejects.append(Reject(pos, problems[i], json_payload(row), "json"))
    chunk.rejects.sort(key=lambda r: r[0])
    keep = np.ones(events.num_rows, dtype=bool)
    keep[rows] = False
    chunk.events = events.filter(pa.array(keep))
