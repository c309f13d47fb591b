"""A replay's feed (runtime.bounded_feed): records at or past a partition's end never come out,
the ends and positions it answers stop there (so the loop's idle exit fires at the bound), and it
commits nothing for monitoring."""

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


def _at_end(feed: BoundedFeed) -> bool:
    """The consuming loop's idle test: every partition's position at its end."""
    return all(feed.position(tp) >= end for tp, end in feed.end_offsets().items())


def test_ends_and_positions_stop_at_the_bound() -> None:
    inner = _feed()
    feed = BoundedFeed(inner, {("pair.a", 0): 3, ("pair.b", 0): 9})
    assert feed.end_offsets() == {("pair.a", 0): 3, ("pair.b", 0): 5}  # the broker's end is lower
    assert not _at_end(feed)
    while inner.waiting:
        feed.poll(0)
    assert feed.position(("pair.a", 0)) == 3  # read to 5, answered as the bound
    # at the broker's end: the loop stops here, and the reprocess sees pair.b short of its bound
    # in staging's offsets and runs the shadow again (runtime.reprocess._behind)
    assert _at_end(feed)


def test_a_replay_commits_nothing_for_monitoring() -> None:
    inner = _feed()
    feed = BoundedFeed(inner, {("pair.a", 0): 3})
    feed.commit_for_monitoring({("pair.a", 0): 3})
    assert inner.monitored == {}
    feed.close()
    assert inner.closed
