"""Records stay under the byte cap; the assembler rebuilds logical batches, skips duplicates, drops a
torn copy of a batch produced again, and never hands out an offset past a batch missing parts."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from etl_dataflows.testing import ledger_dataflow
from ingest import records as records_module
from ingest.assembler import BatchAssembler, RawRecord
from ingest.records import encode_batch, event_limit, from_ipc, to_ipc
from staging.batch_commit import StreamProgress

TOPIC = "ledger.txns"


def _events(n: int, first: int = 0) -> pa.Table:
    pos = np.arange(first, first + n, dtype=np.int64)
    return pa.table(
        {
            "kind": pa.array(["deposit"] * n),
            "src": pa.array(pos % 7),
            "dst": pa.array([None] * n, pa.int64()),
            "amount": pa.array(np.full(n, 5, dtype=np.int64)),
            "amount2": pa.array([None] * n, pa.int64()),
            "_ts": pa.array(pos * 10),
            "_pos": pa.array(pos),
        }
    )


def _records(batch_id: int, table: pa.Table, cap: int, first_offset: int) -> list[RawRecord]:
    last = int(table.column("_pos")[-1].as_py())
    out = encode_batch("txns", batch_id, table, [], cap=cap, last_pos=last)
    return [RawRecord(TOPIC, 0, first_offset + i, r.value, r.headers) for i, r in enumerate(out)]


def _assembler(last_batch: int = 0) -> BatchAssembler:
    return BatchAssembler(
        ledger_dataflow().build(),
        {TOPIC: ["txns"]},
        progress={"txns": StreamProgress(last_batch)} if last_batch else {},
        offsets={},
        max_record_bytes=100_000,
        allowed_lateness_ms=None,
    )


def test_payloads_are_compressed_and_plain_payloads_still_read() -> None:
    """A producer of ours compresses (mostly-null columns shrink); one that writes plain Arrow IPC,
    as an outside producer may, is read all the same."""
    table = _events(1_000)
    plain = pa.BufferOutputStream()
    with pa.ipc.new_stream(plain, table.schema) as writer:
        writer.write_table(table)
    plain_bytes = plain.getvalue().to_pybytes()
    ours = to_ipc(table)
    assert len(ours) < len(plain_bytes) / 2
    assert from_ipc(ours).equals(table)
    assert from_ipc(plain_bytes).equals(table)
    assembler = _assembler()
    [record] = _records(1, table, 10**6, 0)
    assembler.add(RawRecord(TOPIC, 0, 0, plain_bytes, record.headers))
    taken = assembler.take(1, {(TOPIC, 0): 0})
    assert taken.batch.inputs["txns"].column("_pos").to_pylist() == list(range(1_000))
    assert taken.dead_letters.num_rows == 0


def test_a_large_batch_is_split_under_the_cap_and_loses_nothing() -> None:
    table = _events(20_000)
    records = encode_batch(
        "txns", 1, table, [(5, "bad", "x" * 50_000)], cap=60_000, last_pos=19_999
    )
    assert len(records) > 5
    assert all(len(r.value) <= 60_000 for r in records)
    parts = [from_ipc(r.value) for r in records]
    events = pa.concat_tables([p for p in parts if "kind" in p.column_names])
    assert events.column("_pos").to_pylist() == list(range(20_000))
    rejects = [p for p in parts if "reason" in p.column_names]
    assert len(rejects) == 1
    [reject] = rejects[0].to_pylist()
    # a payload longer than a record can carry is cut to fit, and the reason says so
    assert reject["payload"] == "x" * event_limit(60_000) and reject["payload_bytes"] == 50_000
    assert "payload cut to its first 45,000 of 50,000 bytes" in reject["reason"]


def test_a_batch_of_wide_then_narrow_rows_is_encoded_about_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Slices are sized from the bytes per row of the slice before (TPC-DI's change stream: wide
    prospects, then narrow trades), so the rows go through the encoder little more than once;
    sizing every slice from the whole batch's average encoded the batch ~3 times."""
    wide = _events(30_000).append_column("text", pa.array([f"{i:08d}" * 40 for i in range(30_000)]))
    narrow = _events(60_000, 30_000).append_column("text", pa.nulls(60_000, pa.string()))
    table = pa.concat_tables([wide, narrow])
    encoded: list[int] = []

    def counting(part: pa.Table) -> bytes:
        encoded.append(part.num_rows)
        return to_ipc(part)

    monkeypatch.setattr(records_module, "to_ipc", counting)
    records = encode_batch("txns", 1, table, [], cap=200_000, last_pos=89_999)
    assert all(len(r.value) <= 200_000 for r in records)
    events = pa.concat_tables([from_ipc(r.value) for r in records])
    assert events.equals(table)
    assert sum(encoded) < 1.5 * table.num_rows, (sum(encoded), len(encoded), len(records))


def test_parts_assemble_and_duplicates_are_skipped() -> None:
    assembler = _assembler(last_batch=1)
    old = _records(1, _events(100), 100_000, 0)  # already applied before a restart
    new = _records(2, _events(3_000, 100), 20_000, len(old))
    assert len(new) > 1
    for record in old + new[:-1]:
        assembler.add(record)
    assert assembler.pending_events == 0  # nothing until the last part arrives
    taken = assembler.take(1, {(TOPIC, 0): new[-2].offset})
    assert taken.offsets == {(TOPIC, 0): new[0].offset}  # never past a batch missing parts
    assembler.add(new[-1])
    taken = assembler.take(2, {(TOPIC, 0): new[-1].offset})
    assert taken.batch.inputs["txns"].column("_pos").to_pylist() == list(range(100, 3_100))
    assert taken.offsets == {(TOPIC, 0): new[-1].offset + 1}
    assert taken.streams["txns"].last_batch == 2
    assert taken.dead_letters.num_rows == 0


def test_a_torn_batch_produced_again_is_taken_once() -> None:
    assembler = _assembler()
    first = _records(1, _events(3_000), 20_000, 0)
    again = _records(1, _events(3_000), 20_000, 2)
    for record in first[:2] + again:  # the collector died after two parts and started over
        assembler.add(record)
    taken = assembler.take(1, {(TOPIC, 0): again[-1].offset})
    assert taken.batch.inputs["txns"].num_rows == 3_000
    assert taken.dead_letters.num_rows == 0


def test_late_events_are_dead_letters_with_their_record() -> None:
    assembler = BatchAssembler(
        ledger_dataflow().build(),
        {TOPIC: ["txns"]},
        progress={},
        offsets={},
        max_record_bytes=100_000,
        allowed_lateness_ms=1,
    )
    table = _events(10)
    base = 1_700_000_000_000_000  # 2023-11-14
    ts = [base + t for t in table.column("_ts").to_pylist()]
    ts[5] = base  # 50 µs ... behind by 50 µs: allowed
    ts[7] = base - 5_000  # 5 ms behind: late
    table = table.set_column(5, "_ts", pa.array(ts, pa.int64()))
    for record in _records(1, table, 100_000, 40):
        assembler.add(record)
    taken = assembler.take(1, {(TOPIC, 0): 40})
    assert taken.batch.inputs["txns"].num_rows == 9
    dead = taken.dead_letters.to_pylist()
    assert [(d["pos"], d["offset"], d["topic"]) for d in dead] == [(7, 40, TOPIC)]
    assert dead[0]["reason"].startswith("late")
