"""How a collector spreads a stream's logical batches over its topic's partitions.

* **Placement.** A logical batch goes whole to one partition, chosen round-robin by its batch id:
  batch ``b`` to partition ``(b - 1) mod n``. Each partition thus gets every ``n``-th batch, in
  event-time order when the source is (so the consumer's minimum-watermark merge,
  :mod:`ingest.merging`, applies the stream in event-time order), and a batch produced again
  after a crash lands in the partition of its first copy, where the consumer recognizes it as a
  duplicate by its batch id. (Spreading by a key column would cut a batch across partitions and
  interleave event times within each; the engine's operation chains already group by key.)
* **Visibility.** On a topic of several partitions the producer is *transactional*
  (``transactional_id`` = ``streamdi.collector.<topic>.<stream>``, so a new collector fences a
  killed one and aborts its open transaction): the batches sent since the last commit become
  visible together when :meth:`BatchSender.commit` commits, and the consumer reads
  ``read_committed``. A batch of several records (parts) is therefore never seen half, and the
  batches visible in the topic are always a prefix of the stream's batch ids (a later batch on one
  partition is never visible while an earlier one on another is not), which is what the
  collector's resume scan relies on. One partition needs neither: Kafka keeps a partition's
  records in order, and the consumer waits for a batch's last part before it applies any.
* **Watermarks.** Before each commit, every partition that got no batch in the transaction gets a
  ``watermark`` record (:func:`ingest.records.watermark_record`) with the newest event time sent
  so far: the source is read in order, so nothing older follows, and the consumer's merge need
  not wait for a silent partition to go idle. At the end of a finite source every partition gets
  the newest event time plus one (nothing more follows at all).
"""

from __future__ import annotations

import contextlib
from typing import Any

from ingest.exceptions import BrokerUnavailable
from ingest.records import Headers, watermark_record


def partition_of(batch_id: int, partitions: int) -> int:
    """The partition logical batch ``batch_id`` (from 1) goes to, of ``partitions``."""
    return (batch_id - 1) % partitions


def transactional_id(topic: str, stream: str) -> str:
    """The producer's transactional id: stable per (topic, stream), so restarts fence."""
    return f"streamdi.collector.{topic}.{stream}"


def open_sender(config: dict[str, Any], topic: str, partitions: int, stream: str) -> BatchSender:
    """A :class:`BatchSender` for ``stream`` on ``topic`` of ``partitions``, its producer made
    from ``config`` (kafka-python settings): transactional, with :func:`transactional_id`, when
    the topic has several partitions."""
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    try:
        if partitions > 1:
            producer = KafkaProducer(
                **config, transactional_id=transactional_id(topic, stream), retry_backoff_ms=20
            )
        else:
            producer = KafkaProducer(**config)
    except KafkaError as exc:
        raise BrokerUnavailable(f"cannot produce to {topic!r}: {exc}") from exc
    return BatchSender(producer, topic, partitions, stream=stream)


class BatchSender:
    """Sends the records of logical batches to their partitions (see the module docstring).
    ``producer`` is a kafka-python ``KafkaProducer``, made with a ``transactional_id`` when the
    topic has several partitions (:func:`open_sender` makes both)."""

    def __init__(self, producer: Any, topic: str, partitions: int, *, stream: str = "") -> None:
        from kafka.errors import KafkaError

        self.producer = producer
        self.stream = stream
        #: The newest event time sent (None: none yet).
        self.newest: int | None = None
        self._written: set[int] = set()
        self.topic = topic
        self.partitions = max(1, partitions)
        self.transactional = self.partitions > 1
        self._open = False
        #: The newest send per partition.
        self.last: dict[int, Any] = {}
        if self.transactional:
            try:
                producer.init_transactions()
            except KafkaError as exc:
                raise BrokerUnavailable(
                    f"cannot start a Kafka transaction for {topic!r}: {exc}"
                ) from exc

    def send(self, batch_id: int, value: bytes, headers: Headers) -> Any:
        """Send one record of batch ``batch_id`` to its partition; its future."""
        from kafka.errors import KafkaError

        partition = partition_of(batch_id, self.partitions)
        try:
            self._begin()
            future = self.producer.send(
                self.topic, value=value, headers=headers, partition=partition
            )
        except KafkaError as exc:
            raise BrokerUnavailable(f"producing to {self.topic!r} failed: {exc}") from exc
        self.last[partition] = future
        self._written.add(partition)
        return future

    def _begin(self) -> None:
        """Open a transaction for what is sent next, unless one is open (transactional only)."""
        if self.transactional and not self._open:
            self.producer.begin_transaction()
            self._open = True

    def sent_events_up_to(self, micros: int) -> None:
        """The batch just sent held events up to ``micros`` (its newest ``_ts``)."""
        self.newest = micros if self.newest is None else max(self.newest, micros)

    def end_of_source(self) -> None:
        """The source has ended: tell every partition that nothing more comes (a watermark past
        the newest event time), in the open transaction."""
        if self.newest is not None and self.partitions > 1:
            self._watermarks(range(self.partitions), self.newest + 1)

    def _watermarks(self, partitions: Any, micros: int) -> None:
        from kafka.errors import KafkaError

        record = watermark_record(self.stream, micros)
        try:
            self._begin()
            for partition in partitions:
                self.producer.send(
                    self.topic, value=record.value, headers=record.headers, partition=partition
                )
                self._written.add(partition)
        except KafkaError as exc:
            raise BrokerUnavailable(f"producing to {self.topic!r} failed: {exc}") from exc

    def commit(self) -> None:
        """Make everything sent so far visible to ``read_committed`` readers (commits the open
        transaction; a non-transactional sender has nothing to do: its records are visible once
        written)."""
        from kafka.errors import KafkaError

        if not self._open:
            return
        silent = [p for p in range(self.partitions) if p not in self._written]
        if silent and self.newest is not None and self._written:
            self._watermarks(silent, self.newest)
        self._written.clear()
        try:
            self.producer.commit_transaction()
        except KafkaError as exc:
            raise BrokerUnavailable(
                f"committing the Kafka transaction on {self.topic!r} failed: {exc}"
            ) from exc
        self._open = False

    def close(self, timeout_s: float = 30.0) -> None:
        """Abort a transaction still open (what it sent is never seen), then close the
        producer."""
        if self._open:
            # closing must not hide the error that brought us here
            with contextlib.suppress(Exception):
                self.producer.abort_transaction()
            self._open = False
        self.producer.close(timeout=timeout_s)

    def offsets(self, timeout_s: float = 120.0) -> dict[int, int]:
        """The offset of the newest record sent to each partition (waits for them)."""
        from kafka.errors import KafkaError

        try:
            return {p: int(f.get(timeout=timeout_s).offset) for p, f in self.last.items()}
        except KafkaError as exc:
            raise BrokerUnavailable(f"producing to {self.topic!r} failed: {exc}") from exc
