"""The consuming loop over a stream of three partitions (an in-memory feed, a real staging file,
the serial executor): a partition that stays empty stops holding the others back once it is idle
and read to its end; a partition whose records are in Kafka but not read yet holds the others back
however long it is silent; the loop does not end on idle while events are held back; a partition
read far ahead of the others stops being read until they catch up."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from ingest.assembler import RawRecord
from ingest.records import encode_batch, from_ipc
from runtime.consuming import HELD_BATCHES
from staging.batch_commit import BatchCommit
from staging.store import CommitHook, StagingStore
from tests.unit.runtime.harness import LoopRig, MemoryFeed

TOPIC = "pair.a"
TPS = [(TOPIC, p) for p in range(3)]


def _records(partition: int, batches: list[list[int]], first_batch: int) -> list[RawRecord]:
    """One record per logical batch of event times (µs); every event writes key 1 with its
    position (= its event time) as value."""
    out = []
    for i, times in enumerate(batches):
        ts = np.asarray(times, dtype=np.int64)
        events = pa.table(
            {
                "key": pa.array(np.ones(len(ts), dtype=np.int64)),
                "value": pa.array(ts),
                "_ts": pa.array(ts),
                "_pos": pa.array(ts),
            }
        )
        (record,) = encode_batch(
            "a", first_batch + i, events, [], cap=1_000_000, last_pos=int(ts[-1])
        )
        out.append(RawRecord(TOPIC, partition, i, record.value, record.headers))
    return out


def _check_order(rig: LoopRig, expected: list[int]) -> None:
    rows = rig.store.query(
        'SELECT batch_id, min("_ts") AS lo, max("_ts") AS hi, count(*) AS n '
        'FROM outputs."log_a" GROUP BY batch_id ORDER BY batch_id'
    ).to_pylist()
    assert sum(r["n"] for r in rows) == len(expected)
    for before, after in itertools.pairwise(rows):
        assert before["hi"] < after["lo"]
    staged = [r["_pos"] for r in rig.staged("log_a")]
    assert sorted(staged) == expected
    kv = rig.store.query('SELECT "value" FROM state.kv WHERE "key" = 1').column(0).to_pylist()
    assert kv == [max(expected)]  # the newest event wrote last


def test_an_empty_partition_stops_holding_back_once_idle_and_read_to_its_end(
    tmp_path: Path,
) -> None:
    evens = _records(0, [[0, 2, 4], [6, 8, 10], [12, 14]], first_batch=1)
    odds = _records(1, [[1, 3, 5], [7, 9, 11], [13, 15]], first_batch=4)
    feed = MemoryFeed(odds + evens, per_poll=1, partitions=TPS)  # one partition entirely first
    rig = LoopRig(
        tmp_path / "s.duckdb",
        feed,
        batch_size=4,
        until_idle_s=0.3,
        partitions=TPS,
        partition_idle_ms=100,
    )
    thread = rig.start()
    thread.join(30)
    assert not thread.is_alive() and rig.error is None
    _check_order(rig, list(range(16)))
    held = rig.store.partitions()
    assert sorted(held) == [("a", TOPIC, p) for p in range(3)]
    assert all(m.held is None for m in held.values())
    assert held[("a", TOPIC, 1)].last_batch == 6 and held[("a", TOPIC, 2)].max_ts is None
    rig.close()


def test_a_partition_with_unread_records_holds_the_others_back_however_long_it_is_silent(
    tmp_path: Path,
) -> None:
    evens = _records(0, [[0, 2, 4], [6, 8, 10]], first_batch=1)
    odds = _records(1, [[1, 3, 5], [7, 9, 11]], first_batch=3)
    late = _records(2, [[12, 13]], first_batch=5)
    feed = MemoryFeed(evens + late, per_poll=1, partitions=TPS)
    feed.ends[(TOPIC, 1)] = len(odds)  # in Kafka, not fetched yet
    rig = LoopRig(
        tmp_path / "s.duckdb",
        feed,
        batch_size=4,
        until_idle_s=0.2,
        partitions=TPS,
        partition_idle_ms=50,
    )
    thread = rig.start()
    time.sleep(1.0)  # twenty idle timeouts
    assert thread.is_alive(), "the loop ended while events were held back"
    rows = rig.store.query('SELECT count(*) AS n FROM outputs."log_a"').to_pylist()
    assert rows == [{"n": 0}], "events were applied before a partition with unread records"
    feed.add(odds)
    thread.join(30)
    assert not thread.is_alive() and rig.error is None
    _check_order(rig, list(range(14)))
    rig.close()


class _HeldRecorder:
    """The real store; notes how many events each committed batch's merge state holds back."""

    def __init__(self, store: StagingStore) -> None:
        self.store = store
        self.held: list[int] = []

    def commit(self, commits: list[BatchCommit], *, hook: CommitHook | None = None) -> None:
        for c in commits:
            blobs = [p.held for p in c.partitions.values() if p.held]
            self.held.append(sum(from_ipc(b).num_rows for b in blobs))
        self.store.commit(commits, hook=hook)


def test_a_partition_read_far_ahead_is_paused_until_the_others_catch_up(tmp_path: Path) -> None:
    n = 40
    odds = _records(1, [[6 * i + 1, 6 * i + 3, 6 * i + 5] for i in range(n)], first_batch=1)
    evens = _records(0, [[6 * i, 6 * i + 2, 6 * i + 4] for i in range(n)], first_batch=n + 1)
    # odds all first, and a poll brings half a partition: the loop stops adding odd records to
    # the merge once they are far enough ahead (they wait in its buffer), then stops fetching them
    feed = MemoryFeed(odds + evens, per_poll=20, partitions=TPS[:2])
    recorders: list[_HeldRecorder] = []

    def stage(store: StagingStore) -> _HeldRecorder:
        recorders.append(_HeldRecorder(store))
        return recorders[0]

    rig = LoopRig(
        tmp_path / "s.duckdb",
        feed,
        batch_size=4,
        until_idle_s=0.3,
        partitions=TPS[:2],
        partition_idle_ms=100,
        stage=stage,
    )
    thread = rig.start()
    thread.join(60)
    assert not thread.is_alive() and rig.error is None
    _check_order(rig, list(range(6 * n)))
    assert (TOPIC, 1) in feed.ever_paused and not feed.paused
    # at most the limit (HELD_BATCHES batches of 4) plus the record that crossed it, where
    # without the throttle all 120 odd events would be held at once
    assert max(recorders[0].held) <= HELD_BATCHES * 4 + 3
    rig.close()
