"""The HTTP push source without a broker: offers become punctuated chunks with consecutive
positions, typed events and rejects; the offer returns when the collector reports the batches.
Event times are checked row by row (rejects keep the event as JSON); offers with unknown fields,
no events or an event too large for a record are refused whole, with nothing taken."""

from __future__ import annotations

import json
import threading
import time

import pyarrow as pa
import pytest

from ingest.exceptions import (
    EventTooLarge,
    NoEvents,
    PositionConflict,
    PushNotProduced,
    PushRefused,
    PushTimedOut,
    UnknownFields,
)
from ingest.push import HttpPushSource
from ingest.records import event_limit

COLUMNS = {"op": "string", "key": "int64", "value": "int64"}


def _collect(source: HttpPushSource, start: int, chunks: list, produced: list) -> None:
    batch = 10
    for chunk in source.read(start):
        if chunk.events.num_rows == 0 and not chunk.rejects:
            continue  # heartbeat
        chunks.append(chunk)
        assert chunk.punctuation and chunk.on_produced is not None
        chunk.on_produced(batch, batch)
        produced.append(batch)
        batch += 1


def test_offers_become_positioned_punctuated_batches() -> None:
    source = HttpPushSource("kv.puts", COLUMNS, heartbeat_s=0.01)
    chunks: list = []
    produced: list = []
    reader = threading.Thread(target=_collect, args=(source, 100, chunks, produced))
    reader.start()
    first = source.offer(
        [
            {"op": "put", "key": 1, "value": 5, "_ts": 1_000},
            {"op": "put", "key": "not a number", "value": 1, "_ts": 2_000},
            {"op": "del", "key": 2, "value": None, "_ts": 3_000},
        ],
        timeout_s=5,
    )
    assert (first.events, first.rejects, first.first_pos, first.last_pos) == (2, 1, 100, 102)
    assert (first.first_batch, first.last_batch) == (10, 10)
    table = pa.table({"op": ["put", "put"], "key": [7, 8], "value": [70, 80]})
    second = source.offer(table, timeout_s=5)
    assert (second.events, second.first_pos, second.last_pos, second.first_batch) == (
        2,
        103,
        104,
        11,
    )
    source.close()
    reader.join(5)
    events = chunks[0].events
    assert events.column("_pos").to_pylist() == [100, 102]
    assert events.column("_ts").to_pylist() == [1_000, 3_000]
    assert chunks[0].rejects[0][0] == 101 and "key" in chunks[0].rejects[0][1]
    assert chunks[1].events.column("_pos").to_pylist() == [103, 104]
    assert chunks[1].events.column("key").type == pa.int64()


def test_a_conditional_offer_is_taken_only_at_its_position() -> None:
    """A retried offer (its answer lost) is taken once: refused with the next position when its
    first attempt was taken, taken when it was not; the check holds across a collector restart
    (a new read from the position the topic says)."""
    source = HttpPushSource("kv.puts", COLUMNS, heartbeat_s=0.01)
    chunks: list = []
    produced: list = []
    reader = threading.Thread(target=_collect, args=(source, 0, chunks, produced))
    reader.start()
    event = [{"op": "put", "key": 1, "value": 1, "_ts": 1_000}] * 2
    assert source.offer(event, timeout_s=5, expect_pos=0).first_pos == 0
    with pytest.raises(PositionConflict) as conflict:
        source.offer(event, timeout_s=5, expect_pos=0)  # the retry of a taken offer
    assert (conflict.value.expected, conflict.value.next_pos) == (0, 2)
    with pytest.raises(PositionConflict):
        source.offer(event, timeout_s=5, expect_pos=7)  # ahead: a gap would follow
    assert source.offer(event, timeout_s=5, expect_pos=2).first_pos == 2
    with pytest.raises(PushRefused):
        source.offer(event, timeout_s=5, expect_pos=-1)
    source.close()
    reader.join(5)
    assert [c.events.column("_pos").to_pylist() for c in chunks] == [[0, 1], [2, 3]]
    # a restarted collector resumes at 2 (its last batch in the topic ends at 1): the retry of
    # the offer at 2 is taken there
    chunks.clear()
    reader = threading.Thread(target=_collect, args=(source, 2, chunks, produced))
    reader.start()
    assert source.offer(event, timeout_s=5, expect_pos=2).first_pos == 2
    source.close()
    reader.join(5)
    assert [c.events.column("_pos").to_pylist() for c in chunks] == [[2, 3]]


def test_bad_tables_are_refused_and_a_stalled_collector_times_out() -> None:
    source = HttpPushSource("kv.puts", COLUMNS)
    with pytest.raises(PushRefused):
        source.offer(pa.table({"nope": [1]}), timeout_s=1)
    with pytest.raises(PushRefused):
        source.offer(pa.table({"key": ["x"]}), timeout_s=1)
    with pytest.raises(PushTimedOut):
        source.offer([{"op": "put", "key": 1, "value": 1}], timeout_s=0.2)  # nobody reads


def _serve(source: HttpPushSource) -> tuple[threading.Thread, list, list]:
    chunks: list = []
    produced: list = []
    reader = threading.Thread(target=_collect, args=(source, 0, chunks, produced), daemon=True)
    reader.start()
    return reader, chunks, produced


NOW = time.time_ns() // 1000


def test_json_event_times_are_checked_and_the_rejects_keep_the_event() -> None:
    source = HttpPushSource("kv.puts", COLUMNS, heartbeat_s=0.01)
    reader, chunks, _ = _serve(source)
    poison: list[object] = [2**62, -(2**62), -1, 2**70, "soon", True, 1.5, None]
    events = [{"op": "put", "key": i, "value": i, "_ts": ts} for i, ts in enumerate(poison)]
    events.append({"op": "put", "key": 99, "value": 99, "_ts": NOW})
    receipt = source.offer(events, timeout_s=5)
    source.close()
    reader.join(5)
    assert (receipt.events, receipt.rejects) == (1, len(poison))
    assert receipt.first_batch == receipt.last_batch == 10
    assert [pos for pos, _ in receipt.rejected] == list(range(len(poison)))
    reasons = [reason for _, reason in receipt.rejected]
    assert all(r.startswith("event time out of range") for r in reasons[:4]), reasons
    assert all(r.startswith("_ts must be integer microseconds") for r in reasons[4:]), reasons
    [chunk] = chunks
    assert chunk.events.column("_ts").to_pylist() == [NOW]
    for reject, event in zip(chunk.rejects, events, strict=False):
        assert reject.encoding == "json" and json.loads(reject.payload) == event
    assert receipt.warnings == []


def test_json_events_where_only_some_have_ts_get_a_warning() -> None:
    source = HttpPushSource("kv.puts", COLUMNS, heartbeat_s=0.01)
    reader, chunks, _ = _serve(source)
    before = time.time_ns() // 1000
    receipt = source.offer(
        [{"op": "put", "key": 1, "value": 1, "_ts": NOW - 10}, {"op": "put", "key": 2, "value": 2}],
        timeout_s=5,
    )
    source.close()
    reader.join(5)
    assert (receipt.events, receipt.rejects) == (2, 0)
    assert receipt.warnings == [
        "1 of 2 events have no _ts: their event time is the time they arrived"
    ]
    given, arrived = chunks[0].events.column("_ts").to_pylist()
    assert given == NOW - 10 and arrived >= before


def test_offers_refused_as_a_whole_take_nothing() -> None:
    source = HttpPushSource("kv.puts", COLUMNS)
    with pytest.raises(UnknownFields) as unknown:
        source.offer([{"op": "put", "key": 1, "value": 1, "colour": "red", "_pos": 3}], timeout_s=1)
    assert unknown.value.fields == ["_pos", "colour"]
    with pytest.raises(UnknownFields):
        source.offer(pa.table({"key": [1], "colour": ["red"]}), timeout_s=1)
    with pytest.raises(NoEvents):
        source.offer([], timeout_s=1)
    with pytest.raises(NoEvents):
        source.offer(pa.table({"key": pa.array([], pa.int64())}), timeout_s=1)
    huge = "x" * (source.max_event_bytes + 1)
    with pytest.raises(EventTooLarge) as too_large:
        source.offer([{"op": "put", "key": 1, "value": 1}, {"op": huge, "key": 2}], timeout_s=1)
    assert too_large.value.index == 1 and too_large.value.limit == source.max_event_bytes
    with pytest.raises(EventTooLarge) as too_large:
        source.offer(pa.table({"op": ["small", huge], "key": [1, 2]}), timeout_s=1)
    assert too_large.value.index == 1
    with pytest.raises(PushRefused, match="_ts"):
        source.offer(pa.table({"key": [1], "_ts": [1.5]}), timeout_s=1)
    with pytest.raises(PushRefused, match="_ts"):
        source.offer(pa.table({"key": [1], "_ts": ["2024-01-01"]}), timeout_s=1)
    assert source.max_event_bytes == event_limit(900_000)
    # nothing of the refused offers was queued: a reader sees only the next one
    reader, chunks, _ = _serve(source)
    receipt = source.offer([{"op": "put", "key": 5, "value": 5}], timeout_s=5)
    source.close()
    reader.join(5)
    assert (receipt.first_pos, receipt.events, len(chunks)) == (0, 1, 1)


def test_arrow_event_times_are_checked_row_by_row() -> None:
    source = HttpPushSource("kv.puts", COLUMNS, heartbeat_s=0.01)
    reader, chunks, _ = _serve(source)
    table = pa.table(
        {
            "op": ["put"] * 5,
            "key": [1, 2, 3, 4, 5],
            "value": [10, 20, 30, 40, 50],
            "_ts": pa.array([NOW, 2**62, None, -(2**62), NOW + 1], pa.int64()),
        }
    )
    receipt = source.offer(table, timeout_s=5)
    stamped = source.offer(
        pa.table({"key": [6], "_ts": pa.array([NOW], pa.timestamp("us"))}), timeout_s=5
    )
    source.close()
    reader.join(5)
    assert (receipt.events, receipt.rejects, receipt.first_pos, receipt.last_pos) == (2, 3, 0, 4)
    assert [pos for pos, _ in receipt.rejected] == [1, 2, 3]
    assert chunks[0].events.column("key").to_pylist() == [1, 5]
    assert chunks[0].events.column("_pos").to_pylist() == [0, 4]
    assert json.loads(chunks[0].rejects[0].payload) == {
        "op": "put",
        "key": 2,
        "value": 20,
        "_ts": 2**62,
    }
    assert chunks[0].rejects[1].reason.endswith("got None")
    assert stamped.events == 1 and chunks[1].events.column("_ts").to_pylist() == [NOW]


def test_an_offer_in_hand_when_the_collector_fails_is_told_it_was_not_produced() -> None:
    source = HttpPushSource("kv.puts", COLUMNS, heartbeat_s=0.01)
    taken = threading.Event()

    def failing_collector() -> None:
        chunks = source.read(0)
        try:
            for chunk in chunks:
                if chunk.events.num_rows:
                    taken.set()
                    raise RuntimeError("the broker went away")
        except RuntimeError:
            pass
        finally:
            chunks.close()  # as BatchCollector.run does

    reader = threading.Thread(target=failing_collector)
    reader.start()
    with pytest.raises(PushNotProduced, match="not acknowledged"):
        source.offer([{"op": "put", "key": 1, "value": 1}], timeout_s=5)
    assert taken.is_set()
    reader.join(5)
    # a collector run again takes the next offers from the position it is given
    chunks: list = []
    produced: list = []
    again = threading.Thread(target=_collect, args=(source, 7, chunks, produced))
    again.start()
    receipt = source.offer([{"op": "put", "key": 2, "value": 2}], timeout_s=5)
    assert (receipt.first_pos, receipt.first_batch) == (7, 10)
    source.close()
    again.join(5)
