"""Kafka transactions as the collector uses them on a topic of several partitions: what a
producer sent in a transaction it has not committed is never read by the pipeline's consumer
(``read_committed``), and a new producer of the same stream (a collector restarted after a kill)
fences the old one and aborts its open transaction, so those records are never read at all. This
is what makes a logical batch of several records, or several batches spread over partitions,
visible all at once or not at all."""

from __future__ import annotations

import time
from typing import Any

import pytest

from ingest.broker import EmbeddedKafka, client_config, ensure_topics
from ingest.consumer import RecordConsumer
from ingest.spreading import open_sender, partition_of
from streamdi.settings import KafkaSettings

pytestmark = pytest.mark.kafka

KAFKA = KafkaSettings()
TOPIC = "spread.txn"
PARTITIONS = 4


def _config(bootstrap: str) -> dict[str, Any]:
    return {**client_config(KAFKA, bootstrap), "acks": "all", "enable_idempotence": True}


def _read(consumer: RecordConsumer, seconds: float) -> list[tuple[int, bytes | None]]:
    """Everything the consumer reads within ``seconds``: (partition, value)."""
    out: list[tuple[int, bytes | None]] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        out.extend((r.partition, r.value) for r in consumer.poll(200))
    return out


def test_an_open_transaction_is_never_read_and_a_restarted_producer_aborts_it(
    broker: EmbeddedKafka,
) -> None:
    bootstrap = broker.bootstrap_servers
    ensure_topics(KAFKA, bootstrap, {TOPIC: PARTITIONS})
    killed = open_sender(_config(bootstrap), TOPIC, PARTITIONS, "s")
    assert killed.transactional
    for batch_id, part in ((1, b"1/0"), (1, b"1/1"), (2, b"2/0")):  # batch 1 has two records
        killed.send(batch_id, part, [])
    acknowledged = killed.offsets()  # written and acknowledged by the broker, not committed
    assert sorted(acknowledged) == [partition_of(1, PARTITIONS), partition_of(2, PARTITIONS)]

    consumer = RecordConsumer(KAFKA, bootstrap, [TOPIC], start={})
    try:
        assert _read(consumer, 3.0) == []  # nothing of the open transaction

        # the collector restarts (the killed one never commits): same transactional id
        restarted = open_sender(_config(bootstrap), TOPIC, PARTITIONS, "s")
        restarted.send(1, b"again 1", [])
        restarted.commit()
        read = _read(consumer, 3.0)
        restarted.close()
        assert [value for _, value in read] == [b"again 1"]  # the aborted records never appear
        assert read[0][0] == partition_of(1, PARTITIONS)
    finally:
        consumer.close()
        killed.producer.close(timeout=1)  # fenced: its producer can only be closed
