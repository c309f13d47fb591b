"""The Kafka side of consumption: assign the streams' partitions, seek to the offsets staging
holds, poll records in order. Only committed records are read (``read_committed``): what a
transactional producer sent in a transaction that is still open or was aborted is never seen, and
the end offsets are the last stable offsets.

No consumer group decides anything here: partitions are assigned by hand (``assign``), and the
starting offsets come from staging, which committed them with the batches. Kafka's own committed
offsets are written only so that monitoring tools see the pipeline's progress.

The consumer never skips records: a starting offset below the partition's log start (retention
deleted records before they were consumed), or a fetch that falls out of range while running, is
:class:`~ingest.exceptions.RetentionGap`, never a silent jump to another offset.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ingest.assembler import RawRecord, TopicPartition
from ingest.broker import client_config
from ingest.exceptions import BrokerUnavailable, RetentionGap
from ingest.topic_checks import topic_partitions
from streamdi.settings import KafkaSettings

logger = logging.getLogger(__name__)

#: How long monitoring's end offsets wait for the broker: a broker that is away must not hold up
#: the consuming loop (the drain on stop waits the client's full request timeout).
MONITOR_TIMEOUT_MS = 1000


class RecordConsumer:
    """Reads the given topics from given offsets; see the module docstring."""

    def __init__(
        self,
        kafka: KafkaSettings,
        bootstrap: str,
        topics: list[str],
        *,
        start: Mapping[TopicPartition, int],
        start_from: str = "earliest",
        group_id: str | None = None,
    ) -> None:
        from kafka import KafkaConsumer, TopicPartition
        from kafka.errors import KafkaError

        self.group_id = group_id
        try:
            self._consumer: Any = KafkaConsumer(
                **client_config(kafka, bootstrap),
                group_id=group_id,
                enable_auto_commit=False,
                auto_offset_reset="none",  # out of range raises: see the module docstring
                fetch_max_bytes=64 * 1024 * 1024,
                max_partition_fetch_bytes=16 * 1024 * 1024,
                fetch_max_wait_ms=50,
                receive_buffer_bytes=4 * 1024 * 1024,
                # a collector's open or aborted transaction is never read (ingest.spreading)
                isolation_level="read_committed",
                reconnect_backoff_max_ms=1000,
            )
            tps: list[Any] = []
            for topic in topics:
                partitions = topic_partitions(self._consumer, topic)
                tps.extend(TopicPartition(topic, p) for p in sorted(partitions))
            self._consumer.assign(tps)
            self._check_log_start(tps, start)
            for tp in tps:
                offset = start.get((tp.topic, tp.partition))
                if offset is not None:
                    self._consumer.seek(tp, offset)
                elif start_from == "latest":
                    self._consumer.seek_to_end(tp)
                else:
                    self._consumer.seek(tp, 0)
        except KafkaError as exc:
            raise BrokerUnavailable(f"cannot consume {topics}: {exc}") from exc
        self.partitions: list[TopicPartition] = [(tp.topic, tp.partition) for tp in tps]
        self.last_offsets: dict[TopicPartition, int] = {}
        logger.info("consumer assigned partitions=%s", self.partitions)

    def _check_log_start(self, tps: list[Any], start: Mapping[TopicPartition, int]) -> None:
        firsts = self._consumer.beginning_offsets(tps)
        gaps = [
            f"{tp.topic}[{tp.partition}] offsets {start[(tp.topic, tp.partition)]}..{first - 1}"
            for tp, first in firsts.items()
            if (tp.topic, tp.partition) in start and start[(tp.topic, tp.partition)] < first
        ]
        if gaps:
            raise RetentionGap(
                "records this run had not consumed yet were deleted by the topics' retention: "
                + ", ".join(sorted(gaps))
                + ". They are lost to this pipeline; raise the topics' retention.ms. To go on "
                "from what the log still holds, re-offer the lost events if you have them and "
                "start over with a fresh staging file",
                sorted(gaps),
            )

    def poll(self, timeout_ms: int, max_records: int = 1000) -> list[RawRecord]:
        """The next records, in offset order per partition."""
        from kafka.errors import KafkaError, OffsetOutOfRangeError

        try:
            polled = self._consumer.poll(timeout_ms=timeout_ms, max_records=max_records)
        except OffsetOutOfRangeError as exc:
            raise RetentionGap(
                f"records this run had not consumed yet were deleted by retention while it ran "
                f"({exc}); raise the topics' retention.ms"
            ) from exc
        except KafkaError as exc:
            raise BrokerUnavailable(f"polling failed: {exc}") from exc
        out: list[RawRecord] = []
        for tp, records in polled.items():
            for r in records:
                out.append(
                    RawRecord(
                        tp.topic,
                        tp.partition,
                        r.offset,
                        r.value,
                        list(r.headers or []),
                        r.timestamp if r.timestamp and r.timestamp > 0 else 0,
                    )
                )
            if records:
                self.last_offsets[(tp.topic, tp.partition)] = records[-1].offset
        return out

    def pause(self, partitions: set[TopicPartition]) -> None:
        """Stop fetching ``partitions`` (records already fetched for them are fetched again
        after :meth:`resume`: the position stays)."""
        if partitions:
            from kafka import TopicPartition as KafkaTopicPartition

            self._consumer.pause(*(KafkaTopicPartition(*tp) for tp in partitions))

    def resume(self, partitions: set[TopicPartition]) -> None:
        if partitions:
            from kafka import TopicPartition as KafkaTopicPartition

            self._consumer.resume(*(KafkaTopicPartition(*tp) for tp in partitions))

    def commit_for_monitoring(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Tell Kafka how far the pipeline has committed (monitoring only; never read back)."""
        if not self.group_id or not offsets:
            return
        from kafka import TopicPartition
        from kafka.structs import OffsetAndMetadata

        try:
            self._consumer.commit_async(
                {
                    TopicPartition(t, p): OffsetAndMetadata(o, "", -1)
                    for (t, p), o in offsets.items()
                }
            )
        except Exception as exc:  # monitoring must never stop the pipeline
            logger.debug("monitoring offset commit failed: %s", exc)

    def position(self, tp: TopicPartition) -> int:
        """The offset of the next record a poll returns for ``tp`` (records fetched but not
        returned yet do not count); -1 when the broker does not answer."""
        from kafka import TopicPartition as KafkaTopicPartition

        try:
            return int(self._consumer.position(KafkaTopicPartition(*tp)))
        except Exception as exc:  # monitoring and draining must never stop the pipeline
            logger.debug("position failed: %s", exc)
            return -1

    def end_offsets(self, timeout_ms: int | None = None) -> dict[TopicPartition, int]:
        """The brokers' end offset (the next offset to be written) of every assigned partition;
        empty when they do not answer within ``timeout_ms`` (None: the client's request timeout;
        monitoring passes :data:`MONITOR_TIMEOUT_MS`)."""
        from kafka import TopicPartition

        try:
            ends = self._consumer.end_offsets(
                [TopicPartition(t, p) for t, p in self.partitions], timeout_ms=timeout_ms
            )
        except Exception as exc:  # monitoring must never stop the pipeline
            logger.debug("end offsets failed: %s", exc)
            return {}
        return {(tp.topic, tp.partition): int(offset) for tp, offset in ends.items()}

    def close(self) -> None:
        try:
            self._consumer.close(autocommit=False)
        except Exception as exc:
            logger.debug("consumer close: %s", exc)
