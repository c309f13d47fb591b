"""The consumer's side of the door: records an outside producer wrote straight to the topic are
checked like pushed ones. A poison event time is a dead letter and never moves the stream's high
mark (so later events are not late); every dead letter keeps the record or event in full, in an
encoding that says how to read it back."""

from __future__ import annotations

import base64
import json
import time

import pyarrow as pa
import pytest

from etl_dataflows.batch import DEAD_LETTER_SCHEMA
from etl_dataflows.testing import ledger_dataflow
from ingest.assembler import BatchAssembler, RawRecord, engine_dead_letters
from ingest.records import encode_batch, to_ipc
from staging.batch_commit import StreamProgress

TOPIC = "ledger.txns"
NOW = time.time_ns() // 1000
POISON: list[object] = [2**62, -(2**62), -1, 2**70, NOW + 10**12, "soon", True, 1.5, None]


def _assembler(high: int | None = NOW) -> BatchAssembler:
    return BatchAssembler(
        ledger_dataflow().build(),
        {TOPIC: ["txns"]},
        progress={"txns": StreamProgress(0, high)},
        offsets={},
        max_record_bytes=100_000,
        allowed_lateness_ms=60_000,
    )


def _event(src: int, ts: object) -> dict[str, object]:
    return {"kind": "deposit", "src": src, "dst": None, "amount": 5, "amount2": None, "_ts": ts}


def _single(offset: int, event: object) -> RawRecord:
    return RawRecord(TOPIC, 0, offset, json.dumps(event).encode(), [])


@pytest.mark.parametrize("high", [NOW, None], ids=["now", "none"])
def test_poison_single_events_are_dead_letters_and_the_high_mark_stays(high: int | None) -> None:
    assembler = _assembler(high)
    records = [_single(i, _event(i, ts)) for i, ts in enumerate(POISON)]
    records.append(_single(len(POISON), _event(99, NOW + 1)))
    for record in records:
        assembler.add(record)
    taken = assembler.take(1, {(TOPIC, 0): len(POISON)})
    assert taken.batch.inputs["txns"].column("src").to_pylist() == [99]
    assert taken.streams["txns"].max_ts == NOW + 1
    dead = taken.dead_letters.to_pylist()
    assert [d["offset"] for d in dead] == list(range(len(POISON)))
    for d, record in zip(dead, records, strict=False):
        assert d["reason"].startswith(("event time out of range", "_ts must be integer"))
        assert (d["payload"], d["encoding"]) == (record.value.decode(), "json")
        assert d["payload_bytes"] == len(record.value or b"")
    assert dead[0]["ts"] == 2**62 and dead[3]["ts"] is None  # 2**70 does not fit int64
    # the next normal event, a little behind, is not late
    assembler.add(_single(100, _event(7, NOW - 1_000)))
    taken = assembler.take(2, {(TOPIC, 0): 100})
    assert taken.batch.inputs["txns"].column("src").to_pylist() == [7]
    assert taken.dead_letters.num_rows == 0


def test_poison_rows_of_an_outside_batch_record_are_dead_letters_with_their_row() -> None:
    assembler = _assembler()
    table = pa.table(
        {
            "kind": ["deposit"] * 4,
            "src": pa.array([1, 2, 3, 4], pa.int64()),
            "dst": pa.array([None] * 4, pa.int64()),
            "amount": pa.array([5] * 4, pa.int64()),
            "amount2": pa.array([None] * 4, pa.int64()),
            "_ts": pa.array([NOW, 2**62, None, -5], pa.int64()),
            "_pos": pa.array([0, 1, 2, 3], pa.int64()),
        }
    )
    [record] = encode_batch("txns", 1, table, [], cap=100_000, last_pos=3)
    assembler.add(RawRecord(TOPIC, 0, 0, record.value, record.headers))
    taken = assembler.take(1, {(TOPIC, 0): 0})
    assert taken.batch.inputs["txns"].column("src").to_pylist() == [1]
    assert taken.streams["txns"].max_ts == NOW
    dead = taken.dead_letters.to_pylist()
    assert [d["pos"] for d in dead] == [1, 2, 3]
    assert all(d["encoding"] == "json" for d in dead)
    first = json.loads(dead[0]["payload"])
    assert first == {
        "kind": "deposit",
        "src": 2,
        "dst": None,
        "amount": 5,
        "amount2": None,
        "_ts": 2**62,
    }
    assert dead[1]["reason"].endswith("got None") and dead[1]["ts"] is None
    assert "before the lower bound" in dead[2]["reason"]


def test_bad_records_are_kept_whole() -> None:
    corrupt = to_ipc(pa.table({"kind": ["deposit"]}))[:-7] + b"\x00garbage"
    sends = [
        (b'{"kind": "deposit", "src": ', [], "bad JSON", "utf8"),
        (b"\xff\xfe\xfd" * 1000, [], "bad encoding", "base64"),
        (b"[1, 2, 3]", [], "must be a JSON object", "json"),
        (b"x" * 100_010, [], "oversize payload", "utf8"),
        (b'{"kind": "deposit"}', [("sdi-stream", b"nope")], "unknown stream", "utf8"),
        (
            corrupt,
            [
                ("sdi-kind", b"batch"),
                ("sdi-stream", b"txns"),
                ("sdi-batch", b"7"),
                ("sdi-part", b"0/1"),
            ],
            "corrupt Arrow payload",
            "base64",
        ),
    ]
    assembler = _assembler()
    for offset, (value, headers, _, _) in enumerate(sends):
        assembler.add(RawRecord(TOPIC, 0, offset, value, headers))
    dead = assembler.take(1, {(TOPIC, 0): len(sends) - 1}).dead_letters.to_pylist()
    assert len(dead) == len(sends)
    for d, (value, _, fragment, encoding) in zip(dead, sends, strict=True):
        assert fragment in d["reason"] and d["encoding"] == encoding, d["reason"]
        kept = base64.b64decode(d["payload"]) if encoding == "base64" else d["payload"].encode()
        assert kept == value and d["payload_bytes"] == len(value)


def test_collector_rejects_keep_their_encoding_and_older_rejects_still_read() -> None:
    empty = pa.table(
        {
            "kind": pa.array([], pa.string()),
            "src": pa.array([], pa.int64()),
            "dst": pa.array([], pa.int64()),
            "amount": pa.array([], pa.int64()),
            "amount2": pa.array([], pa.int64()),
            "_ts": pa.array([], pa.int64()),
            "_pos": pa.array([], pa.int64()),
        }
    )
    rejects = [(0, "bad encoding", base64.b64encode(b"\xff\x00").decode(), "base64")]
    records = encode_batch("txns", 1, empty, rejects, cap=100_000, last_pos=0)
    legacy = pa.table({"pos": [1], "reason": ["bad"], "payload": ["b'\\xff'"]})
    headers = [
        ("sdi-kind", b"rejects"),
        ("sdi-stream", b"txns"),
        ("sdi-batch", b"2"),
        ("sdi-part", b"0/1"),
        ("sdi-last-pos", b"1"),
    ]
    assembler = _assembler()
    for offset, record in enumerate(records):
        assembler.add(RawRecord(TOPIC, 0, offset, record.value, record.headers))
    assembler.add(RawRecord(TOPIC, 0, len(records), to_ipc(legacy), headers))
    dead = assembler.take(1, {(TOPIC, 0): len(records)}).dead_letters.to_pylist()
    assert [(d["pos"], d["encoding"], d["payload_bytes"]) for d in dead] == [
        (0, "base64", 2),
        (1, None, None),
    ]
    assert base64.b64decode(dead[0]["payload"]) == b"\xff\x00"


def test_engine_dead_letters_keep_the_event_as_it_entered_the_batch() -> None:
    assembler = _assembler()
    assembler.add(_single(0, {**_event(3, NOW), "_pos": 40}))
    assembled = assembler.take(1, {(TOPIC, 0): 0})
    engine_dead = pa.Table.from_pylist(
        [
            {
                "step": "check",
                "source": "txns",
                "pos": 40,
                "ts": NOW,
                "reason": "amount too small",
                "payload": json.dumps({"derived": 1}),
            },
            {
                "step": "check",
                "source": "txns",
                "pos": None,
                "ts": None,
                "reason": "no position",
                "payload": json.dumps({"derived": 2}),
            },
        ],
        schema=DEAD_LETTER_SCHEMA,
    )
    rows = engine_dead_letters(assembled, engine_dead).to_pylist()
    assert json.loads(rows[0]["payload"]) == _event(3, NOW)
    assert rows[0]["encoding"] == "json" and rows[0]["offset"] == 0
    assert json.loads(rows[1]["payload"]) == {"derived": 2}  # not found: the step's row


def test_nested_values_in_single_events_are_dead_letters_beside_good_ones() -> None:
    assembler = _assembler()
    nested = {**_event(1, NOW), "kind": ["deposit"]}
    records = [_single(0, nested), _single(1, _event(2, NOW + 1))]
    for record in records:
        assembler.add(record)
    taken = assembler.take(1, {(TOPIC, 0): 1})
    assert taken.batch.inputs["txns"].column("src").to_pylist() == [2]
    dead = taken.dead_letters.to_pylist()
    assert [(d["offset"], d["reason"]) for d in dead] == [
        (0, "column 'kind': a list is not a single value")
    ]
    assert json.loads(dead[0]["payload"]) == nested
