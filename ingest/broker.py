"""The Kafka broker streamdi talks to.

With ``KAFKA__BOOTSTRAP_SERVERS`` set, streamdi uses that Kafka. Unset, it runs the **embedded
broker**: Apache Kafka as a child process on 127.0.0.1 with its log under the state directory
(:mod:`ingest.embedded_kafka`), so topics survive restarts. This module is the one place that
chooses between them (:func:`open_broker`); the client settings and the log identity are in
:mod:`ingest.kafka_client`, and are re-exported here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ingest.embedded_kafka import EmbeddedKafka, stop_left_running
from ingest.exceptions import BrokerUnavailable
from ingest.kafka_client import (
    BrokerHandle,
    client_config,
    ensure_topics,
    free_port,
    pid_alive,
    wait_until_answering,
)
from streamdi.settings import KafkaSettings

__all__ = [
    "BrokerHandle",
    "EmbeddedKafka",
    "client_config",
    "ensure_topics",
    "external_handle",
    "free_port",
    "open_broker",
    "pid_alive",
    "start_broker",
    "stop_left_running",
    "wait_until_answering",
]


def external_handle(kafka: KafkaSettings, timeout_s: float | None = None) -> BrokerHandle:
    """The external Kafka of ``KAFKA__BOOTSTRAP_SERVERS`` once it answers; a Kafka that does not
    answer within ``timeout_s`` (default ``KAFKA__EXTERNAL_START_TIMEOUT_S``) is
    :class:`BrokerUnavailable`, naming the address and the setting."""
    servers = kafka.bootstrap_servers
    assert servers, "external_handle needs KAFKA__BOOTSTRAP_SERVERS"
    timeout = timeout_s if timeout_s is not None else kafka.external_start_timeout_s
    try:
        wait_until_answering(servers, timeout, kafka=kafka)
    except BrokerUnavailable as exc:
        raise BrokerUnavailable(
            f"{exc}; check that Kafka runs there, or fix KAFKA__BOOTSTRAP_SERVERS (unset it to "
            "run the embedded broker), or give it longer (KAFKA__EXTERNAL_START_TIMEOUT_S)"
        ) from exc
    return BrokerHandle(servers, f"external:{servers}", False)


def start_broker(
    kafka: KafkaSettings, state_dir: Path
) -> tuple[BrokerHandle, EmbeddedKafka | None]:
    """The configured external Kafka once it answers (and None), or the embedded broker of
    ``state_dir`` started, shared or adopted (and the broker, which the caller stops: only one
    this process started or adopted really stops)."""
    if kafka.bootstrap_servers:
        return external_handle(kafka), None
    embedded = EmbeddedKafka(state_dir, kafka)
    return embedded.start(), embedded


@contextmanager
def open_broker(kafka: KafkaSettings, state_dir: Path) -> Iterator[BrokerHandle]:
    """:func:`start_broker` for the block; the embedded broker is stopped at the end."""
    handle, embedded = start_broker(kafka, state_dir)
    try:
        yield handle
    finally:
        if embedded is not None:
            embedded.stop()
