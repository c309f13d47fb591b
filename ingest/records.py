"""The wire form of events in Kafka.

A **batch record** carries a logical batch (or a part of one) as an Arrow IPC stream: the stream's
columns plus ``_ts`` and ``_pos``. Headers say what it is:

==================  ============================================================================
``sdi-kind``        ``batch`` (events) or ``rejects`` (rows the collector could not parse:
                    ``pos``, ``reason``, ``payload``, ``encoding``, ``payload_bytes``; a
                    record of an older collector has only the first three)
``sdi-stream``      the source id of the dataflow the events are for
``sdi-batch``       the logical batch id (monotonically increasing per stream, from 1)
``sdi-part``        ``i/n``: the record's place among the ``n`` records of its logical batch
``sdi-last-pos``    on the last part: the last source position the batch covers
``sdi-punct``       ``1`` on the last part of a batch closed by a punctuation
``sdi-watermark``   on a ``watermark`` record (no value): the producer writes nothing older than
                    this event time (µs) to this partition from now on (:mod:`ingest.merging`)
==================  ============================================================================

A batch larger than the byte cap is split by rows into several parts, none over the cap. A reject
keeps its row in full (the line's text, undecodable bytes in base64, an event as JSON) when that
fits one record (:func:`event_limit`); a longer one is cut to fit, and says so in its reason
(``payload_bytes`` keeps the original size).

A **single-event record** has no ``sdi-kind`` header: its value is one JSON object with the stream's
fields and optionally ``_ts`` (µs) and ``_pos``; ``sdi-stream`` is needed only when a topic carries
several streams, and ``sdi-replay-of`` marks a re-offered dead letter.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

KIND, STREAM, BATCH, PART, LAST_POS, PUNCT, REPLAY_OF, WATERMARK = (
    "sdi-kind",
    "sdi-stream",
    "sdi-batch",
    "sdi-part",
    "sdi-last-pos",
    "sdi-punct",
    "sdi-replay-of",
    "sdi-watermark",
)

REJECTS_SCHEMA = pa.schema(
    [
        ("pos", pa.int64()),
        ("reason", pa.string()),
        ("payload", pa.string()),
        ("encoding", pa.string()),
        ("payload_bytes", pa.int64()),
    ]
)
"""Rows a collector could not turn into events: source position, reason, the row as it came
(``payload`` in ``encoding``: ``json``, ``utf8`` or ``base64``) and its size in bytes."""

LEGACY_REJECTS_NAMES = ["pos", "reason", "payload"]
"""The rejects columns of collectors before the encoding was kept (payload: text, maybe cut)."""

#: Room a record needs besides one event's values (the Arrow schema and buffer framing, a
#: reject's reason, the headers): 64 KiB, or a quarter of a smaller cap.
RECORD_OVERHEAD = 64 * 1024


def event_limit(cap: int) -> int:
    """The largest event, or reject payload, one record of ``cap`` bytes carries whole:
    ``cap`` less :data:`RECORD_OVERHEAD` (less a quarter of a cap under 256 KiB)."""
    return cap - min(RECORD_OVERHEAD, cap // 4)


Headers = list[tuple[str, bytes]]


@dataclass(frozen=True)
class OutgoingRecord:
    """One Kafka record to produce."""

    value: bytes
    headers: Headers


#: Record payloads are Arrow IPC with LZ4-compressed buffers: wide event tables are mostly null
#: columns whose zero-filled buffers compress ~5x for ~0.4 us per event (the TPC-DI change stream
#: went from ~600 to ~110 bytes per event and from ~80 k to ~136 k events/s end to end). Readers
#: decode compressed and plain payloads alike.
_IPC_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")


def to_ipc(table: pa.Table) -> bytes:
    """``table`` as one Arrow IPC stream (LZ4-compressed buffers)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=_IPC_OPTIONS) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def from_ipc(value: bytes) -> pa.Table:
    """The table in an Arrow IPC stream; raises ``pyarrow.ArrowInvalid`` when it is corrupt."""
    with pa.ipc.open_stream(pa.py_buffer(value)) as reader:
        return reader.read_all()


#: A record is filled to this share of the cap when its rows are sized from the last record's.
_FILL = 0.9
#: A record has at most this many times the rows of the record before it.
_GROWTH = 4


def _split(table: pa.Table, cap: int) -> tuple[list[bytes], list[int]]:
    """IPC payloads of consecutive row slices of ``table``, each at most ``cap`` bytes; and the
    indices of single rows that do not fit under the cap on their own.

    Each slice is encoded once when it fits: a table whose buffers fit under the cap is one
    slice; else the first slice is sized by the uncompressed bytes per row (compressed, it is
    smaller) and each next one by the bytes per row of the slice before it (at most
    :data:`_GROWTH` times its rows), filled to :data:`_FILL` of the cap. A slice over the cap is
    cut to the share that fits and encoded again; a single row over the cap is oversize."""
    n = table.num_rows
    if n == 0 or table.nbytes <= cap:
        payload = to_ipc(table)
        if len(payload) <= cap or n == 0:
            return [payload], []
    payloads: list[bytes] = []
    oversize: list[int] = []
    rows = max(1, int(n * cap * _FILL / max(table.nbytes, 1)))
    start = 0
    while start < n:
        rows = min(rows, n - start)
        payload = to_ipc(table.slice(start, rows))
        if len(payload) <= cap:
            payloads.append(payload)
            start += rows
            fitting = int(rows * cap * _FILL / max(len(payload), 1))
            rows = max(1, min(fitting, rows * _GROWTH))
        elif rows == 1:
            oversize.append(start)
            start += 1
        else:
            rows = max(1, min(rows // 2, int(rows * cap * _FILL / len(payload))))
    return payloads, oversize


def payload_size(payload: str, encoding: str | None) -> int:
    """The size in bytes of the original a payload text holds."""
    if encoding == "base64":
        return len(payload) * 3 // 4 - payload[-2:].count("=")
    return len(payload.encode("utf-8"))


def fit_payload(reason: str, payload: str, encoding: str, limit: int) -> tuple[str, str, str, int]:
    """``(reason, payload, encoding, payload_bytes)`` of a reject whose payload is at most
    ``limit`` bytes: unchanged when it fits; else cut to the first ``limit`` bytes (text stays
    text, base64 stays base64 of a prefix; a cut JSON text is ``utf8``), the reason saying so."""
    size = payload_size(payload, encoding)
    if len(payload.encode("utf-8")) <= limit:
        return reason, payload, encoding, size
    if encoding == "base64":
        raw = base64.b64decode(payload)[: limit * 3 // 4]
        cut, kept = base64.b64encode(raw).decode("ascii"), len(raw)
    else:
        cut = payload.encode("utf-8")[:limit].decode("utf-8", errors="ignore")
        kept = len(cut.encode("utf-8"))
        encoding = "utf8"
    note = (
        f" (payload cut to its first {kept:,} of {size:,} bytes: a dead letter carried by a "
        "Kafka record keeps at most KAFKA__MAX_RECORD_BYTES less framing)"
    )
    return reason + note, cut, encoding, size


#: Longest reason kept (reasons quote values; the value itself is in the payload).
MAX_REASON = 2_000


def _bounded(reason: str) -> str:
    return reason if len(reason) <= MAX_REASON else reason[: MAX_REASON - 3] + "..."


def rejects_table(rejects: Sequence[tuple[Any, ...]], cap: int) -> pa.Table:
    """Rejects ``(pos, reason, payload[, encoding])`` as a :data:`REJECTS_SCHEMA` table, every
    payload fitted to one record of ``cap`` bytes (:func:`fit_payload`)."""
    limit = event_limit(cap)
    rows = [
        (
            int(r[0]),
            *fit_payload(_bounded(r[1]), r[2] or "", r[3] if len(r) > 3 else "utf8", limit),
        )
        for r in sorted(rejects, key=lambda r: r[0])
    ]
    return pa.Table.from_arrays(
        [pa.array([r[i] for r in rows], f.type) for i, f in enumerate(REJECTS_SCHEMA)],
        schema=REJECTS_SCHEMA,
    )


def encode_batch(
    stream: str,
    batch_id: int,
    events: pa.Table,
    rejects: Sequence[tuple[Any, ...]],
    *,
    cap: int,
    last_pos: int,
    punctuation: bool = False,
) -> list[OutgoingRecord]:
    """The records of one logical batch: event parts (each at most ``cap`` bytes) and, when some
    rows were rejected, one or more rejects records (``(pos, reason, payload[, encoding])``, see
    :func:`rejects_table`). An event too large for a record on its own becomes a reject with the
    reason ``oversize event``, its row as JSON (cut to fit)."""
    payloads, oversize = _split(events, cap)
    all_rejects = list(rejects)
    if oversize:
        keep = sorted(set(range(events.num_rows)) - set(oversize))
        big = events.take(pa.array(oversize, pa.int64()))
        for row in big.to_pylist():
            pos = int(row.pop("_pos"))
            all_rejects.append(
                (
                    pos,
                    f"oversize event: larger than the {cap}-byte record cap",
                    json.dumps(row, default=str, ensure_ascii=False),
                    "json",
                )
            )
        payloads, _ = _split(events.take(pa.array(keep, pa.int64())), cap)
    kinds = ["batch"] * len(payloads)
    if all_rejects:
        table = rejects_table(all_rejects, cap)
        reject_payloads, _ = _split(table, cap)
        payloads.extend(reject_payloads)
        kinds.extend(["rejects"] * len(reject_payloads))
    records = []
    n = len(payloads)
    for i, (payload, kind) in enumerate(zip(payloads, kinds, strict=True)):
        headers: Headers = [
            (KIND, kind.encode()),
            (STREAM, stream.encode()),
            (BATCH, str(batch_id).encode()),
            (PART, f"{i}/{n}".encode()),
        ]
        if i == n - 1:
            headers.append((LAST_POS, str(last_pos).encode()))
            if punctuation:
                headers.append((PUNCT, b"1"))
        records.append(OutgoingRecord(payload, headers))
    return records


def watermark_record(stream: str, micros: int) -> OutgoingRecord:
    """A ``watermark`` record: nothing older than ``micros`` follows it in its partition."""
    return OutgoingRecord(
        b"",
        [(KIND, b"watermark"), (STREAM, stream.encode()), (WATERMARK, str(micros).encode())],
    )


def header_map(headers: Sequence[tuple[str, bytes]] | None) -> dict[str, str]:
    """Record headers as text (undecodable values become empty strings)."""
    out: dict[str, str] = {}
    for key, value in headers or ():
        try:
            out[key] = value.decode() if value is not None else ""
        except UnicodeDecodeError:
            out[key] = ""
    return out
