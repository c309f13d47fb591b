"""The console's recorder (:mod:`api.console_recorder`) and its per-second series
(:mod:`api.console_series`): the ring keeps exactly the last ``capacity`` batches, seconds are
bucketed and carried forward, percentiles are nearest-rank, the targets' acknowledgements stamp
each batch once (also when the acknowledgement comes first), and the invariants hold while a
committer, a migrator and readers run at once."""

from __future__ import annotations

import random
import threading

import pytest

from api.console_recorder import ConsoleRecorder
from api.console_series import SecondSeries, nearest_rank
from etl_dataflows.batch import StepDecision, StepStats
from migration.progress import TargetProgress
from runtime.committer import CommittedBatch
from staging.batch_commit import StreamProgress


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def batch(
    batch_id: int,
    *,
    at: float = 1000.0,
    events: int = 10,
    latency_s: float = 0.1,
    decisions: tuple[StepDecision, ...] = (),
    steps: dict[str, StepStats] | None = None,
) -> CommittedBatch:
    return CommittedBatch(
        batch_id=batch_id,
        events=events,
        executed_s=0.002,
        latency_s=latency_s,
        records=1,
        arrived_at=at - latency_s,
        committed_at=at,
        commit_s=0.003,
        decisions=decisions,
        steps=steps or {},
        streams={"puts": StreamProgress(batch_id, None, batch_id * events, batch_id)},
    )


def test_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert nearest_rank(values, 50) == 50.0
    assert nearest_rank(values, 99) == 99.0
    assert nearest_rank(values, 100) == 100.0
    assert nearest_rank([0.3], 99) == 0.3
    assert nearest_rank([1.0, 2.0, 3.0, 4.0], 50) == 2.0
    assert nearest_rank([1.0, 2.0, 3.0], 99) == 3.0  # fewer than 100: the maximum
    assert nearest_rank([], 50) is None


def test_the_ring_keeps_the_last_capacity_batches_in_order() -> None:
    recorder = ConsoleRecorder(capacity=5, clock=Clock(1000.0))
    for batch_id in range(1, 13):
        recorder.observe_batch(batch(batch_id))
    assert [b.facts.batch_id for b in recorder.batches(0, 100)] == [8, 9, 10, 11, 12]
    assert [b.facts.batch_id for b in recorder.batches(9, 2)] == [10, 11]
    assert recorder.batches(12, 10) == []
    assert [b.facts.batch_id for b in recorder.view(recent=3).recent] == [10, 11, 12]
    assert recorder.committed_at(9) == 1000.0 and recorder.committed_at(3) is None
    view = recorder.view()
    assert view.events_total == 120 and view.last_batch == 12
    assert view.streams["puts"].last_batch == 12 and view.streams["puts"].events == 120


def test_series_buckets_by_second_and_carries_the_watermark() -> None:
    clock = Clock(999.5)
    recorder = ConsoleRecorder(watermark=7, clock=clock)
    recorder.observe_batch(batch(8, at=1000.1, events=3, latency_s=0.2))
    recorder.observe_batch(batch(9, at=1000.9, events=4, latency_s=0.4))
    recorder.observe_batch(batch(10, at=1002.5, events=5, latency_s=0.1))
    clock.now = 1003.2  # the second under way (1003) is not a point yet
    points = recorder.view().series
    assert [p.t for p in points] == [999.0, 1000.0, 1001.0, 1002.0]
    assert [p.events for p in points] == [0, 7, 0, 5]
    assert [p.batches for p in points] == [0, 2, 0, 1]
    assert [p.staged_watermark for p in points] == [7, 9, 9, 10]
    assert [p.freshness_p50_s for p in points] == [None, 0.2, None, 0.1]
    assert [p.freshness_p99_s for p in points] == [None, 0.4, None, 0.1]
    # events per second over the (at most 10) complete seconds since the start: 12 in 4 s
    assert recorder.view().events_per_second == pytest.approx(12 / 4)
    clock.now = 1020.0  # idle for longer than the rate's window
    assert recorder.view().events_per_second == 0.0


def test_series_forgets_seconds_beyond_its_span() -> None:
    series = SecondSeries(span_s=5, watermark=1)
    for second in range(100, 110):
        series.add(second + 0.5, events=second, freshness_s=0.1, watermark=second)
    points = series.points(110.0)
    assert [p.t for p in points] == [105.0, 106.0, 107.0, 108.0, 109.0]
    assert [p.events for p in points] == [105, 106, 107, 108, 109]
    assert series.events_between(0, 200) == sum(range(105, 110))
    # an idle minute later: every point empty, the watermark carried from the evicted seconds
    later = series.points(170.0)
    assert all(p.events == 0 for p in later) and {p.staged_watermark for p in later} == {109}


def test_a_busy_second_keeps_a_bounded_sample_and_exact_counts() -> None:
    series = SecondSeries(span_s=10, samples=64)
    values = [i / 1000 for i in range(5000)]
    random.Random(3).shuffle(values)
    for v in values:
        series.add(50.25, events=2, freshness_s=v, watermark=1)
    (point,) = [p for p in series.points(51.0) if p.batches]
    assert point.events == 10_000 and point.batches == 5000
    assert len(series._buckets[50].samples) == 64  # noqa: SLF001 - the bound under test
    # a uniform sample of 0..5 s: its median is near 2.5 s, its p99 near the top
    assert point.freshness_p50_s is not None and 1.5 < point.freshness_p50_s < 3.5
    assert point.freshness_p99_s is not None and point.freshness_p99_s > 4.0


def test_acknowledgements_stamp_each_batch_once() -> None:
    recorder = ConsoleRecorder(targets=["postgres", "duckdb"], acknowledged={"postgres": 0})
    for batch_id in range(1, 6):
        recorder.observe_batch(batch(batch_id))
    recorder.observe_target(TargetProgress("postgres", True, acknowledged=3, at=2000.0))
    stamps = {b.facts.batch_id: dict(b.targets) for b in recorder.batches(0, 10)}
    assert [stamps[i].get("postgres") for i in range(1, 6)] == [2000.0] * 3 + [None] * 2
    assert all("duckdb" not in s for s in stamps.values())
    recorder.observe_target(TargetProgress("postgres", True, acknowledged=5, at=2001.0))
    recorder.observe_target(TargetProgress("postgres", True, acknowledged=5, at=2002.0))
    stamps = {b.facts.batch_id: dict(b.targets) for b in recorder.batches(0, 10)}
    assert [stamps[i]["postgres"] for i in range(1, 6)] == [2000.0] * 3 + [2001.0] * 2
    # the migrator may acknowledge a batch before the committer's observer tells of it
    recorder.observe_target(TargetProgress("duckdb", True, acknowledged=6, at=2003.0))
    recorder.observe_batch(batch(6))
    recorder.observe_batch(batch(7))
    last = {b.facts.batch_id: dict(b.targets) for b in recorder.batches(5, 10)}
    assert last[6] == {"duckdb": 2003.0} and last[7] == {}
    state = recorder.view().targets
    assert state["postgres"].acknowledged == 5 and state["postgres"].acknowledged_at == 2001.0
    assert state["duckdb"].acknowledged == 6 and state["duckdb"].reachable is True


def test_a_target_that_fails_loses_its_merge_point_until_it_answers() -> None:
    recorder = ConsoleRecorder(targets=["postgres"], acknowledged={"postgres": 4})
    assert recorder.view().targets["postgres"].reachable is None
    assert recorder.view().targets["postgres"].acknowledged == 4
    recorder.observe_target(TargetProgress("postgres", True, acknowledged=4, merged_through=3))
    recorder.observe_target(TargetProgress("postgres", False, error="connection refused"))
    state = recorder.view().targets["postgres"]
    assert state.reachable is False and state.error == "connection refused"
    assert state.merged_through is None and state.acknowledged == 4
    recorder.observe_target(TargetProgress("postgres", True, merged_through=4))
    state = recorder.view().targets["postgres"]
    assert state.reachable is True and state.error is None and state.merged_through == 4


def test_step_totals_and_the_last_decision() -> None:
    recorder = ConsoleRecorder()
    interpreted = StepDecision("apply", "interpreted", "a Python callable", {"transactions": 4})
    compiled = StepDecision("apply", "sequential", "cheap", {"transactions": 6})
    driver = StepDecision("apply", "driver", "few", {}, local=compiled)
    for decision, n in ((interpreted, 4), (compiled, 6)):
        recorder.observe_batch(
            batch(
                1 if n == 4 else 2,
                decisions=(decision,),
                steps={
                    "parse": StepStats(rows_in=n, rows_out=n - 1, dead_letters=1),
                    "apply": StepStats(rows_in=n - 1, rows_out=n - 1, committed=n - 2, aborted=1),
                },
            )
        )
    totals = recorder.steps()
    assert totals["parse"].events == 10 and totals["parse"].dead_letters == 2
    assert totals["parse"].compiled is None and totals["parse"].last_strategy is None
    assert totals["apply"].committed_txns == 6 and totals["apply"].aborted_txns == 2
    assert totals["apply"].compiled is True and totals["apply"].last_strategy == "sequential"
    recorder.observe_batch(batch(3, decisions=(driver,)))
    assert recorder.steps()["apply"].compiled is True  # the local decision under the driver
    recorder.observe_batch(batch(4, decisions=(interpreted,)))
    assert recorder.steps()["apply"].compiled is False


def test_invariants_hold_while_committer_migrator_and_readers_run_at_once() -> None:
    capacity, total = 64, 4000
    recorder = ConsoleRecorder(targets=["t"], capacity=capacity)
    acked = [0]
    committed = [0]
    done = threading.Event()
    problems: list[str] = []

    def commit() -> None:
        for batch_id in range(1, total + 1):
            recorder.observe_batch(batch(batch_id, at=1000.0 + batch_id / 100, events=1))
            committed[0] = batch_id

    def migrate() -> None:
        rng = random.Random(1)
        while acked[0] < total:
            through = min(committed[0], acked[0] + rng.randint(0, 7))
            if through > acked[0]:
                recorder.observe_target(TargetProgress("t", True, acknowledged=through))
                acked[0] = through

    def read() -> None:
        rng = random.Random(2)
        while not done.is_set():
            view = recorder.view()
            ids = [b.facts.batch_id for b in view.recent]
            if ids != sorted(ids) or len(set(ids)) != len(ids):
                problems.append(f"recent out of order: {ids}")
            page = recorder.batches(rng.randint(0, total), rng.randint(1, 100))
            pids = [b.facts.batch_id for b in page]
            if pids and pids != list(range(pids[0], pids[0] + len(pids))):
                problems.append(f"a page with holes: {pids}")
            if len(recorder.batches(0, 10_000)) > capacity:
                problems.append("the ring grew beyond its capacity")
            stamped = [b.facts.batch_id for b in page if "t" in b.targets]
            if stamped and stamped != pids[: len(stamped)]:
                problems.append(f"a later batch stamped before an earlier one: {pids}")

    threads = [threading.Thread(target=f) for f in (commit, migrate, read, read)]
    for t in threads[:2]:
        t.start()
    for t in threads[2:]:
        t.start()
    threads[0].join(60)
    threads[1].join(60)
    done.set()
    for t in threads[2:]:
        t.join(60)
    assert not problems, problems[:3]
    view = recorder.view()
    assert view.events_total == total and view.last_batch == total
    ring = recorder.batches(0, 10_000)
    assert [b.facts.batch_id for b in ring] == list(range(total - capacity + 1, total + 1))
    assert all("t" in b.targets for b in ring)  # every batch acknowledged, each stamped
    assert view.targets["t"].acknowledged == total
