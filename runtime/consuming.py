"""The consuming loop of the pipeline (step 4 and the stop of step 6 of :mod:`runtime.pipeline`).

Each turn, in order:

1. Stop check: once ``stop`` is set, note the drain deadline (now + ``drain_s``) and what Kafka
   holds now (the end offsets, when draining); end the loop when the batch limit was reached, the
   drain consumed everything up to those offsets, ingest is paused, or the deadline passed.
2. Poll, unless records polled earlier still wait (and may be added) or ingest is paused (then
   note that the pause was seen: :meth:`PauseControl.pause` waits for it). A broker that does
   not answer is waited for (a transient error: logged, the poll tried again); the loop never
   ends for it.
3. Fill the assembler (:func:`runtime.cutting.fill`) and cut by the rules of
   :func:`runtime.cutting.cut_reason`; a cut batch is handed to ``hand_off`` (run and queued for
   its commit) with the next batch id; the batch limit stops the run once reached. A partition
   of a merged stream that holds more than :data:`HELD_BATCHES` engine batches of events ahead
   of the others (:meth:`ingest.merging.PartitionMerge.throttle`) gets no more of its polled
   records added: they wait in the buffer, in order, and when only such records wait, step 2
   polls again (for the other partitions). Then (3b) stop fetching such partitions from Kafka,
   and fetch them again once they hold half that: the held events stay bounded.
4. Raise the error of a committer, a collector or the migration (``check``).
5. Every ``monitor_every_s``, ``monitor()`` (offsets for monitoring, consumer lag); every second,
   ``progress(fetched_events)`` when given; a paused loop with nothing in hand sleeps 50 ms.
   While a stream merged over several partitions holds events back and no polled record waits
   that may be added, every ``idle_check_s``, tell the assembler which partitions the consumer
   has read to their end offset (:meth:`BatchAssembler.mark_idle`, the idle rule of
   :mod:`ingest.merging`).
6. Idle exit (``until_idle_s``): nothing pending or held back, nothing ``busy()`` (collectors,
   the commit queue), no record or batch for that long, the broker answering (a broker away is
   not idleness), and the consumer's position at the end offsets Kafka answers now (a first
   fetch that is slow to come back is not idleness).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from ingest.assembler import AssembledBatch, BatchAssembler, RawRecord, TopicPartition
from runtime.cutting import CutRules, PendingBatch, cut_reason, fill
from runtime.interfaces import RecordFeed
from streamdi.errors import TransientError

logger = logging.getLogger(__name__)

#: A partition of a merged stream that holds more than this many engine batches of events, ahead
#: of the others, is not read until it holds half as many (step 3b).
HELD_BATCHES = 1


@dataclass(frozen=True)
class LoopRules:
    """The loop's settings: the cut rules, the poll wait, and when it ends on its own."""

    cut: CutRules
    poll_timeout_ms: int
    #: On stop, keep consuming what Kafka already holds for up to this long.
    drain_s: float = 0.0
    #: End once idle this long (None: run until stopped).
    until_idle_s: float | None = None
    #: End after this many batches (None or 0: no limit).
    max_batches: int | None = None
    monitor_every_s: float = 2.0
    progress_every_s: float = 1.0
    #: How often a loop whose merged streams hold events asks for the partitions' end offsets.
    idle_check_s: float = 0.1
    #: A poll the broker did not answer is tried again after this long.
    poll_retry_s: float = 0.5


class PauseControl:
    """Pause and resume of the consuming loop, from other threads (the service's routes)."""

    def __init__(self) -> None:
        #: Set while ingest is paused (no polling).
        self.paused = threading.Event()
        self.seen = threading.Event()
        #: True while a loop consumes (a pause waits for it to see the pause only then).
        self.consuming = False

    def pause(self, timeout_s: float = 30.0) -> bool:
        """Stop polling; returns once the loop has seen the pause (a poll in flight when it was
        asked has returned), or at once when no loop consumes. Idempotent. True if it was not
        paused before."""
        first = not self.paused.is_set()
        self.seen.clear()
        self.paused.set()
        deadline = time.monotonic() + timeout_s
        while self.consuming and time.monotonic() < deadline:
            if self.seen.wait(0.05):
                break
        return first

    def resume(self) -> bool:
        """Poll again. Idempotent. True if it was paused."""
        was = self.paused.is_set()
        self.paused.clear()
        return was


class ConsumingLoop:
    """See the module docstring. ``hand_off`` runs a cut batch and queues its commit; ``busy``
    says whether anything may still bring work (collectors alive, commits queued)."""

    def __init__(
        self,
        feed: RecordFeed,
        assembler: BatchAssembler,
        rules: LoopRules,
        *,
        next_batch: int,
        hand_off: Callable[[AssembledBatch], None],
        control: PauseControl | None = None,
        check: Callable[[], None] = lambda: None,
        busy: Callable[[], bool] = lambda: False,
        monitor: Callable[[], None] = lambda: None,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        self.feed = feed
        self.assembler = assembler
        self.rules = rules
        self.next_batch = next_batch
        self.hand_off = hand_off
        self.control = control or PauseControl()
        self.check = check
        self.busy = busy
        self.monitor = monitor
        self.progress = progress
        #: Batches cut and handed off by this loop.
        self.batches = 0
        #: Events of those batches.
        self.fetched_events = 0
        #: Since when (monotonic) polls fail because the broker does not answer, or None.
        self.waiting_since: float | None = None
        #: The partitions step 3b stopped reading for now.
        self.paused: set[TopicPartition] = set()
        #: Seconds in polls that brought records (Kafka's fetch and the records' decoding; an
        #: empty poll waits for data and is not counted).
        self.poll_s = 0.0
        #: Seconds filling the assembler and cutting batches (step 3).
        self.assemble_s = 0.0

    def release(self) -> None:
        """Let go of the hand-off once the loop has run: it holds what runs the batches (the
        pipeline's executor, with all the engine's state), which must not outlive the run while
        the loop is kept for its counters. A released loop runs no more batches."""
        self.hand_off = _released

    def run(self, stop: threading.Event) -> None:
        """Consume until one of the ends of the module docstring; see there for the order."""
        rules, assembler, feed, control = self.rules, self.assembler, self.feed, self.control
        buffered: deque[RawRecord] = deque()
        added: dict[TopicPartition, int] = {}
        drain_until: float | None = None
        drain_to: dict[TopicPartition, int] = {}
        drained = limit_reached = stuck = False
        last_activity = time.monotonic()
        last_print = last_monitor = last_idle_check = 0.0
        control.consuming = True
        try:
            while True:
                # 1.
                if stop.is_set():
                    if drain_until is None:
                        drain_until = time.monotonic() + rules.drain_s
                        # what Kafka holds now is what the drain consumes (an empty poll alone
                        # can come back while a fetch is still on its way)
                        drain_to = feed.end_offsets() if rules.drain_s > 0 else {}
                    if (
                        limit_reached
                        or drained
                        or control.paused.is_set()
                        or time.monotonic() >= drain_until
                    ):
                        break
                # 2.
                paused = control.paused.is_set()
                if paused:
                    control.seen.set()
                did_poll = (not buffered or stuck) and not paused
                began = time.monotonic()
                polled = self._poll(stop) if did_poll else []
                buffered.extend(polled)
                if polled:
                    last_activity = time.monotonic()
                    self.poll_s += last_activity - began
                # 3.
                began = time.monotonic()
                stuck = fill(
                    assembler, buffered, added, rules.cut.batch_size, blocked=self._blocked
                )
                reason = cut_reason(
                    PendingBatch.of(assembler),
                    rules.cut,
                    polled_empty=did_poll and not polled,
                    paused=paused,
                    now=time.time(),
                )
                if reason is not None:
                    self.fetched_events += assembler.pending_events
                    taken = assembler.take(self.next_batch, added)
                    self.assemble_s += time.monotonic() - began
                    self.hand_off(taken)
                    last_activity = time.monotonic()
                    self.next_batch += 1
                    self.batches += 1
                    if rules.max_batches and self.batches >= rules.max_batches:
                        limit_reached = True
                        stop.set()
                else:
                    self.assemble_s += time.monotonic() - began
                # 3b.
                self._throttle(assembler)
                # only a poll after the stop was seen, measured against what Kafka held then
                # (before it, an empty poll says nothing about a backlog still being fetched)
                drained = (
                    drain_until is not None
                    and did_poll
                    and not polled
                    and not buffered
                    and not assembler.pending
                    and all(feed.position(tp) >= end for tp, end in drain_to.items())
                )
                now = time.monotonic()
                # 4.
                self.check()
                # 5.
                if now - last_monitor >= rules.monitor_every_s:
                    self.monitor()
                    last_monitor = now
                if paused and not buffered and not assembler.pending:
                    stop.wait(0.05)
                if self.progress is not None and now - last_print >= rules.progress_every_s:
                    self.progress(self.fetched_events)
                    last_print = now
                if (
                    assembler.holding
                    and (not buffered or stuck)
                    and now - last_idle_check >= rules.idle_check_s
                ):
                    self._mark_idle()
                    last_idle_check = now
                # 6.
                idle_for = now - last_activity
                if (
                    not assembler.pending
                    and not buffered
                    and not assembler.holding
                    and self._idle_exit(idle_for)
                ):
                    break
        finally:
            control.consuming = False

    def _blocked(self, tp: TopicPartition) -> bool:
        """Step 3's question before each record: does ``tp`` hold enough ahead of the others
        (:meth:`BatchAssembler.throttle`)? Its records then wait, unparsed, in the buffer."""
        if not self.assembler.merges:
            return False
        limit = HELD_BATCHES * self.rules.cut.batch_size
        return tp in self.assembler.throttle(self.paused, limit)

    def _throttle(self, assembler: BatchAssembler) -> None:
        """Step 3b: stop reading the partitions of merged streams that are far ahead of the
        others, read them again once they caught up (:meth:`BatchAssembler.throttle`)."""
        if not assembler.merges and not self.paused:
            return
        paused = assembler.throttle(self.paused, HELD_BATCHES * self.rules.cut.batch_size)
        if paused != self.paused:
            self.feed.pause(paused - self.paused)
            self.feed.resume(self.paused - paused)
            self.paused = paused

    def _mark_idle(self) -> None:
        """Step 5's idle check: the partitions whose position is at their end offset."""
        ends = self.feed.end_offsets()
        caught_up = {tp for tp, end in ends.items() if self.feed.position(tp) >= end}
        self.assembler.mark_idle(caught_up)

    def _poll(self, stop: threading.Event) -> list[RawRecord]:
        """Step 2's poll; a broker that does not answer (a transient error) is waited for: logged
        once per outage, the turn's poll comes back empty after ``poll_retry_s``."""
        try:
            polled = self.feed.poll(self.rules.poll_timeout_ms)
        except TransientError as exc:
            if self.waiting_since is None:
                self.waiting_since = time.monotonic()
                logger.warning("consumer waits for the broker: %s; polling again", exc)
            stop.wait(self.rules.poll_retry_s)
            return []
        if self.waiting_since is not None:
            logger.warning(
                "consumer polls again after %.1f s", time.monotonic() - self.waiting_since
            )
            self.waiting_since = None
        return polled

    def _idle_exit(self, idle_for: float) -> bool:
        """Step 6, once nothing is pending or buffered."""
        limit = self.rules.until_idle_s
        waiting = self.waiting_since is not None  # a broker away is not "nothing more to do"
        if limit is None or waiting or self.busy() or idle_for < limit:
            return False
        feed = self.feed
        return all(feed.position(tp) >= end for tp, end in feed.end_offsets().items())


def _released(assembled: AssembledBatch) -> None:
    raise RuntimeError(
        f"batch {assembled.batch.batch_id} handed to a released loop (it ran; see "
        "ConsumingLoop.release)"
    )
