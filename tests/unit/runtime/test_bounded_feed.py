"""A replay's feed (runtime.bounded_feed): records at or past a partition's end never come out,
the ends and positions it answers stop there (so the loop's idle exit fires at the bound), it
knows when every partition was read to its end, and it commits nothing for monitoring."""

from __future__ import annotations

from runtime.bounded_feed import BoundedFeed
from tests.unit.runtime.harness import MemoryFeed, StreamWriter


def _feed() -> MemoryFeed:
    writer = StreamWriter()
    records = []
    for i in range(5):
        records += writer.records("a", [i, i + 1])
        records += writer.records("b", [i])
    return MemoryFeed(records, per_poll=3)


def test_records_past_the_end_are_dropped_and_partitions_without_an_end_are_not_read() -> None:
    inner = _feed()
    feed = BoundedFeed(inner, {("pair.a", 0): 3})
    seen = []
    for _ in range(10):
        seen += feed.poll(0)
    assert [(r.topic, r.offset) for r in seen] == [("pair.a", 0), ("pair.a", 1), ("pair.a", 2)]
    assert inner.position(("pair.b", 0)) == 5  # read from the broker, never handed on


def test_ends_and_positions_stop_at_the_bound_and_reached_says_when() -> None:
    inner = _feed()
    feed = BoundedFeed(inner, {("pair.a", 0): 3, ("pair.b", 0): 9})
    assert feed.end_offsets() == {("pair.a", 0): 3, ("pair.b", 0): 5}  # the broker's end is lower
    assert not feed.reached()
    while inner.waiting:
        feed.poll(0)
    assert feed.position(("pair.a", 0)) == 3
    assert not feed.reached()  # pair.b's bound is past what the broker holds
    feed = BoundedFeed(inner, {("pair.a", 0): 3, ("pair.b", 0): 5})
    assert feed.reached()


def test_a_replay_commits_nothing_for_monitoring() -> None:
    inner = _feed()
    feed = BoundedFeed(inner, {("pair.a", 0): 3})
    feed.commit_for_monitoring({("pair.a", 0): 3})
    assert inner.monitored == {}
    feed.close()
    assert inner.closed
