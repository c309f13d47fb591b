"""Checks of a run's topics at start: what a topic created elsewhere must be for the run.

:func:`check_topics` runs after :func:`~ingest.kafka_client.ensure_topics` created what was missing:

1. **Partition count.** A topic must have exactly the partitions its streams are bound over
   (``StreamBinding.partitions``). More would scatter a stream's events over partitions the run
   does not order; fewer would leave bound partitions out. A mismatch stops the start with
   :class:`~ingest.exceptions.TopicMismatch`, naming the topic, both counts and what to change.
   A topic the broker describes with no partitions is one it has not finished creating (a topic
   has at least one): the check asks again for up to :data:`TOPIC_READY_S`, then stops the start
   with :class:`~ingest.exceptions.BrokerUnavailable` (the broker, not the topic, is at fault).
2. **Retention.** A topic whose records are deleted sooner than :data:`SHORT_RETENTION_MS` (a
   day) is reported in the log at start: a pipeline stopped or lagging longer than that loses
   events it never read. The loss itself is caught where it happens: the consumer refuses to skip
   records that retention deleted before they were consumed
   (:class:`~ingest.exceptions.RetentionGap`).

The consumer and a collector's resume scan learn a topic's partitions through
:func:`topic_partitions`, which waits for them the same way.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ingest.exceptions import BrokerUnavailable, TopicMismatch
from ingest.kafka_client import client_config
from streamdi.settings import KafkaSettings

logger = logging.getLogger(__name__)

#: Retention below this (ms) is reported at start.
SHORT_RETENTION_MS = 24 * 3600 * 1000
#: How long a topic just created may be described with no partitions before the start stops.
TOPIC_READY_S = 10.0


def check_topics(kafka: KafkaSettings, bootstrap: str, wanted: dict[str, int]) -> dict[str, int]:
    """Steps 1 and 2 of the module docstring for ``wanted`` (topic -> partitions); answers each
    topic's retention in ms (-1: kept for ever)."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    try:
        admin = KafkaAdminClient(**client_config(kafka, bootstrap))
    except KafkaError as exc:
        raise BrokerUnavailable(f"cannot check topics {sorted(wanted)}: {exc}") from exc
    try:
        described = described_topics(admin, sorted(wanted))
        retention = _retention_ms(admin, sorted(wanted))
    except KafkaError as exc:
        raise BrokerUnavailable(f"cannot check topics {sorted(wanted)}: {exc}") from exc
    finally:
        admin.close()
    # 1.
    problems = []
    for topic in described:
        name, count = topic["name"], len(topic.get("partitions") or [])
        if name in wanted and count != wanted[name]:
            problems.append(
                f"topic {name!r} has {count} partitions but the run binds its streams over "
                f"{wanted[name]}: bind them with StreamBinding(partitions={count}), or recreate "
                "the topic (or bind another topic) with "
                f"{wanted[name]} partition{'s' if wanted[name] != 1 else ''}"
            )
    if problems:
        raise TopicMismatch("; ".join(problems))
    # 2.
    for name, ms in sorted(retention.items()):
        if 0 <= ms < SHORT_RETENTION_MS:
            logger.warning(
                "topic %s keeps records for %s only (retention.ms=%d): a pipeline stopped or "
                "lagging longer than that loses events it never read; raise the topic's "
                "retention.ms",
                name,
                f"{ms / 60_000:.0f} min" if ms < 3_600_000 else f"{ms / 3_600_000:.1f} h",
                ms,
            )
    return retention


def described_topics(
    admin: Any, topics: list[str], *, ready_s: float = TOPIC_READY_S, every_s: float = 0.1
) -> list[dict[str, Any]]:
    """``admin.describe_topics(topics)`` once every topic in it lists its partitions, asked
    again every ``every_s`` for up to ``ready_s`` (a topic just created is described with none
    until the broker has placed them); raises :class:`~ingest.exceptions.BrokerUnavailable`
    naming the topics still without partitions then."""
    deadline = time.monotonic() + ready_s
    while True:
        described: list[dict[str, Any]] = admin.describe_topics(topics)
        pending = sorted(t["name"] for t in described if not t.get("partitions"))
        if not pending:
            return described
        if time.monotonic() >= deadline:
            raise BrokerUnavailable(
                f"the broker describes topics {pending} with no partitions after {ready_s:.0f} s: "
                "it has not finished creating them; start again once it has"
            )
        time.sleep(every_s)


def topic_partitions(
    consumer: Any, topic: str, *, ready_s: float = TOPIC_READY_S, every_s: float = 0.1
) -> set[int]:
    """The partitions of ``topic`` as ``consumer`` (a kafka-python ``KafkaConsumer``) learns
    them from the broker's metadata, asked again every ``every_s`` for up to ``ready_s`` while
    there are none (a topic just created has none until the broker placed them; counting it as
    one partition would have a collector send its batches to partition 0 outside a transaction,
    not where the topic's count maps them: :mod:`ingest.spreading`); raises
    :class:`~ingest.exceptions.BrokerUnavailable` when there are still none."""
    deadline = time.monotonic() + ready_s
    while True:
        partitions = consumer.partitions_for_topic(topic)
        if partitions:
            return {int(p) for p in partitions}
        if time.monotonic() >= deadline:
            raise BrokerUnavailable(
                f"the broker knows no partitions of topic {topic!r} after {ready_s:.0f} s: it "
                "has not finished creating it (or it does not exist); start again once it has"
            )
        time.sleep(every_s)


def _retention_ms(admin: Any, topics: list[str]) -> dict[str, int]:
    from kafka.admin import ConfigResource, ConfigResourceType

    answer = admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, t) for t in topics], config_filter="all"
    )
    out: dict[str, int] = {}
    for topic, configs in (answer.get("topic") or {}).items():
        value = (configs.get("retention.ms") or {}).get("value")
        if value is not None:
            out[topic] = int(value)
    return out
