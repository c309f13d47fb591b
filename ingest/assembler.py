"""Turning consumed Kafka records into engine batches, with every bad record as a dead letter.

The :class:`BatchAssembler` receives records in offset order per partition (:meth:`add`) and hands
out engine batches (:meth:`take`). It keeps no Kafka client: it is the consumer's logic, testable on
its own.

* Batch records are gathered part by part; a logical batch joins the engine batch only when its
  last part arrived. A batch id at or below the stream's last applied batch is a duplicate and is
  skipped; a batch restarting at part 0 replaces a torn copy.
* Single-event records (JSON) are buffered per stream and typed when the engine batch is taken.
* Dead letters (step ``ingest``): oversize payloads, unknown streams, corrupt Arrow payloads,
  payloads that do not fit the stream's schema, bad JSON or encoding, values that do not convert,
  rows the collector rejected, events whose event time is not integer µs or out of range
  (:mod:`ingest.eventtime`: an outside producer may write to a topic directly, so the consumer
  checks again), and events later than the allowed lateness. Each names its topic, partition and
  offset; the pipeline goes on, so a poison record never blocks its partition.
* Every dead letter keeps what came, in full: a single-event record's JSON text as it was
  (encoding ``json``), other record bytes as text (``utf8``) or base64, an event of a batch
  record as JSON with its ``_ts``, a collector's reject as the collector kept it. The bound is
  the record: what the broker accepted (``KAFKA__MAX_RECORD_BYTES`` for streamdi's producers).
* A stream's event-time high mark moves only with events that passed the range check and were
  not late.
* The offsets handed out with a batch point after the last record the batch accounts for, never
  past a logical batch still missing parts.
* A stream whose topic has several partitions goes through a :class:`~ingest.merging.
  PartitionMerge`: its events are held until the minimum watermark across the partitions passes
  them (see :mod:`ingest.merging`), a batch id is a duplicate when at or below the last one
  completed *in its partition*, lateness is measured against the newest event time released,
  and every batch hands out the merge state (held events included) for staging to commit with
  the offsets.
"""

from __future__ import annotations

import base64
import json
import logging
import time
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from etl_dataflows.batch import EngineBatch
from etl_dataflows.dataflow import CompiledDataflow
from etl_dataflows.raw_values import convert_columns, python_columns
from etl_dataflows.types import POS, TS, ColumnType, arrow_type
from ingest.eventtime import EventTimeBounds, describe_us, now_us
from ingest.merging import PartitionMerge, sort_released
from ingest.records import (
    BATCH,
    KIND,
    LEGACY_REJECTS_NAMES,
    PART,
    PUNCT,
    REJECTS_SCHEMA,
    REPLAY_OF,
    STREAM,
    WATERMARK,
    from_ipc,
    header_map,
)
from ingest.sources import bytes_payload, json_payload
from staging.batch_commit import PartitionProgress, StreamPartition, StreamProgress
from staging.layout import DEAD_LETTER_INPUT_SCHEMA

logger = logging.getLogger(__name__)

INGEST_STEP = "ingest"
TopicPartition = tuple[str, int]
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True)
class RawRecord:
    """What the assembler needs of a Kafka record."""

    topic: str
    partition: int
    offset: int
    value: bytes | None
    headers: list[tuple[str, bytes]]
    timestamp_ms: int = 0


@dataclass
class _Dead:
    stream: str | None
    topic: str
    partition: int
    offset: int
    pos: int | None
    ts: int | None
    reason: str
    payload: str
    encoding: str | None
    payload_bytes: int | None


def _raw(value: bytes) -> tuple[str, str, int]:
    """Record bytes as a dead letter keeps them: ``(payload, encoding, payload_bytes)``."""
    text, encoding = bytes_payload(value)
    return text, encoding, len(value)


def _binary(value: bytes) -> tuple[str, str, int]:
    """Binary record bytes (an Arrow payload) in base64, whatever they happen to decode as."""
    return base64.b64encode(value).decode("ascii"), "base64", len(value)


def _event_json(row: dict[str, Any]) -> tuple[str, str, int]:
    """A typed event (a row of a batch) as JSON with its ``_ts``; its position is the dead
    letter's ``pos``."""
    text = json_payload({k: v for k, v in row.items() if k != POS})
    return text, "json", len(text.encode("utf-8"))


@dataclass
class _Part:
    record: RawRecord
    kind: str
    table: pa.Table


@dataclass
class _Partial:
    stream: str
    batch_id: int
    parts: list[_Part] = field(default_factory=list)
    expected: int = 0
    dead: list[_Dead] = field(default_factory=list)


@dataclass
class AssembledBatch:
    """An engine batch and everything staging commits with it."""

    batch: EngineBatch
    dead_letters: pa.Table
    offsets: dict[TopicPartition, int]
    streams: dict[str, StreamProgress]
    records: int
    replayed: list[int]
    arrived_at: float
    record_index: dict[str, list[tuple[int, int, str, int, int]]]
    #: The merge state of every partition of the streams read from several partitions.
    partitions: dict[StreamPartition, PartitionProgress] = field(default_factory=dict)

    @property
    def events(self) -> int:
        return self.batch.num_events

    def locate(self, stream: str, pos: int) -> tuple[str, int, int] | None:
        """The (topic, partition, offset) of the record that carried event ``pos`` of
        ``stream``."""
        index = self.record_index.get(stream)
        if not index:
            return None
        i = bisect_right([e[0] for e in index], pos) - 1
        if i >= 0 and index[i][0] <= pos <= index[i][1]:
            _, _, topic, partition, offset = index[i]
            return topic, partition, offset
        return None


class BatchAssembler:
    """See the module docstring. ``topics`` maps each topic to the streams it carries;
    ``partitions`` are the partitions the consumer reads (a stream whose topic has several is
    merged by event time), ``merge_state`` their staged merge state, and ``partition_idle_ms``
    how long a caught-up partition may stay silent before it stops holding the others back."""

    def __init__(
        self,
        flow: CompiledDataflow,
        topics: Mapping[str, list[str]],
        *,
        progress: Mapping[str, StreamProgress],
        offsets: Mapping[TopicPartition, int],
        max_record_bytes: int,
        allowed_lateness_ms: int | None,
        lateness: Mapping[str, int | None] | None = None,
        event_times: EventTimeBounds | None = None,
        partitions: Sequence[TopicPartition] = (),
        merge_state: Mapping[StreamPartition, PartitionProgress] | None = None,
        partition_idle_ms: int = 2_000,
    ) -> None:
        self.flow = flow
        self.event_times = event_times or EventTimeBounds()
        self._schemas: dict[str, pa.Schema] = {}
        self.topics = {t: list(s) for t, s in topics.items()}
        self.progress = dict(progress)
        self.next_offsets = dict(offsets)
        self.max_record_bytes = max_record_bytes
        default = None if allowed_lateness_ms is None else allowed_lateness_ms * 1000
        self.lateness_us: dict[str, int | None] = {
            s: default for streams in self.topics.values() for s in streams
        }
        for stream, ms in (lateness or {}).items():
            self.lateness_us[stream] = None if ms is None else ms * 1000
        self._partials: dict[TopicPartition, _Partial] = {}
        self.merges = self._merges(partitions, merge_state or {}, partition_idle_ms / 1000)
        self._warn_poisoned()
        self._reset()

    def _merges(
        self,
        partitions: Sequence[TopicPartition],
        state: Mapping[StreamPartition, PartitionProgress],
        idle_s: float,
    ) -> dict[str, PartitionMerge]:
        """A :class:`PartitionMerge` per stream whose topic has several partitions."""
        by_topic: dict[str, list[TopicPartition]] = {}
        for tp in partitions:
            by_topic.setdefault(tp[0], []).append(tp)
        merges: dict[str, PartitionMerge] = {}
        for topic, streams in self.topics.items():
            tps = sorted(by_topic.get(topic, []))
            if len(tps) < 2:
                continue
            for stream in streams:
                merges[stream] = PartitionMerge(
                    stream,
                    tps,
                    schema=self._schema(stream),
                    idle_s=idle_s,
                    restored={(t, p): m for (s, t, p), m in state.items() if s == stream},
                    high=self.progress.get(stream, StreamProgress()).max_ts,
                )
        return merges

    def _warn_poisoned(self) -> None:
        """Say loudly when a stream's stored high mark is out of range (written by a version
        that did not check event times): every event would be late until it is repaired."""
        upper = self.event_times.upper_us()
        for stream, progress in self.progress.items():
            if progress.max_ts is not None and progress.max_ts > upper:
                logger.error(
                    "stream=%s high mark %s is out of range: its events will be dead-lettered "
                    "as late; stop the service and run `streamdi streams repair <spec> "
                    "--stream %s`",
                    stream,
                    describe_us(progress.max_ts),
                    stream,
                )

    def _reset(self) -> None:
        self._tables: dict[str, list[pa.Table]] = {}
        self._singles: dict[str, list[tuple[RawRecord, dict[str, Any]]]] = {}
        self._dead: list[_Dead] = []
        self._accounted: dict[TopicPartition, int] = {}
        self._records = 0
        self._events = 0
        self._replayed: list[int] = []
        self._arrived: float | None = None
        self._index: dict[str, list[tuple[int, int, str, int, int]]] = {}
        self._punctuated = False

    # -- state of the pending engine batch ---------------------------------------------------------

    @property
    def pending_events(self) -> int:
        """Events the next batch takes: those added since the last batch, and the held events
        of merged streams that the release point has passed."""
        return self._events + sum(m.releasable() for m in self.merges.values())

    @property
    def pending(self) -> bool:
        """Whether anything (events, dead letters, skipped records, held events now released)
        waits to be committed."""
        return bool(self._records) or any(m.releasable() for m in self.merges.values())

    @property
    def holding(self) -> bool:
        """Whether a merged stream holds events back (they wait for its partitions)."""
        return any(m.holding for m in self.merges.values())

    def mark_idle(self, caught_up: set[TopicPartition]) -> bool:
        """Tell the merges which partitions the consumer has read to their end; True if one
        became idle (see :mod:`ingest.merging`)."""
        changed = False
        for merge in self.merges.values():
            changed = merge.mark_idle(caught_up) or changed
        return changed

    def throttle(self, paused: set[TopicPartition], limit: int) -> set[TopicPartition]:
        """The partitions to stop reading for now (:meth:`ingest.merging.PartitionMerge.throttle`
        of every merged stream), given those stopped now."""
        out: set[TopicPartition] = set()
        for merge in self.merges.values():
            out |= merge.throttle(paused, limit)
        return out

    @property
    def punctuated(self) -> bool:
        """Whether a punctuation closed the pending engine batch."""
        return self._punctuated

    @property
    def arrived_at(self) -> float | None:
        return self._arrived

    # -- adding records ----------------------------------------------------------------------------

    def add(self, record: RawRecord) -> None:
        """Account for one record (records of a partition must come in offset order)."""
        tp = (record.topic, record.partition)
        if record.offset < self.next_offsets.get(tp, 0):
            return  # already committed (a re-delivery after a seek)
        self._records += 1
        if self._arrived is None:
            self._arrived = time.time()
        headers = header_map(record.headers)
        value = record.value or b""
        streams = self.topics.get(record.topic, [])
        stream = headers.get(STREAM) or (streams[0] if len(streams) == 1 else None)
        kinded = headers.get(KIND) in ("batch", "rejects")
        merge = self.merges.get(stream) if stream is not None else None
        if merge is not None:
            merge.seen(tp)
        if len(value) > self.max_record_bytes:
            self._dead_record(
                record,
                stream,
                f"oversize payload: {len(value)} bytes > the {self.max_record_bytes}-byte cap",
                value,
                binary=kinded,
            )
        elif stream is None or stream not in streams:
            self._dead_record(
                record,
                stream,
                f"unknown stream {stream!r} on topic {record.topic!r}",
                value,
                binary=kinded,
            )
        elif kinded:
            self._add_part(record, headers, stream, value)
        elif headers.get(KIND) == "watermark":
            self._add_watermark(record, headers, stream, merge)
        elif headers.get(KIND):
            self._dead_record(record, stream, f"unknown record kind {headers[KIND]!r}", value)
        else:
            self._add_single(record, headers, stream, value)
        self._account(tp)

    def _add_watermark(
        self,
        record: RawRecord,
        headers: dict[str, str],
        stream: str,
        merge: PartitionMerge | None,
    ) -> None:
        """A producer's watermark moves its partition's watermark (a stream of one partition
        needs none: the record is only accounted for)."""
        try:
            micros = int(headers.get(WATERMARK, ""))
        except ValueError:
            self._dead_record(record, stream, "bad watermark header", record.value or b"")
            return
        if merge is not None:
            merge.advance((record.topic, record.partition), micros)

    def _account(self, tp: TopicPartition) -> None:
        partial = self._partials.get(tp)
        if partial is not None and partial.parts:
            self._accounted[tp] = partial.parts[0].record.offset
        else:
            self._accounted.pop(tp, None)
            self._accounted[tp] = -1  # "up to the last record added"; resolved in take()

    def _dead_record(
        self,
        record: RawRecord,
        stream: str | None,
        reason: str,
        value: bytes,
        *,
        binary: bool = False,
    ) -> None:
        """A whole record as a dead letter, its bytes kept in full (``binary``: base64 even
        when they decode as text)."""
        payload, encoding, size = _binary(value) if binary else _raw(value)
        self._dead.append(
            _Dead(
                stream,
                record.topic,
                record.partition,
                record.offset,
                None,
                None,
                reason,
                payload,
                encoding,
                size,
            )
        )

    def _add_part(
        self, record: RawRecord, headers: dict[str, str], stream: str, value: bytes
    ) -> None:
        tp = (record.topic, record.partition)
        try:
            batch_id = int(headers.get(BATCH, ""))
            part_text, _, parts_text = headers.get(PART, "0/1").partition("/")
            part, parts = int(part_text), int(parts_text)
        except ValueError:
            self._dead_record(record, stream, "bad batch headers", value, binary=True)
            return
        merge = self.merges.get(stream)
        applied = (
            merge.last_batch(tp)
            if merge is not None
            else self.progress.get(stream, StreamProgress()).last_batch
        )
        if batch_id <= applied:
            return  # a duplicate of a batch already applied
        partial = self._partials.get(tp)
        if partial is not None and (partial.stream, partial.batch_id) != (stream, batch_id):
            # A different batch starts before this one ended: its parts will never come.
            for p in partial.parts:
                self._dead_record(
                    p.record,
                    stream,
                    f"incomplete batch {partial.batch_id}: part {partial.expected} never came",
                    p.record.value or b"",
                    binary=True,
                )
            self._partials.pop(tp)
            partial = None
        if partial is not None and part == 0 and partial.expected > 0:
            partial = (
                None  # the collector produced the batch again from its start: drop the torn copy
            )
            self._partials.pop(tp)
        if partial is None:
            if part != 0:
                self._dead_record(
                    record,
                    stream,
                    f"part {part}/{parts} of batch {batch_id} without its start",
                    value,
                    binary=True,
                )
                return
            partial = self._partials.setdefault(tp, _Partial(stream, batch_id))
        if part != partial.expected:
            self._dead_record(
                record, stream, f"part {part}/{parts} out of order", value, binary=True
            )
            return
        partial.expected += 1
        kind = headers[KIND]
        try:
            table = from_ipc(value)
            table = self._conform(stream, table, kind)
        except (
            pa.ArrowInvalid,
            pa.ArrowTypeError,
            pa.ArrowNotImplementedError,
            OSError,
            ValueError,
            KeyError,
        ) as exc:
            partial.dead.append(
                _Dead(
                    stream,
                    record.topic,
                    record.partition,
                    record.offset,
                    None,
                    None,
                    f"corrupt Arrow payload: {str(exc)[:500]}",
                    *_binary(value),
                )
            )
            table = None
        if table is not None:
            partial.parts.append(_Part(record, kind, table))
        elif not partial.parts:
            partial.parts.append(_Part(record, "skip", pa.table({})))
        if part == parts - 1:
            self._partials.pop(tp)
            if merge is not None:
                merge.completed(tp, batch_id)
            self._complete(partial, punct=headers.get(PUNCT) == "1")

    def _conform(self, stream: str, table: pa.Table, kind: str) -> pa.Table:
        if kind == "rejects":
            if "encoding" not in table.column_names:  # an older collector's rejects
                old = table.select(LEGACY_REJECTS_NAMES)
                n = old.num_rows
                return pa.Table.from_arrays(
                    [
                        *old.columns,
                        pa.nulls(n, pa.string()),
                        pa.nulls(n, pa.int64()),
                    ],
                    names=REJECTS_SCHEMA.names,
                ).cast(REJECTS_SCHEMA)
            return table.select(REJECTS_SCHEMA.names).cast(REJECTS_SCHEMA)
        schema = self._schema(stream)
        if table.schema.equals(schema):
            return table
        present = set(table.column_names)
        missing = [n for n in schema.names if n not in present]
        if missing:
            raise ValueError(f"the payload lacks columns {missing} of stream {stream!r}")
        return table.select(schema.names).cast(schema)

    def _schema(self, stream: str) -> pa.Schema:
        schema = self._schemas.get(stream)
        if schema is None:
            columns: dict[str, ColumnType | None] = dict(self.flow.schemas[stream])
            schema = pa.schema(
                [(n, arrow_type(t) if t else pa.string()) for n, t in columns.items()]
                + [(TS, pa.int64()), (POS, pa.int64())]
            )
            self._schemas[stream] = schema
        return schema

    def _complete(self, partial: _Partial, *, punct: bool) -> None:
        stream = partial.stream
        self._type_singles(stream)  # earlier single events first: lateness follows arrival order
        self._dead.extend(partial.dead)
        events = []
        for part in partial.parts:
            if part.kind == "rejects":
                for row in part.table.to_pylist():
                    self._dead.append(
                        _Dead(
                            stream,
                            part.record.topic,
                            part.record.partition,
                            part.record.offset,
                            row["pos"],
                            None,
                            row["reason"],
                            row["payload"] or "",
                            row["encoding"],
                            row["payload_bytes"],
                        )
                    )
            elif part.kind == "batch" and part.table.num_rows:
                events.append(part.table)
                self._remember(stream, part.table, part.record)
        if events:
            table = pa.concat_tables(events)
            self._add_events(stream, table, partial.parts[0].record)
        progress = self.progress.get(stream, StreamProgress())
        self.progress[stream] = StreamProgress(
            max(partial.batch_id, progress.last_batch),
            self.progress.get(stream, progress).max_ts,
            self.progress.get(stream, progress).events,
            max(progress.last_pos, *(self._last_pos(p) for p in partial.parts)),
        )
        self._punctuated = self._punctuated or punct

    @staticmethod
    def _last_pos(part: _Part) -> int:
        for key, value in part.record.headers:
            if key == "sdi-last-pos":
                try:
                    return int(value.decode())
                except ValueError:
                    return -1
        return -1

    def _remember(self, stream: str, table: pa.Table, record: RawRecord) -> None:
        self._remember_at(stream, table, record.topic, record.partition, record.offset)

    def _remember_at(
        self, stream: str, table: pa.Table, topic: str, partition: int, offset: int
    ) -> None:
        positions = table.column(POS)
        lo = int(pa.compute.min(positions).as_py())
        hi = int(pa.compute.max(positions).as_py())
        self._index.setdefault(stream, []).append((lo, hi, topic, partition, offset))

    def _add_events(self, stream: str, table: pa.Table, record: RawRecord) -> None:
        """Range check, late check, then queue ``table`` for the engine batch. The high mark
        moves only with the events that pass both (in arrival order)."""
        table = self._in_range(stream, table, record)
        merge = self.merges.get(stream)
        if merge is not None:
            self._hold_events(merge, stream, table, record)
            return
        progress = self.progress.get(stream, StreamProgress())
        ts = np.asarray(table.column(TS).to_numpy(zero_copy_only=False), dtype=np.int64)
        high = progress.max_ts
        lateness = self.lateness_us.get(stream)
        if lateness is not None and len(ts):
            start = int(ts[0]) if high is None else high
            running = np.maximum.accumulate(np.concatenate([[start], ts[:-1]]))
            late = ts < running - lateness
            if late.any():
                late_rows = table.filter(pa.array(late))
                reason = (
                    f"late: event time more than {lateness // 1000} ms behind the stream's "
                    "high mark"
                )
                self._dead_rows(stream, late_rows, record, [reason] * late_rows.num_rows)
                table = table.filter(pa.array(~late))
                ts = ts[~late]
        if len(ts):
            top = int(ts.max())
            high = top if high is None else max(high, top)
        self.progress[stream] = StreamProgress(
            progress.last_batch, high, progress.events + table.num_rows, progress.last_pos
        )
        if table.num_rows:
            self._tables.setdefault(stream, []).append(table)
            self._events += table.num_rows

    def _hold_events(
        self, merge: PartitionMerge, stream: str, table: pa.Table, record: RawRecord
    ) -> None:
        """A merged stream's events: late ones (more than the allowed lateness behind the newest
        event time released) become dead letters, the rest are held by the merge."""
        high = self.progress.get(stream, StreamProgress()).max_ts
        lateness = self.lateness_us.get(stream)
        if lateness is not None and high is not None and table.num_rows:
            ts = np.asarray(table.column(TS).to_numpy(zero_copy_only=False), dtype=np.int64)
            late = ts < high - lateness
            if late.any():
                late_rows = table.filter(pa.array(late))
                reason = (
                    f"late: event time more than {lateness // 1000} ms behind the stream's "
                    "high mark"
                )
                self._dead_rows(stream, late_rows, record, [reason] * late_rows.num_rows)
                table = table.filter(pa.array(~late))
        floor = merge.floor
        if floor is not None and table.num_rows:
            behind = int(pc.sum(pc.less(table.column(TS), floor)).as_py() or 0)
            if behind:
                logger.warning(
                    "stream=%s partition=%s offset=%s: %s events older than the release point %s "
                    "(newer events were applied; these follow in the next batch)",
                    stream,
                    record.partition,
                    record.offset,
                    behind,
                    floor,
                )
        merge.hold((record.topic, record.partition), record.offset, table)

    def _release(self, stream: str, merge: PartitionMerge) -> None:
        """Move the held events the release point has passed into the pending batch, in
        ``(_ts, _pos)`` order; the stream's high mark and event count follow them."""
        chunks = merge.release()
        table = sort_released(chunks)
        if table is None:
            return
        for chunk in chunks:
            if chunk.events.num_rows:
                self._remember_at(stream, chunk.events, chunk.topic, chunk.partition, chunk.offset)
        self._index.setdefault(stream, []).sort()
        progress = self.progress.get(stream, StreamProgress())
        top = int(pc.max(table.column(TS)).as_py())
        self.progress[stream] = StreamProgress(
            progress.last_batch,
            top if progress.max_ts is None else max(progress.max_ts, top),
            progress.events + table.num_rows,
            progress.last_pos,
        )
        self._tables.setdefault(stream, []).append(table)

    def _in_range(self, stream: str, table: pa.Table, record: RawRecord) -> pa.Table:
        """``table`` without its events whose event time is out of range (those become dead
        letters)."""
        if not table.num_rows:
            return table
        column = table.column(TS)
        ts = np.asarray(column.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
        problems = self.event_times.check(ts)
        for i in np.flatnonzero(np.asarray(column.is_null())).tolist():
            problems[int(i)] = self.event_times.problem(None) or "no event time"
        if not problems:
            return table
        rows = sorted(problems)
        self._dead_rows(
            stream, table.take(pa.array(rows, pa.int64())), record, [problems[i] for i in rows]
        )
        keep = np.ones(table.num_rows, dtype=bool)
        keep[rows] = False
        return table.filter(pa.array(keep))

    def _dead_rows(
        self, stream: str, rows: pa.Table, record: RawRecord, reasons: list[str]
    ) -> None:
        """Events of a batch as dead letters: each as JSON with its ``_ts``, located at the
        record that carried it."""
        for row, reason in zip(rows.to_pylist(), reasons, strict=True):
            where = self._locate(stream, row[POS]) or (
                record.topic,
                record.partition,
                record.offset,
            )
            self._dead.append(_Dead(stream, *where, row[POS], row[TS], reason, *_event_json(row)))

    def _locate(self, stream: str, pos: int) -> tuple[str, int, int] | None:
        for lo, hi, topic, partition, offset in reversed(self._index.get(stream, [])):
            if lo <= pos <= hi:
                return topic, partition, offset
        return None

    def _add_single(
        self, record: RawRecord, headers: dict[str, str], stream: str, value: bytes
    ) -> None:
        try:
            text = value.decode("utf-8")
        except UnicodeDecodeError as exc:
            self._dead_record(record, stream, f"bad encoding: not utf-8 ({exc.reason})", value)
            return
        try:
            event = json.loads(text)
        except ValueError as exc:
            self._dead_record(record, stream, f"bad JSON: {exc}", value)
            return
        except RecursionError:
            self._dead_record(record, stream, "bad JSON: nested too deeply", value)
            return
        if not isinstance(event, dict):
            self._dead_single(
                record, stream, None, "a single-event record must be a JSON object", text
            )
            return
        replay = headers.get(REPLAY_OF)
        if replay and replay.isdigit():
            self._replayed.append(int(replay))
        self._singles.setdefault(stream, []).append((record, event))
        self._events += 1

    def _dead_single(
        self, record: RawRecord, stream: str, ts: int | None, reason: str, text: str
    ) -> None:
        """A single-event record that is JSON but not an acceptable event: its text as it
        came (encoding ``json``)."""
        self._dead.append(
            _Dead(
                stream,
                record.topic,
                record.partition,
                record.offset,
                None,
                ts,
                reason,
                text,
                "json",
                len(record.value or b""),
            )
        )

    def _type_singles(self, stream: str) -> None:
        items = self._singles.pop(stream, [])
        if not items:
            return
        columns = {n: t or "string" for n, t in self.flow.schemas[stream].items()}
        raw, nested = python_columns(columns, [e for _, e in items])
        arrays, bad = convert_columns(raw, columns)
        for i, reason in nested.items():
            bad[i] = reason if i not in bad else f"{reason}; {bad[i]}"
        now = now_us()
        ts_values = [e.get(TS, r.timestamp_ms * 1000) for r, e in items]
        pos_values = [e.get(POS, r.offset) for r, e in items]
        for i, (t, p) in enumerate(zip(ts_values, pos_values, strict=True)):
            problem = self.event_times.problem(t, now)
            if problem is not None:
                bad.setdefault(i, problem)
            if not isinstance(p, int) or isinstance(p, bool) or not _INT64_MIN <= p <= _INT64_MAX:
                bad.setdefault(i, f"_pos must be a 64-bit integer, got {str(p)[:80]}")
        clean_ts = [t if i not in bad else 0 for i, t in enumerate(ts_values)]
        clean_pos = [p if i not in bad else 0 for i, p in enumerate(pos_values)]
        table = pa.Table.from_arrays(
            [*arrays, pa.array(clean_ts, pa.int64()), pa.array(clean_pos, pa.int64())],
            schema=self._schema(stream),
        )
        for i, reason in sorted(bad.items()):
            record, _ = items[i]
            t = ts_values[i]
            ts = t if isinstance(t, int) and not isinstance(t, bool) else None
            if ts is not None and not _INT64_MIN <= ts <= _INT64_MAX:
                ts = None
            self._dead_single(record, stream, ts, reason, (record.value or b"").decode("utf-8"))
        if bad:
            keep = np.ones(len(items), dtype=bool)
            keep[sorted(bad)] = False
            table = table.filter(pa.array(keep))
            items = [it for i, it in enumerate(items) if keep[i]]
        for (record, _), pos in zip(items, table.column(POS).to_pylist(), strict=True):
            self._index.setdefault(stream, []).append(
                (pos, pos, record.topic, record.partition, record.offset)
            )
        self._index.setdefault(stream, []).sort()
        self._events -= len(bad)
        progress = self.progress.get(stream, StreamProgress())
        self.progress[stream] = StreamProgress(
            progress.last_batch,
            progress.max_ts,
            progress.events,
            max([progress.last_pos, *table.column(POS).to_pylist()]),
        )
        if stream in self.merges:
            # held per partition: each partition's events move its own watermark
            where = [(r.topic, r.partition) for r, _ in items]
            for tp in dict.fromkeys(where):
                first = next(r for r, _ in items if (r.topic, r.partition) == tp)
                self._add_events(stream, table.filter(pa.array([w == tp for w in where])), first)
        else:
            self._add_events(stream, table, items[0][0] if items else RawRecord("", 0, 0, None, []))
        # a merged stream's events are held (no longer pending); the others were counted again
        self._events -= table.num_rows

    # -- taking a batch ----------------------------------------------------------------------------

    def take(self, batch_id: int, last_offsets: Mapping[TopicPartition, int]) -> AssembledBatch:
        """The pending engine batch as ``batch_id``; ``last_offsets`` are the offsets of the last
        record added per partition (to resolve what the batch accounts for)."""
        for stream in list(self._singles):
            self._type_singles(stream)
        for stream, merge in self.merges.items():
            self._release(stream, merge)
        inputs = {s: pa.concat_tables(t) for s, t in self._tables.items() if t}
        offsets: dict[TopicPartition, int] = {}
        for tp, accounted in self._accounted.items():
            offsets[tp] = last_offsets[tp] + 1 if accounted < 0 else accounted
        for tp, partial in self._partials.items():
            if partial.parts:
                offsets[tp] = partial.parts[0].record.offset
        for tp, offset in offsets.items():
            self.next_offsets[tp] = max(self.next_offsets.get(tp, 0), offset)
        dead = _dead_table(batch_id, self._dead)
        assembled = AssembledBatch(
            batch=EngineBatch(batch_id, inputs),
            dead_letters=dead,
            offsets=offsets,
            streams=dict(self.progress),
            records=self._records,
            replayed=list(self._replayed),
            arrived_at=self._arrived or time.time(),
            record_index=self._index,
            partitions={
                (stream, topic, partition): progress
                for stream, merge in self.merges.items()
                for (topic, partition), progress in merge.snapshot().items()
            },
        )
        self._reset()
        return assembled


def _dead_table(batch_id: int, dead: list[_Dead]) -> pa.Table:
    n = len(dead)
    return pa.Table.from_arrays(
        [
            pa.array([batch_id] * n, pa.int64()),
            pa.array([d.stream for d in dead], pa.string()),
            pa.array([INGEST_STEP] * n, pa.string()),
            pa.array([d.topic for d in dead], pa.string()),
            pa.array([d.partition for d in dead], pa.int32()),
            pa.array([d.offset for d in dead], pa.int64()),
            pa.array([d.pos for d in dead], pa.int64()),
            pa.array([d.ts for d in dead], pa.int64()),
            pa.array([d.reason for d in dead], pa.string()),
            pa.array([d.payload for d in dead], pa.string()),
            pa.array([d.encoding for d in dead], pa.string()),
            pa.array([d.payload_bytes for d in dead], pa.int64()),
        ],
        schema=DEAD_LETTER_INPUT_SCHEMA,
    )


def engine_dead_letters(assembled: AssembledBatch, engine_dead: pa.Table) -> pa.Table:
    """The engine's dead letters of a batch in staging form, each with the record that carried
    its event and, as its payload, the event as it entered the batch (JSON with ``_ts``, so a fix
    of it replays through the stream); when the event cannot be found (no position), the row
    the step saw, as the engine gave it."""
    if engine_dead.num_rows == 0:
        return DEAD_LETTER_INPUT_SCHEMA.empty_table()
    rows = engine_dead.to_pylist()
    located = [
        assembled.locate(r["source"], r["pos"]) if r["pos"] is not None else None for r in rows
    ]
    originals = _original_events(assembled, rows)
    payloads = [
        originals.get(i) or (r["payload"], "json", len((r["payload"] or "").encode("utf-8")))
        for i, r in enumerate(rows)
    ]
    n = len(rows)
    return pa.Table.from_arrays(
        [
            pa.array([assembled.batch.batch_id] * n, pa.int64()),
            pa.array([r["source"] for r in rows], pa.string()),
            pa.array([r["step"] for r in rows], pa.string()),
            pa.array([loc[0] if loc else None for loc in located], pa.string()),
            pa.array([loc[1] if loc else None for loc in located], pa.int32()),
            pa.array([loc[2] if loc else None for loc in located], pa.int64()),
            pa.array([r["pos"] for r in rows], pa.int64()),
            pa.array([r["ts"] for r in rows], pa.int64()),
            pa.array([r["reason"] for r in rows], pa.string()),
            pa.array([p[0] for p in payloads], pa.string()),
            pa.array([p[1] for p in payloads], pa.string()),
            pa.array([p[2] for p in payloads], pa.int64()),
        ],
        schema=DEAD_LETTER_INPUT_SCHEMA,
    )


def _original_events(
    assembled: AssembledBatch, rows: list[dict[str, Any]]
) -> dict[int, tuple[str, str, int]]:
    """``{index in rows: the event's JSON payload}`` for engine dead letters whose event is in
    the batch's inputs (by source and position; the first event at a position)."""
    wanted: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        if r["pos"] is not None and r["source"] in assembled.batch.inputs:
            wanted.setdefault(r["source"], []).append(i)
    found: dict[int, tuple[str, str, int]] = {}
    for source, indices in wanted.items():
        table = assembled.batch.inputs[source]
        needles = pa.array([rows[i]["pos"] for i in indices], pa.int64())
        at = pc.index_in(needles, value_set=table.column(POS)).to_pylist()
        hits = [(i, k) for i, k in zip(indices, at, strict=True) if k is not None]
        if not hits:
            continue
        events = table.take(pa.array([k for _, k in hits], pa.int64())).to_pylist()
        for (i, _), event in zip(hits, events, strict=True):
            found[i] = _event_json(event)
    return found
