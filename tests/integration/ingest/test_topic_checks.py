"""A run's topics as Kafka has them: a topic created elsewhere with another partition count stops
the start with what to change; short retention is reported; records that retention deleted before
the pipeline consumed them stop the pipeline with the lost offsets, never a silent skip."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from ingest.broker import EmbeddedKafka, client_config, ensure_topics
from ingest.consumer import RecordConsumer
from ingest.exceptions import RetentionGap
from ingest.topic_checks import check_topics
from streamdi.settings import KafkaSettings
from tests.integration.conftest import run_streamdi, streamdi_env

pytestmark = pytest.mark.kafka

KAFKA = KafkaSettings()


def _admin(broker: EmbeddedKafka) -> Any:
    from kafka import KafkaAdminClient

    return KafkaAdminClient(**client_config(KAFKA, broker.bootstrap_servers))


def test_a_topic_with_other_partitions_stops_the_run_with_what_to_change(
    broker: EmbeddedKafka, tmp_path: Path
) -> None:
    from kafka.admin import NewTopic

    admin = _admin(broker)
    admin.create_topics([NewTopic("ledger.txns", 3, 1)])  # the run binds txns over 1
    admin.close()
    log = tmp_path / "run.log"
    env = streamdi_env(broker, tmp_path / "state")
    code = run_streamdi(
        ["run", "tests.integration.ledger_run:topic_only", "--until-idle", "1"], env, log
    )
    text = log.read_text()
    assert code == 1, text
    assert "topic 'ledger.txns' has 3 partitions but the run binds its streams over 1" in text
    assert "StreamBinding(partitions=3)" in text
    assert "Traceback" not in text


def test_short_retention_is_reported_at_start(
    broker: EmbeddedKafka, caplog: pytest.LogCaptureFixture
) -> None:
    from kafka.admin import NewTopic

    admin = _admin(broker)
    admin.create_topics([NewTopic("brief", 1, 1, topic_configs={"retention.ms": "600000"})])
    admin.close()
    with caplog.at_level(logging.WARNING, logger="ingest.topic_checks"):
        retention = check_topics(KAFKA, broker.bootstrap_servers, {"brief": 1, "ledger.txns": 3})
    assert retention["brief"] == 600_000
    assert retention["ledger.txns"] == 7 * 24 * 3_600_000  # Kafka's default: a week
    [warning] = [r.getMessage() for r in caplog.records if r.name == "ingest.topic_checks"]
    assert "topic brief keeps records for 10 min only (retention.ms=600000)" in warning


def test_records_deleted_before_they_were_consumed_stop_the_consumer(
    broker: EmbeddedKafka,
) -> None:
    from kafka import KafkaProducer, TopicPartition

    ensure_topics(KAFKA, broker.bootstrap_servers, {"gone": 1})
    producer = KafkaProducer(**client_config(KAFKA, broker.bootstrap_servers), acks="all")
    for i in range(10):
        producer.send("gone", f"{i}".encode())
    producer.flush()
    producer.close()
    admin = _admin(broker)
    admin.delete_records({TopicPartition("gone", 0): 6})  # what retention does: the head goes
    admin.close()

    # staging had consumed up to offset 4: offsets 4 and 5 were never read
    with pytest.raises(RetentionGap, match=r"gone\[0\] offsets 4\.\.5"):
        RecordConsumer(KAFKA, broker.bootstrap_servers, ["gone"], start={("gone", 0): 4})
    # from offset 6 on, nothing was lost: the consumer starts
    consumer = RecordConsumer(KAFKA, broker.bootstrap_servers, ["gone"], start={("gone", 0): 6})
    records = []
    while len(records) < 4:
        records.extend(consumer.poll(1000))
    consumer.close()
    assert [r.offset for r in records] == [6, 7, 8, 9]


def test_a_kafka_that_does_not_answer_at_start_fails_in_seconds_naming_it(
    tmp_path: Path,
) -> None:
    import socket
    import time

    from tests.integration.conftest import REPO

    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{closed.getsockname()[1]}"
    log = tmp_path / "run.log"
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(REPO),
        "STREAMDI__STATE_DIR": str(tmp_path / "state"),
        "KAFKA__BOOTSTRAP_SERVERS": address,
        # the production default is 10 s (tests/unit/ingest/test_kafka_client.py checks that a
        # wait ends on time); the run here gives up after 2 s of trying
        "KAFKA__EXTERNAL_START_TIMEOUT_S": "2",
    }
    started = time.monotonic()
    code = run_streamdi(["run", "tests.integration.ledger_run:topic_only"], env, log, timeout=120)
    took = time.monotonic() - started
    text = log.read_text()
    assert code == 1, text
    assert f"the Kafka broker at {address} did not answer within 2 s" in text
    assert "fix KAFKA__BOOTSTRAP_SERVERS" in text
    assert "KAFKA__EXTERNAL_START_TIMEOUT_S" in text
    assert 2 <= took < 60, took  # 2 s of trying plus the interpreter's start
