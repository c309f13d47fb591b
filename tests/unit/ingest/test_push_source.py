"""The HTTP push source without a broker: offers become punctuated chunks with consecutive
positions, typed events and rejects; the offer returns when the collector reports the batches."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

from ingest.exceptions import PushRefused, PushTimedOut
from ingest.push import HttpPushSource

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


def test_bad_tables_are_refused_and_a_stalled_collector_times_out() -> None:
    source = HttpPushSource("kv.puts", COLUMNS)
    with pytest.raises(PushRefused):
        source.offer(pa.table({"nope": [1]}), timeout_s=1)
    with pytest.raises(PushRefused):
        source.offer(pa.table({"key": ["x"]}), timeout_s=1)
    with pytest.raises(PushTimedOut):
        source.offer([{"op": "put", "key": 1, "value": 1}], timeout_s=0.2)  # nobody reads
