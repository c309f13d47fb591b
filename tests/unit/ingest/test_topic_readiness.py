"""A topic the broker has just created may be described with no partitions for a moment: the
start's topic check asks again instead of calling that a partition mismatch (a `streamdi serve`
once stopped at start with "topic 'kv.puts' has 0 partitions but the run binds its streams over
1"), and gives up with the broker named as the cause when it stays so. The consumer and the
collector's resume scan wait for the partitions the same way instead of counting one (a
collector that took a four-partition topic for one would later send a batch's copy to another
partition than its first).

The broker's answer is played by a stand-in: a real broker shows the moment only by chance."""

from __future__ import annotations

import time
from typing import Any

import pytest

from ingest.exceptions import BrokerUnavailable
from ingest.topic_checks import described_topics, topic_partitions


class DescribingBroker:
    """Answers ``describe_topics`` with no partitions for the first ``empty`` calls."""

    def __init__(self, empty: int) -> None:
        self.empty = empty
        self.calls = 0

    def describe_topics(self, topics: list[str]) -> list[dict[str, Any]]:
        self.calls += 1
        partitions = [] if self.calls <= self.empty else [{"partition": 0, "leader": 1}]
        return [{"name": t, "error_code": 0, "partitions": partitions} for t in topics]


def test_a_topic_described_without_partitions_is_asked_for_again() -> None:
    admin = DescribingBroker(empty=2)
    described = described_topics(admin, ["kv.puts"], ready_s=5.0, every_s=0.01)
    assert admin.calls == 3
    assert [len(t["partitions"]) for t in described] == [1]


def test_a_topic_that_stays_without_partitions_stops_the_start_naming_the_broker() -> None:
    admin = DescribingBroker(empty=10**6)
    began = time.monotonic()
    with pytest.raises(BrokerUnavailable, match=r"\['kv.puts'\] with no partitions"):
        described_topics(admin, ["kv.puts"], ready_s=0.2, every_s=0.01)
    assert 0.2 <= time.monotonic() - began < 2.0
    assert admin.calls > 2


class LearningConsumer:
    """Answers ``partitions_for_topic`` with nothing for the first ``unknown`` calls."""

    def __init__(self, unknown: int) -> None:
        self.unknown = unknown
        self.calls = 0

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        self.calls += 1
        return None if self.calls <= self.unknown else {0, 1, 2, 3}


def test_the_partitions_a_consumer_does_not_know_yet_are_asked_for_again() -> None:
    consumer = LearningConsumer(unknown=2)
    assert topic_partitions(consumer, "ledger.txns", ready_s=5.0, every_s=0.01) == {0, 1, 2, 3}
    assert consumer.calls == 3


def test_a_topic_whose_partitions_stay_unknown_stops_naming_the_broker() -> None:
    consumer = LearningConsumer(unknown=10**6)
    with pytest.raises(BrokerUnavailable, match=r"no partitions of topic 'ledger\.txns'"):
        topic_partitions(consumer, "ledger.txns", ready_s=0.2, every_s=0.01)
