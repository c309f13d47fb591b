"""Event-time order for a stream read from several Kafka partitions: the minimum-watermark merge.

Kafka orders records within a partition only; the consumer sees a stream's partitions interleaved
arbitrarily. The engine applies a batch's transactions in event-time order and batches in id
order, so a stream over several partitions goes through a :class:`PartitionMerge`, whose rule is:

* Each partition ``p`` has a **watermark** ``w(p)``: the newest event time (``_ts``) read from
  it (events and the producers' watermark records, :data:`ingest.records.WATERMARK`, move it).
* The stream's **release point** is ``W = max(F, min over the active partitions of w(p))``, where
  ``F`` is the previous release point (so ``W`` never goes back). While an active partition has
  no watermark yet, ``W = F``; when no partition is active, everything held is released.
* An engine batch takes exactly the held events with ``_ts < W``, sorted by ``(_ts, _pos)``;
  the others wait for a later batch. When a producer writes each partition in event-time order
  (streamdi's collector does), no event read later can be older than ``W``: the batches apply the
  stream in ``(_ts, _pos)`` order, whatever the interleaving, as one partition sorted would.
* A partition is **idle**, and leaves the minimum, once no record came from it for
  ``INGEST__PARTITION_IDLE_MS`` *and* the consumer has read everything the broker holds for it
  (its position is at the end offset, which under ``read_committed`` is the last stable offset):
  the idle timeout alone never releases events that are in Kafka but not read yet. Silent
  partitions go idle *together*: a silent partition goes idle only when every partition of the
  stream is silent (or already idle), or when another partition got a record at least the idle
  timeout after its last one (it fell behind the others, e.g. a producer that skips it), never
  because it fell silent a few milliseconds before the others. A partition that fell behind goes
  idle only once it was so at two checks the idle timeout apart (**confirmed**): a Kafka
  transaction's commit markers are written one partition after the other, so right after the
  consumer read one partition's part of a transaction, another partition's part may not be
  readable yet and its end offset still says it was read to its end; a single check would take
  it for a skipped partition and release the first partition's events past it. (A first check
  followed by none for a while, because nothing was held back, confirms nothing: the count
  starts again, :data:`CONFIRM_GAP_S`.)
* A record from an idle partition **wakes** the stream: every idle partition counts in the
  minimum again, as if it had just sent a record, and goes idle again only by the rule above.
  A producer that writes all partitions in one Kafka transaction (streamdi's collector: a batch
  or a watermark record to each) makes them visible together, but the consumer reads them one by
  one; without the wake, the first partition read after a quiet spell would move ``W`` alone and
  the others' events of the same transaction would be late.
* Events that an idle partition brings that are older than ``W`` are **late**: they are
  released at once, or dead-lettered by the lateness rule when older than what was applied by
  more than the allowed lateness. (With a producer that writes each partition in event-time
  order and all partitions in each transaction, as the collector does, nothing is late.)
* The stream's high mark (``StreamProgress.max_ts``, what lateness is measured against) is the
  newest event time *released*, not merely read.

The merge state of each partition (its last batch id, its watermark and the events it holds back)
is committed to staging with every batch (:class:`staging.store.PartitionProgress`), in the
transaction that stores the offsets past the records those events came in: a restart resumes
each partition at its offset with the held events restored, so every event is applied exactly
once.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from etl_dataflows.types import POS, TS
from ingest.records import from_ipc, to_ipc
from staging.batch_commit import PartitionProgress

TopicPartition = tuple[str, int]

#: The column a held event's source record offset travels in, inside the staged held events.
OFFSET = "_offset"
#: A check confirms that a partition fell behind (:meth:`PartitionMerge.mark_idle`) only within
#: the idle timeout plus this many seconds of the check that first found it so (checks run about
#: every 0.1 s while events are held back).
CONFIRM_GAP_S = 1.0


@dataclass
class HeldChunk:
    """Events of one record (``topic``, ``partition``, ``offset``) waiting for the release
    point."""

    topic: str
    partition: int
    offset: int
    events: pa.Table


@dataclass
class _Partition:
    last_batch: int = 0
    watermark: int | None = None
    held: list[HeldChunk] = field(default_factory=list)
    last_seen: float = 0.0
    idle: bool = False
    #: When a check first found it behind the others (silent, read to its end, another partition
    #: newer by the idle timeout); None: not so at the last check (see :meth:`mark_idle`).
    behind_since: float | None = None


class PartitionMerge:
    """The merge of one stream over ``partitions``; see the module docstring. ``restored`` is the
    staged merge state per partition, ``high`` the stream's staged high mark; ``idle_s`` the idle
    timeout; ``schema`` the stream's event schema (columns, ``_ts``, ``_pos``)."""

    def __init__(
        self,
        stream: str,
        partitions: Sequence[TopicPartition],
        *,
        schema: pa.Schema,
        idle_s: float,
        restored: Mapping[TopicPartition, PartitionProgress] | None = None,
        high: int | None = None,
        now: float | None = None,
    ) -> None:
        self.stream = stream
        self.schema = schema
        self.idle_s = idle_s
        start = time.monotonic() if now is None else now
        self._parts: dict[TopicPartition, _Partition] = {
            tp: _Partition(last_seen=start) for tp in partitions
        }
        #: The partitions read to their end at the last :meth:`mark_idle` (:meth:`throttle`).
        self._caught_up: set[TopicPartition] = set()
        #: The release point F (events below it were released); None before the first release.
        self.floor: int | None = None if high is None else high + 1
        for tp, progress in (restored or {}).items():
            part = self._parts.setdefault(tp, _Partition(last_seen=start))
            part.last_batch = progress.last_batch
            part.watermark = progress.max_ts
            if progress.held:
                part.held = _chunks(tp, from_ipc(progress.held), schema)

    # -- what the assembler tells it ---------------------------------------------------------------

    def seen(self, tp: TopicPartition, now: float | None = None) -> None:
        """A record of this stream came from ``tp``: the partition is active; when it was idle,
        the stream wakes (every idle partition is active again, silent from ``now``)."""
        at = time.monotonic() if now is None else now
        part = self._part(tp)
        if part.idle:
            for other in self._parts.values():
                if other.idle:
                    other.idle = False
                    other.last_seen = at
        part.last_seen = at
        part.idle = False
        part.behind_since = None

    def last_batch(self, tp: TopicPartition) -> int:
        """The last collector batch id completed in ``tp`` (a batch id at or below it, read
        again from ``tp``, is a duplicate)."""
        return self._part(tp).last_batch

    def completed(self, tp: TopicPartition, batch_id: int) -> None:
        part = self._part(tp)
        part.last_batch = max(part.last_batch, batch_id)

    def advance(self, tp: TopicPartition, ts: int) -> None:
        """A producer's promise that ``tp`` gets nothing older than ``ts`` from now on."""
        part = self._part(tp)
        part.watermark = ts if part.watermark is None else max(part.watermark, ts)

    def hold(self, tp: TopicPartition, offset: int, events: pa.Table) -> None:
        """Hold ``events`` (checked events of the record at ``offset`` of ``tp``) until the
        release point passes them; they move the partition's watermark."""
        if not events.num_rows:
            return
        part = self._part(tp)
        top = pc.max(events.column(TS)).as_py()
        if top is not None:
            self.advance(tp, int(top))
        part.held.append(HeldChunk(tp[0], tp[1], offset, events))

    def mark_idle(self, caught_up: set[TopicPartition], now: float | None = None) -> bool:
        """Mark idle the partitions that are in ``caught_up`` (the consumer's position is at
        their end offset) and silent for ``idle_s``, when every partition is idle or such, or
        when another partition got a record ``idle_s`` or more after their last one and an
        earlier check ``idle_s`` to ``idle_s + CONFIRM_GAP_S`` before this one found the same
        (confirmed; see the module docstring); True if one became idle."""
        at = time.monotonic() if now is None else now
        self._caught_up = set(caught_up)
        silent = {
            tp
            for tp, part in self._parts.items()
            if not part.idle and tp in caught_up and at - part.last_seen >= self.idle_s
        }
        together = all(part.idle or tp in silent for tp, part in self._parts.items())
        newest = max(part.last_seen for part in self._parts.values())
        changed = False
        for tp, part in self._parts.items():
            behind = tp in silent and newest - part.last_seen >= self.idle_s
            if tp in silent and together:
                part.idle = changed = True
            elif not behind:
                part.behind_since = None
            else:
                since = part.behind_since
                if since is None or at - since > self.idle_s + CONFIRM_GAP_S:
                    # the first check, or one so old that no check ran since (nothing was held
                    # back meanwhile): it confirms nothing about now
                    part.behind_since = since = at
                if at - since >= self.idle_s:
                    part.idle = changed = True
            if part.idle:
                part.behind_since = None
        return changed

    # -- what it answers ---------------------------------------------------------------------------

    @property
    def holding(self) -> bool:
        """Whether any event is held back."""
        return any(part.held for part in self._parts.values())

    def throttle(self, paused: set[TopicPartition], limit: int) -> set[TopicPartition]:
        """The partitions whose reading should stop for now (given those stopped now): a
        partition holding more than ``limit`` events that is ahead of the release point (its
        watermark is past it, so it is not what the others wait for) stops, and reads again once
        it holds ``limit // 2`` or fewer, or is no longer ahead. The partition that sets the
        release point (or one with no watermark yet) is never stopped, and none is stopped once
        those were read to their end (as the last :meth:`mark_idle` saw it), so the merge always
        moves. Without this, a consumer that reads one partition far ahead of the others (a full
        topic) holds, and stages with every batch, ever more events."""
        if self.releases_all():
            return set()
        point = self.release_point()
        ahead: set[TopicPartition] = set()
        for tp, part in self._parts.items():
            # with no release point yet, a partition with a watermark is ahead of one without
            mark = part.watermark
            if not part.idle and mark is not None and (point is None or mark > point):
                ahead.add(tp)
        behind = {tp for tp, part in self._parts.items() if not part.idle and tp not in ahead}
        if behind <= self._caught_up:
            # what the others wait for has nothing more to read: only idleness moves the
            # merge now, and a partition kept from being read would never look idle
            return set()
        out: set[TopicPartition] = set()
        for tp in ahead:
            held = sum(c.events.num_rows for c in self._parts[tp].held)
            if held > (limit // 2 if tp in paused else limit):
                out.add(tp)
        return out

    def release_point(self) -> int | None:
        """``W``: events with ``_ts < W`` are released; None: none; see :meth:`releases_all`."""
        active = [p for p in self._parts.values() if not p.idle]
        marks = [p.watermark for p in active]
        if not active or any(m is None for m in marks):
            return self.floor
        low = min(m for m in marks if m is not None)
        return low if self.floor is None else max(low, self.floor)

    def releases_all(self) -> bool:
        """Whether every partition is idle (then everything held is released)."""
        return all(p.idle for p in self._parts.values())

    def releasable(self) -> int:
        """How many held events the next :meth:`release` hands out."""
        if not self.holding:
            return 0
        if self.releases_all():
            return sum(c.events.num_rows for p in self._parts.values() for c in p.held)
        point = self.release_point()
        if point is None:
            return 0
        return sum(int(np.count_nonzero(_ts(c.events) < point)) for c in self._held())

    def release(self) -> list[HeldChunk]:
        """Hand out the held events below the release point (the rest stay held) and move the
        floor to the release point."""
        everything = self.releases_all()
        point = self.release_point()
        out: list[HeldChunk] = []
        newest: int | None = None
        for part in self._parts.values():
            keep: list[HeldChunk] = []
            for chunk in part.held:
                ts = _ts(chunk.events)
                below = np.ones(len(ts), dtype=bool) if everything else None
                if below is None:
                    if point is None:
                        keep.append(chunk)
                        continue
                    below = ts < point
                if below.all():
                    out.append(chunk)
                elif below.any():
                    out.append(_take(chunk, below))
                    keep.append(_take(chunk, ~below))
                else:
                    keep.append(chunk)
                    continue
                top = int(ts[below].max())
                newest = top if newest is None else max(newest, top)
            part.held = keep
        if point is not None:
            self.floor = point if self.floor is None else max(self.floor, point)
        if newest is not None:
            self.floor = newest + 1 if self.floor is None else max(self.floor, newest + 1)
        return out

    def snapshot(self) -> dict[TopicPartition, PartitionProgress]:
        """The merge state to stage, per partition."""
        out: dict[TopicPartition, PartitionProgress] = {}
        for tp, part in self._parts.items():
            held = None
            if part.held:
                held = to_ipc(
                    pa.concat_tables(
                        [
                            c.events.append_column(
                                OFFSET, pa.array([c.offset] * c.events.num_rows, pa.int64())
                            )
                            for c in part.held
                        ]
                    )
                )
            out[tp] = PartitionProgress(part.last_batch, part.watermark, held)
        return out

    def _part(self, tp: TopicPartition) -> _Partition:
        part = self._parts.get(tp)
        if part is None:  # a partition added to the topic while running
            part = self._parts[tp] = _Partition(last_seen=time.monotonic())
        return part

    def _held(self) -> list[HeldChunk]:
        return [c for p in self._parts.values() for c in p.held]


def sort_released(chunks: list[HeldChunk]) -> pa.Table | None:
    """The released events of one stream as one table in ``(_ts, _pos)`` order (None: none)."""
    tables = [c.events for c in chunks if c.events.num_rows]
    if not tables:
        return None
    return pa.concat_tables(tables).sort_by([(TS, "ascending"), (POS, "ascending")])


def _ts(table: pa.Table) -> np.ndarray:
    return np.asarray(table.column(TS).to_numpy(zero_copy_only=False), dtype=np.int64)


def _take(chunk: HeldChunk, mask: np.ndarray) -> HeldChunk:
    events = chunk.events.filter(pa.array(mask))
    return HeldChunk(chunk.topic, chunk.partition, chunk.offset, events)


def _chunks(tp: TopicPartition, table: pa.Table, schema: pa.Schema) -> list[HeldChunk]:
    """Staged held events back into one chunk per source record."""
    offsets = np.asarray(table.column(OFFSET).to_numpy(zero_copy_only=False), dtype=np.int64)
    events = table.drop_columns([OFFSET]).select(schema.names).cast(schema)
    out: list[HeldChunk] = []
    for offset in dict.fromkeys(offsets.tolist()):
        out.append(HeldChunk(tp[0], tp[1], int(offset), events.filter(pa.array(offsets == offset))))
    return out
