"""What the console shows of the batches committed while the service runs: :class:`ConsoleRecorder`.

The pipeline's committer tells :meth:`ConsoleRecorder.observe_batch` of every batch it commits
(:class:`api.hosted.CommittedBatchFacts`), and the migrator tells
:meth:`ConsoleRecorder.observe_target` what it learns of each warehouse target
(:class:`migration.progress.TargetProgress`). The console's routes (:mod:`api.console_view`) read
it once a second per open page, so its contract is about cost:

* **Bounded memory.** A ring of the last ``capacity`` batches (each holds the facts the committer
  made: counts, times, the engine's step decisions; no row data), the per-second series of the
  last ``span_s`` seconds (:class:`api.console_series.SecondSeries`), and per step, per stream and
  per target one entry each. Nothing grows with the number of batches committed.
* **O(1) per batch.** :meth:`observe_batch` appends to the ring, adds to a second's bucket and to
  the step totals (O(steps of the dataflow)); :meth:`observe_target` stamps the batches a target
  acknowledged, each batch once per target (amortized O(1) per batch and target).
* **Thread-safe.** One lock guards everything; the observers hold it for those O(1) updates and
  the readers only while they copy what they answer, so a page polling never holds the committer
  up for longer than a copy of at most ``limit`` ring entries.

Batch ids increase from one observed batch to the next (staging commits in order). A target's
acknowledgement time of a batch is when the migrator learnt that the target holds it (after the
load's commit); batches the target held before the recorder saw them are stamped with the time
of the acknowledgement that covered them.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from api.console_series import SecondSeries, SeriesPoint
from api.hosted import CommittedBatchFacts
from migration.progress import TargetProgress
from staging.batch_commit import StreamProgress

#: Batches the ring keeps (``GET /console/batches`` serves these; older ones: ``GET /batches``).
RING_CAPACITY = 1000
#: Seconds the per-second series covers.
SERIES_SPAN_S = 300
#: The window of ``events_per_second``.
RATE_WINDOW_S = 10


@dataclass
class RecordedBatch:
    """One ring entry: the committer's facts and, per target, when it acknowledged the batch
    (epoch s). A copy handed to a reader is its own (``targets`` copied)."""

    facts: CommittedBatchFacts
    targets: dict[str, float] = field(default_factory=dict)


@dataclass
class StepTotals:
    """One step's counts over the batches observed; its last decision's strategy and whether it
    ran compiled (None until a batch ran it with a decision, or for a stateless step)."""

    batches: int = 0
    events: int = 0
    rows_out: int = 0
    committed_txns: int = 0
    aborted_txns: int = 0
    dead_letters: int = 0
    last_strategy: str | None = None
    compiled: bool | None = None


@dataclass
class TargetState:
    """What the migrator last told of one target: the last batch it acknowledged and when the
    recorder learnt it, what it merged, whether it answered (None: not contacted yet)."""

    acknowledged: int = 0
    acknowledged_at: float | None = None
    merged_through: int | None = None
    reachable: bool | None = None
    error: str | None = None


@dataclass(frozen=True)
class RecorderView:
    """A consistent copy of the recorder for one overview: totals, the rate, the series, the
    newest batches, streams, targets, and the last batch id observed."""

    events_total: int
    events_per_second: float
    series: list[SeriesPoint]
    recent: list[RecordedBatch]
    streams: dict[str, StreamProgress]
    targets: dict[str, TargetState]
    last_batch: int


def compiled(decision_strategy: str, local_strategy: str | None) -> bool:
    """Whether a step ran compiled: not ``interpreted`` (for Spark's ``driver``, the local
    executor's decision under it decides)."""
    return (local_strategy or decision_strategy) != "interpreted"


class ConsoleRecorder:
    """See the module docstring. ``targets`` are the warehouse targets (their timeline entries
    start empty), ``acknowledged`` what each held when the service started, ``watermark`` the
    staged watermark then; ``clock`` gives epoch seconds (tests pass their own)."""

    def __init__(
        self,
        *,
        targets: Iterable[str] = (),
        acknowledged: Mapping[str, int] | None = None,
        watermark: int = 0,
        capacity: int = RING_CAPACITY,
        span_s: int = SERIES_SPAN_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._clock = clock
        self.started_at = clock()
        self._lock = threading.Lock()
        self._slots: list[RecordedBatch | None] = [None] * capacity
        self._first = 0  # sequence number of the oldest entry in the ring
        self._next = 0  # sequence number the next entry gets
        self._series = SecondSeries(span_s=span_s, watermark=watermark)
        self._events_total = 0
        self._last_batch = watermark
        self._steps: dict[str, StepTotals] = {}
        self._streams: dict[str, StreamProgress] = {}
        acks = dict(acknowledged or {})
        self._targets = {t: TargetState(acknowledged=acks.get(t, 0)) for t in targets}
        self._cursor = dict.fromkeys(self._targets, 0)  # first entry a target has not stamped

    # -- observing (the committer's and the migrator's threads) --------------------------------

    def observe_batch(self, batch: CommittedBatchFacts) -> None:
        """Account one committed batch (a pipeline observer)."""
        entry = RecordedBatch(batch)
        with self._lock:
            seq = self._next
            if seq - self._first == self.capacity:
                self._slots[self._first % self.capacity] = None
                self._first += 1
            self._slots[seq % self.capacity] = entry
            self._next = seq + 1
            for name, state in self._targets.items():
                if state.acknowledged >= batch.batch_id and state.acknowledged_at is not None:
                    entry.targets[name] = state.acknowledged_at
                    if self._cursor[name] == seq:
                        self._cursor[name] = seq + 1
            self._events_total += batch.events
            self._last_batch = max(self._last_batch, batch.batch_id)
            self._series.add(batch.committed_at, batch.events, batch.latency_s, batch.batch_id)
            self._streams.update(batch.streams)
            self._account_steps(batch)

    def _account_steps(self, batch: CommittedBatchFacts) -> None:
        for step, stats in batch.steps.items():
            totals = self._steps.get(step)
            if totals is None:
                totals = self._steps[step] = StepTotals()
            totals.batches += 1
            totals.events += stats.rows_in
            totals.rows_out += stats.rows_out
            totals.committed_txns += stats.committed
            totals.aborted_txns += stats.aborted
            totals.dead_letters += stats.dead_letters
        for decision in batch.decisions:
            totals = self._steps.setdefault(decision.step, StepTotals())
            local = decision.local.strategy if decision.local is not None else None
            totals.last_strategy = decision.strategy
            totals.compiled = compiled(decision.strategy, local)

    def observe_target(self, progress: TargetProgress) -> None:
        """Note what the migrator learnt of a target (a migrator observer)."""
        with self._lock:
            state = self._targets.get(progress.target)
            if state is None:
                state = self._targets[progress.target] = TargetState()
                self._cursor[progress.target] = self._first
            state.reachable = progress.reachable
            state.error = progress.error
            if not progress.reachable:
                state.merged_through = None
                return
            if progress.merged_through is not None:
                state.merged_through = progress.merged_through
            acked = progress.acknowledged
            if acked is None or (acked == state.acknowledged and state.acknowledged_at is not None):
                return
            # the target's ledger is the truth, even going back (a warehouse replaced and
            # bootstrapped again); the batches stamped earlier keep their stamps
            state.acknowledged = acked
            state.acknowledged_at = progress.at
            self._stamp(progress.target, acked, progress.at)

    def _stamp(self, target: str, through: int, at: float) -> None:
        seq = max(self._cursor[target], self._first)
        while seq < self._next:
            entry = self._slots[seq % self.capacity]
            assert entry is not None
            if entry.facts.batch_id > through:
                break
            entry.targets.setdefault(target, at)
            seq += 1
        self._cursor[target] = seq

    def seed_streams(self, streams: Mapping[str, StreamProgress], watermark: int) -> None:
        """Staging's stream progress at ``watermark``, read because batches committed that the
        recorder did not observe (before the service started, or by another committer)."""
        with self._lock:
            if watermark > self._last_batch:
                self._streams.update(streams)
                self._last_batch = watermark

    # -- reading (the routes' threads) ---------------------------------------------------------

    def _entry(self, seq: int) -> RecordedBatch:
        entry = self._slots[seq % self.capacity]
        assert entry is not None
        return RecordedBatch(entry.facts, dict(entry.targets))

    def _seq_after(self, batch_id: int) -> int:
        """The sequence number of the first entry whose batch id is above ``batch_id``."""
        low, high = self._first, self._next
        while low < high:
            mid = (low + high) // 2
            entry = self._slots[mid % self.capacity]
            assert entry is not None
            if entry.facts.batch_id <= batch_id:
                low = mid + 1
            else:
                high = mid
        return low

    def batches(self, after: int = 0, limit: int = 100) -> list[RecordedBatch]:
        """The ring's batches with ids above ``after``, oldest first, at most ``limit``."""
        with self._lock:
            start = self._seq_after(after)
            return [self._entry(s) for s in range(start, min(self._next, start + max(0, limit)))]

    def committed_at(self, batch_id: int) -> float | None:
        """When batch ``batch_id`` committed, if the ring holds it."""
        with self._lock:
            seq = self._seq_after(batch_id - 1)
            if seq < self._next:
                facts = self._entry(seq).facts
                if facts.batch_id == batch_id:
                    return facts.committed_at
        return None

    def steps(self) -> dict[str, StepTotals]:
        """Per step, its totals since the service started (copies)."""
        with self._lock:
            return {name: StepTotals(**vars(t)) for name, t in self._steps.items()}

    @property
    def last_batch(self) -> int:
        """The newest batch id the recorder knows staging holds."""
        with self._lock:
            return self._last_batch

    def view(self, recent: int = 20) -> RecorderView:
        """A consistent copy for an overview at the clock's now; ``recent`` newest batches."""
        now = self._clock()
        with self._lock:
            series = self._series.points(now, since=self.started_at)
            end = math.floor(now)
            first = max(end - RATE_WINDOW_S, math.floor(self.started_at))
            seconds = end - first
            rate = self._series.events_between(first, end) / seconds if seconds > 0 else 0.0
            start = max(self._first, self._next - max(0, recent))
            return RecorderView(
                events_total=self._events_total,
                events_per_second=rate,
                series=series,
                recent=[self._entry(s) for s in range(start, self._next)],
                streams=dict(self._streams),
                targets={name: TargetState(**vars(t)) for name, t in self._targets.items()},
                last_batch=self._last_batch,
            )
