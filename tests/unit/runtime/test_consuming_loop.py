"""The pipeline's consuming loop, driven without a broker: records from an in-memory feed, the
real serial executor, a real staging file. Cut rules, ordering across streams, drain on stop,
pause and resume, a failing commit, idle exit."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from staging.exceptions import StagingError
from tests.unit.runtime.harness import FailingStage, LoopRig, MemoryFeed, StreamWriter


def _wait(condition: object, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_batches_are_cut_when_full_and_when_kafka_has_nothing_more(tmp_path: Path) -> None:
    writer = StreamWriter()
    records = [r for k in range(5) for r in writer.records("a", [k, k + 10, k + 20, k + 30])]
    rig = LoopRig(
        tmp_path / "s.duckdb", MemoryFeed(records, per_poll=2), batch_size=8, until_idle_s=0.2
    )
    rig.run()
    # two records (8 events) fill a batch; the fifth record alone is cut when a poll is empty
    assert rig.cut == [(1, 8), (2, 8), (3, 4)]
    assert rig.store.watermark == 3
    assert [r["_pos"] for r in rig.staged("log_a")] == list(range(20))
    assert rig.store.offsets() == {("pair.a", 0): 5}
    rig.close()


def test_streams_keep_their_order_and_batches_commit_in_order(tmp_path: Path) -> None:
    writer = StreamWriter()
    records = []
    for k in range(6):
        records += writer.records("a", [k, 100 + k]) + writer.records("b", [k])
    rig = LoopRig(
        tmp_path / "s.duckdb",
        MemoryFeed(records, per_poll=3),
        batch_size=4,
        until_idle_s=0.2,
        group=3,
    )
    rig.run()
    ids = [batch_id for batch_id, _ in rig.cut]
    assert ids == list(range(1, len(ids) + 1)) and rig.store.watermark == ids[-1]
    a, b = rig.staged("log_a"), rig.staged("log_b")
    assert [r["_pos"] for r in a] == list(range(12)) and [r["_pos"] for r in b] == list(range(6))
    assert [r["batch_id"] for r in a] == sorted(r["batch_id"] for r in a)
    assert rig.store.offsets() == {("pair.a", 0): 6, ("pair.b", 0): 6}
    # every event once: the state holds each key's last value
    kv = {
        r["key"]: (r["value"], r["stream"])
        for r in rig.store.query('SELECT "key", "value", "stream" FROM state.kv').to_pylist()
    }
    assert sorted(kv) == [*range(6), *range(100, 106)]
    assert all(kv[100 + k] == ((2 * k + 1) * 10, "a") for k in range(6))
    rig.close()


def test_stop_without_drain_ends_before_consuming(tmp_path: Path) -> None:
    writer = StreamWriter()
    rig = LoopRig(tmp_path / "s.duckdb", MemoryFeed(writer.records("a", [1, 2])))
    rig.stop.set()
    rig.run()
    assert rig.cut == [] and rig.store.watermark == 0 and rig.feed.polls == 0
    rig.close()


def test_stop_with_drain_consumes_what_kafka_holds_then_ends(tmp_path: Path) -> None:
    writer = StreamWriter()
    records = [r for k in range(10) for r in writer.records("a", [k])]
    rig = LoopRig(
        tmp_path / "s.duckdb", MemoryFeed(records, per_poll=1), batch_size=3, drain_s=30.0
    )
    rig.stop.set()
    started = time.monotonic()
    rig.run()
    assert time.monotonic() - started < 20  # ended by the drain, not its deadline
    assert sum(events for _, events in rig.cut) == 10
    assert [r["_pos"] for r in rig.staged("log_a")] == list(range(10))
    assert rig.store.offsets() == {("pair.a", 0): 10}
    rig.close()


def test_a_drain_consumes_a_backlog_whose_first_polls_come_back_empty(tmp_path: Path) -> None:
    """Records Kafka holds when the stop comes, whose fetch is still on its way: empty polls
    before the stop must not count as the drain's end (the loop ended at once, staging none)."""
    writer = StreamWriter()
    feed = MemoryFeed(partitions=[("pair.a", 0)])
    rig = LoopRig(tmp_path / "s.duckdb", feed, batch_size=3, drain_s=30.0)
    thread = rig.start()
    _wait(lambda: feed.polls >= 3)  # the loop idles on empty polls
    with feed.lock:
        feed.withheld_polls = 5
    feed.add([r for k in range(7) for r in writer.records("a", [k])])
    rig.stop.set()
    thread.join(20)
    assert not thread.is_alive() and rig.error is None
    assert sum(events for _, events in rig.cut) == 7
    assert [r["_pos"] for r in rig.staged("log_a")] == list(range(7))
    assert rig.store.offsets() == {("pair.a", 0): 7}
    rig.close()


def test_a_batch_limit_stops_the_run(tmp_path: Path) -> None:
    writer = StreamWriter()
    records = [r for k in range(10) for r in writer.records("a", [k])]
    rig = LoopRig(
        tmp_path / "s.duckdb", MemoryFeed(records, per_poll=1), batch_size=2, max_batches=2
    )
    rig.run()
    assert rig.cut == [(1, 2), (2, 2)] and rig.stop.is_set()
    assert rig.store.watermark == 2
    rig.close()


def test_pause_stops_polling_and_resume_consumes_from_where_it_stopped(tmp_path: Path) -> None:
    writer = StreamWriter()
    feed = MemoryFeed(writer.records("a", [1, 2]))
    rig = LoopRig(tmp_path / "s.duckdb", feed)
    thread = rig.start()
    _wait(lambda: rig.store.watermark == 1)
    assert rig.control.pause(timeout_s=5.0)
    polls = feed.polls
    feed.add(writer.records("a", [3, 4, 5]))
    time.sleep(0.3)
    assert feed.polls == polls and rig.store.watermark == 1  # nothing polled while paused
    assert not rig.control.pause(timeout_s=5.0)  # idempotent
    assert rig.control.resume()
    _wait(lambda: rig.store.watermark == 2)
    assert rig.cut == [(1, 2), (2, 3)]
    rig.stop.set()
    thread.join(10)
    assert not thread.is_alive() and rig.error is None
    assert [r["_pos"] for r in rig.staged("log_a")] == list(range(5))
    rig.close()


def test_a_paused_loop_ends_at_once_on_stop(tmp_path: Path) -> None:
    writer = StreamWriter()
    rig = LoopRig(tmp_path / "s.duckdb", MemoryFeed(writer.records("a", [1])), drain_s=30.0)
    rig.control.pause()
    thread = rig.start()
    time.sleep(0.2)
    rig.stop.set()
    thread.join(5)
    assert not thread.is_alive() and rig.error is None and rig.cut == []
    rig.close()


def test_a_failing_commit_stops_the_run_with_its_error_and_stages_nothing_of_it(
    tmp_path: Path,
) -> None:
    writer = StreamWriter()
    records = [r for k in range(6) for r in writer.records("a", [k])]
    error = StagingError("disk full")
    rig = LoopRig(
        tmp_path / "s.duckdb",
        MemoryFeed(records, per_poll=1),
        batch_size=1,
        stage=lambda store: FailingStage(store, 3, error),
    )
    with pytest.raises(StagingError, match="disk full"):
        rig.run()
    assert rig.stop.is_set() and rig.committer.error is error
    assert rig.store.watermark == 2
    assert rig.store.offsets() == {("pair.a", 0): 2}
    assert [r["_pos"] for r in rig.staged("log_a")] == [0, 1]
    rig.close()


def test_idle_exit_waits_for_what_is_busy_then_for_quiet(tmp_path: Path) -> None:
    writer = StreamWriter()
    feed = MemoryFeed(writer.records("a", [1]))
    rig = LoopRig(tmp_path / "s.duckdb", feed, until_idle_s=0.1)
    rig.busy = True  # a collector still producing
    thread = rig.start()
    _wait(lambda: rig.store.watermark == 1)
    time.sleep(0.3)
    assert thread.is_alive()  # idle, but something may still bring work
    feed.add(writer.records("a", [2]))
    _wait(lambda: rig.store.watermark == 2)
    rig.busy = False
    thread.join(10)
    assert not thread.is_alive() and rig.error is None
    assert rig.cut == [(1, 1), (2, 1)] and not rig.stop.is_set()
    rig.close()
