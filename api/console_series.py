"""Per-second figures of committed batches over the last few minutes, for the console's charts.

:class:`SecondSeries` keeps one bucket per wall-clock second in which a batch committed: the
events and batches of that second, the freshness of each of its batches (from the first record's
arrival to the staging commit), and the staged watermark it reached. Contract:

* **Bounded memory.** At most ``span_s + 1`` buckets, each with at most ``samples`` freshness
  values: beyond that a bucket keeps a uniform random sample of its batches' freshness (reservoir
  sampling, a seeded generator), so its percentiles stay unbiased; counts stay exact.
* **O(1) per batch** in :meth:`add`; :meth:`points` is O(``span_s``) and sorts each bucket's
  samples once (the percentiles of a second that has ended are kept).
* **Not thread-safe** on its own: :class:`api.console_recorder.ConsoleRecorder` holds its lock
  around every call.

Percentiles are nearest-rank: the p-th percentile of n values is the ``ceil(p/100 * n)``-th
smallest, always a freshness some batch had (the p99 of fewer than 100 batches is their maximum).
"""

from __future__ import annotations

import math
import random
from collections import OrderedDict
from dataclasses import dataclass, field


def nearest_rank(ordered: list[float], q: float) -> float | None:
    """The ``q``-th percentile (0 < q <= 100) of ``ordered`` (sorted ascending) by nearest
    rank; None when there are no values."""
    if not ordered:
        return None
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


@dataclass
class _Bucket:
    events: int = 0
    batches: int = 0
    watermark: int = 0
    samples: list[float] = field(default_factory=list)
    #: (p50, p99) once the second has ended and they were asked for
    percentiles: tuple[float | None, float | None] | None = None


@dataclass(frozen=True)
class SeriesPoint:
    """One second of the series: it began at ``t`` (epoch s); the events and batches committed
    in it; the p50 and p99 freshness of those batches (None when none committed); the staged
    watermark at its end."""

    t: float
    events: int
    batches: int
    freshness_p50_s: float | None
    freshness_p99_s: float | None
    staged_watermark: int


class SecondSeries:
    """See the module docstring. ``watermark`` is the staged watermark before the first batch
    added (a second before any bucket shows it)."""

    def __init__(
        self, *, span_s: int = 300, samples: int = 1024, watermark: int = 0, seed: int = 0
    ) -> None:
        if span_s < 1 or samples < 1:
            raise ValueError("span_s and samples must be at least 1")
        self.span_s = span_s
        self.samples = samples
        self._buckets: OrderedDict[int, _Bucket] = OrderedDict()
        #: the watermark reached by the buckets that fell out of the window
        self._before = watermark
        self._random = random.Random(seed)

    def add(self, committed_at: float, events: int, freshness_s: float, watermark: int) -> None:
        """Account one batch committed at ``committed_at`` (epoch s)."""
        second = math.floor(committed_at)
        bucket = self._buckets.get(second)
        if bucket is None:
            bucket = self._buckets[second] = _Bucket()
            self._evict(second - self.span_s)
        bucket.events += events
        bucket.batches += 1
        bucket.watermark = max(bucket.watermark, watermark)
        bucket.percentiles = None
        if len(bucket.samples) < self.samples:
            bucket.samples.append(freshness_s)
        else:  # reservoir sampling: every batch of the second equally likely to be kept
            slot = self._random.randrange(bucket.batches)
            if slot < self.samples:
                bucket.samples[slot] = freshness_s

    def _evict(self, oldest: int) -> None:
        """Drop the buckets before second ``oldest`` (and the oldest ones beyond the bound, if
        the clock went back)."""
        while self._buckets:
            second, bucket = next(iter(self._buckets.items()))
            if second >= oldest and len(self._buckets) <= self.span_s + 1:
                break
            self._before = max(self._before, bucket.watermark)
            del self._buckets[second]

    def points(self, now: float, *, since: float | None = None) -> list[SeriesPoint]:
        """One point per second that has ended, oldest first: the last ``span_s`` seconds
        before ``now`` (not before ``since``, the series' start, when given). Seconds without
        a batch are points with no events and the watermark carried forward."""
        end = math.floor(now)  # the second under way is left out: its counts are partial
        first = end - self.span_s
        if since is not None:
            first = max(first, math.floor(since))
        self._evict(first)
        watermark = self._before
        out: list[SeriesPoint] = []
        for second in range(first, end):
            bucket = self._buckets.get(second)
            if bucket is None:
                out.append(SeriesPoint(float(second), 0, 0, None, None, watermark))
                continue
            if bucket.percentiles is None:
                ordered = sorted(bucket.samples)
                bucket.percentiles = (nearest_rank(ordered, 50), nearest_rank(ordered, 99))
            watermark = max(watermark, bucket.watermark)
            p50, p99 = bucket.percentiles
            out.append(
                SeriesPoint(float(second), bucket.events, bucket.batches, p50, p99, watermark)
            )
        return out

    def events_between(self, first: int, end: int) -> int:
        """Events committed in the seconds ``[first, end)``."""
        return sum(b.events for s, b in self._buckets.items() if first <= s < end)
