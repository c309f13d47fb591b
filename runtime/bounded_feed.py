"""A record feed that ends at given offsets: the input of a replay (:mod:`runtime.reprocess`).

:class:`BoundedFeed` wraps the pipeline's consumer so that a pipeline reads each partition up to,
not including, an end offset and then sees a partition at its end:

* :meth:`~BoundedFeed.poll` drops every record at or past its partition's end (partitions without
  an end are not read at all: their records are dropped too);
* :meth:`~BoundedFeed.end_offsets` answers the end (or the broker's end, when it is lower) and
  :meth:`~BoundedFeed.position` never more than the end, so the consuming loop's idle exit
  (:mod:`runtime.consuming`, step 6) fires once every partition reached its end and nothing is
  pending;
* :meth:`~BoundedFeed.commit_for_monitoring` tells the brokers nothing: a replay's progress is not
  the pipeline's, and monitoring tools must keep showing the live one's.

Whether the replay read all it needs is staging's to say (its offsets against the ends), not the
feed's: a loop that stops early is run again.
"""

from __future__ import annotations

from collections.abc import Mapping

from ingest.assembler import RawRecord, TopicPartition
from runtime.interfaces import RecordFeed


class BoundedFeed:
    """``feed`` read up to ``ends`` (``(topic, partition)`` -> the first offset not to read)."""

    def __init__(self, feed: RecordFeed, ends: Mapping[TopicPartition, int]) -> None:
        self.feed = feed
        self.ends = dict(ends)

    def poll(self, timeout_ms: int) -> list[RawRecord]:
        return [
            r
            for r in self.feed.poll(timeout_ms)
            if r.offset < self.ends.get((r.topic, r.partition), 0)
        ]

    def end_offsets(self, timeout_ms: int | None = None) -> dict[TopicPartition, int]:
        ends = self.feed.end_offsets(timeout_ms)
        if not ends:
            return {}
        return {tp: min(end, self.ends.get(tp, 0)) for tp, end in ends.items()}

    def position(self, tp: TopicPartition) -> int:
        position = self.feed.position(tp)
        return position if position < 0 else min(position, self.ends.get(tp, 0))

    def pause(self, partitions: set[TopicPartition]) -> None:
        self.feed.pause(partitions)

    def resume(self, partitions: set[TopicPartition]) -> None:
        self.feed.resume(partitions)

    def commit_for_monitoring(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Nothing: see the module docstring."""

    def close(self) -> None:
        self.feed.close()
