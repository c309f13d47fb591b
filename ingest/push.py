"""The HTTP push source: events a client POSTs to the service, collected like any other input.

An :class:`HttpPushSource` is an unbounded source fed by :meth:`HttpPushSource.offer`. The
stream's ordinary :class:`~ingest.collector.BatchCollector` reads it, so pushed events travel the
same path as a file's: logical batches with per-stream ids, Arrow IPC records, ``acks=all``,
checkpoints, and rows that do not parse going to the dead letters with their position.

An offer, in order:

0. The offer is checked as a whole, and refused with nothing taken (:class:`PushRefused`) when it
   holds no event (:class:`NoEvents`), fields the stream does not have (:class:`UnknownFields`;
   ``_ts`` is always allowed), an event larger than a Kafka record can carry
   (:class:`EventTooLarge`: the limit is ``KAFKA__MAX_RECORD_BYTES`` less
   :data:`~ingest.records.RECORD_OVERHEAD`), or an Arrow column that does not cast.
1. The caller's events (JSON objects, or an Arrow table with the stream's columns) wait in a
   bounded queue (a full queue blocks the caller: backpressure).
2. The collector takes them as one chunk: consecutive source positions, then a punctuation, so
   they form their own logical batch (or several, above ``INGEST__BATCH_EVENTS``).
3. The collector produces the batch, flushes the producer and writes its checkpoint, then reports
   the batch ids back; :meth:`~HttpPushSource.offer` returns a :class:`PushReceipt`.

When the offer returns, the events are in Kafka, acknowledged by every in-sync replica; an offer
that times out may or may not have been produced (the receipt never lies about what was). Between
offers the source yields empty chunks every ``heartbeat_s`` so the collector notices a stop.

**Conditional offers** make a client's retries exact. An offer may say the position its first
event must get (``expect_pos``): at step 2, where positions are given, an offer whose expected
position is not the stream's next one is refused with nothing taken
(:class:`~ingest.exceptions.PositionConflict`, carrying the stream's next position). A client that
numbers its events from 0 and offers them in order, one offer at a time, retries an offer whose
fate it does not know (a timeout, a connection lost, a killed service) with the same
``expect_pos``: it is taken if the first attempt was not, and refused with the next position
``expect_pos + n`` if it was. Because the check and the numbering happen at the same place, in
the collector's one thread, after a restart from the topic (the collector resumes after the last
batch Kafka holds), nothing is taken twice and nothing is lost.

Events that pass the offer's checks but not the row checks — a value that does not convert, an
event time (``_ts``) that is not integer µs or out of range (:mod:`ingest.eventtime`) — are
rejects: they go to the dead letters as the JSON event given (an Arrow row as JSON), and the
receipt counts and lists them. Without a ``_ts`` an event's event time is the time it arrived;
a JSON offer where only some events have one says so in the receipt's warnings.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from etl_dataflows.types import POS, TS
from ingest.exceptions import (
    EventTooLarge,
    NoEvents,
    PositionConflict,
    PushNotProduced,
    PushRefused,
    PushTimedOut,
    UnknownFields,
)
from ingest.records import event_limit
from ingest.sources import IterableSource, Reject, SourceChunk, json_payload

#: At most this many rejects are listed (position and reason) in a receipt; all are counted.
RECEIPT_REJECTS = 100


@dataclass
class PushReceipt:
    """What became of one offer: ``events`` accepted (typed), ``rejects`` (to the dead letters,
    with their positions; the first :data:`RECEIPT_REJECTS` listed in ``rejected`` as
    ``(pos, reason)``), the positions ``first_pos..last_pos``, the logical batch ids that carry
    them, and ``warnings`` about accepted events."""

    stream: str
    events: int
    rejects: int
    first_pos: int
    last_pos: int
    first_batch: int = 0
    last_batch: int = 0
    rejected: list[tuple[int, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event, repr=False)
    #: Set (with ``done``) when the collector failed before the events were acknowledged.
    failure: str | None = field(default=None, repr=False)
    #: Set (with ``done``) when a conditional offer was refused: the stream's next position.
    conflict: int | None = field(default=None, repr=False)


@dataclass
class _Offer:
    rows: list[Any] | None
    table: pa.Table | None
    receipt: PushReceipt
    bad: dict[int, Reject] = field(default_factory=dict)
    """Rows of ``table`` that are rejects (by row index; positions are set when read)."""
    expect_pos: int | None = None
    """The position the first event must get (a conditional offer), or None."""


_CLOSE = object()


class HttpPushSource(IterableSource):
    """See the module docstring. ``columns`` and ``timestamp`` as for any source; without a
    timestamp column an event's ``_ts`` (µs) is its event time, else the time it arrived."""

    def __init__(
        self,
        name: str,
        columns: Mapping[str, str],
        *,
        timestamp: str | None = None,
        heartbeat_s: float = 0.1,
        max_pending: int = 64,
    ) -> None:
        super().__init__(name, [], columns, timestamp=timestamp)
        self.heartbeat_s = heartbeat_s
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max_pending)

    @property
    def max_event_bytes(self) -> int:
        """The largest event an offer may hold (see step 0 of the module docstring)."""
        return event_limit(self.max_record_bytes)

    @property
    def identity(self) -> str:
        return f"http:{self.name}"

    def offer(
        self,
        events: Sequence[Mapping[str, Any]] | pa.Table,
        *,
        timeout_s: float = 30.0,
        expect_pos: int | None = None,
    ) -> PushReceipt:
        """Hand ``events`` to the collector and wait until they are produced (see the module
        docstring). Raises :class:`PushRefused` (or a subclass) for an offer refused as a whole,
        :class:`PositionConflict` when ``expect_pos`` is given and is not the stream's next
        position (nothing taken), and :class:`PushTimedOut` when the collector did not produce
        it within ``timeout_s``."""
        if expect_pos is not None and expect_pos < 0:
            raise PushRefused(f"stream {self.name!r}: expect_pos must be 0 or more")
        receipt = PushReceipt(self.name, 0, 0, -1, -1)
        if isinstance(events, pa.Table):
            table, bad = self._conform(events)
            offer = _Offer(None, table, receipt, bad, expect_pos)
        else:
            rows = list(events)
            self._check_rows(rows)
            offer = _Offer(rows, None, receipt, expect_pos=expect_pos)
        try:
            self._queue.put(offer, timeout=timeout_s)
        except queue.Full as exc:
            raise PushTimedOut(
                f"stream {self.name!r}: the collector is {self._queue.maxsize} offers behind"
            ) from exc
        if not offer.receipt.done.wait(timeout_s):
            raise PushTimedOut(
                f"stream {self.name!r}: the events were not produced within {timeout_s:g} s"
            )
        if offer.receipt.conflict is not None:
            raise PositionConflict(
                f"stream {self.name!r}: the offer expected its first event at position "
                f"{expect_pos}, the stream's next position is {offer.receipt.conflict}; nothing "
                "was taken",
                expected=expect_pos if expect_pos is not None else -1,
                next_pos=offer.receipt.conflict,
            )
        if offer.receipt.failure is not None:
            raise PushNotProduced(
                f"stream {self.name!r}: the events were not acknowledged ({offer.receipt.failure}"
                "); they may or may not be in Kafka: offer them again or check the stream"
            )
        return offer.receipt

    def close(self) -> None:
        """End :meth:`read` after the offers already queued."""
        self._queue.put(_CLOSE)

    def _allowed(self) -> set[str]:
        return set(self.columns) | {TS}

    def _unknown(self, names: set[str]) -> None:
        unknown = sorted(names - self._allowed())
        if unknown:
            raise UnknownFields(
                f"stream {self.name!r} has no fields {unknown[:20]}; its fields are "
                f"{list(self.columns)} (and {TS}, the event time in µs)",
                unknown,
            )

    def _check_rows(self, rows: list[Any]) -> None:
        """Step 0 for JSON events (mappings)."""
        if not rows:
            raise NoEvents(f"stream {self.name!r}: the offer holds no events")
        names: set[str] = set()
        for row in rows:
            if isinstance(row, Mapping):
                names.update(row.keys())
        self._unknown(names)
        limit = self.max_event_bytes
        if len(json_payload(rows).encode()) <= limit:
            return  # the whole offer fits: no event can be too large
        for i, row in enumerate(rows):
            size = len(json_payload(row).encode())
            if size > limit:
                raise EventTooLarge(
                    f"stream {self.name!r}: event {i} is {size:,} bytes as JSON; one event may "
                    f"be at most {limit:,} bytes (a Kafka record, KAFKA__MAX_RECORD_BYTES, less "
                    "room for its framing)",
                    i,
                    size,
                    limit,
                )

    def _conform(self, table: pa.Table) -> tuple[pa.Table, dict[int, Reject]]:
        """Step 0 for an Arrow table: the table in the stream's schema, and its rows that are
        rejects (``_ts`` null, not an integer or out of range)."""
        if table.num_rows == 0:
            raise NoEvents(f"stream {self.name!r}: the Arrow stream holds no rows")
        self._unknown(set(table.column_names))
        self._check_sizes(table)
        n = table.num_rows
        arrays = []
        bad: dict[int, Reject] = {}
        for f in self.schema:
            if f.name == POS:
                arrays.append(pa.nulls(n, pa.int64()))
            elif f.name == TS and TS in table.column_names:
                ts = self._event_times(table.column(TS))
                now = _now_us()
                values = np.asarray(ts.fill_null(0).to_numpy(zero_copy_only=False))
                problems = self.event_time_bounds.check(values, now)
                for i in np.flatnonzero(np.asarray(ts.is_null())).tolist():
                    problems[int(i)] = self.event_time_bounds.problem(None) or ""
                for i, reason in problems.items():
                    row = table.slice(i, 1).to_pylist()[0]
                    bad[i] = Reject(i, reason, json_payload(row), "json")
                arrays.append(ts.fill_null(now))
            elif f.name in table.column_names:
                try:
                    arrays.append(table.column(f.name).cast(f.type))
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                    raise PushRefused(
                        f"stream {self.name!r}: column {f.name!r} does not cast to {f.type}: {exc}"
                    ) from exc
            elif f.name == TS:
                now = _now_us()
                arrays.append(pa.array(np.full(n, now, dtype=np.int64)))
            else:
                arrays.append(pa.nulls(n, f.type))
        return pa.Table.from_arrays(arrays, schema=self.schema), bad

    def _event_times(self, column: pa.ChunkedArray) -> pa.ChunkedArray:
        """An Arrow ``_ts`` column as int64 µs: integers as they are, Arrow timestamps in µs;
        any other type refuses the offer."""
        kind = column.type
        try:
            if pa.types.is_timestamp(kind):
                return column.cast(pa.timestamp("us", tz=kind.tz)).cast(pa.int64())
            if pa.types.is_integer(kind) or pa.types.is_null(kind):
                return column.cast(pa.int64())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise PushRefused(
                f"stream {self.name!r}: column {TS!r} does not fit int64 µs: {exc}"
            ) from exc
        raise PushRefused(
            f"stream {self.name!r}: column {TS!r} must hold integer µs since the epoch (or be an "
            f"Arrow timestamp), not {kind}"
        )

    def _check_sizes(self, table: pa.Table) -> None:
        """Refuse a table with a row larger than :attr:`max_event_bytes` (measured as its values'
        bytes: variable-width values by length, fixed-width ones by their width)."""
        limit = self.max_event_bytes
        if table.nbytes <= limit:
            return
        sizes = np.zeros(table.num_rows, dtype=np.int64)
        for column in table.columns:
            kind = column.type
            if (
                pa.types.is_string(kind)
                or pa.types.is_binary(kind)
                or (pa.types.is_large_string(kind) or pa.types.is_large_binary(kind))
            ):
                lengths = pc.binary_length(column).fill_null(0)
                sizes += np.asarray(lengths.to_numpy(zero_copy_only=False), dtype=np.int64)
            elif _fixed(kind):
                sizes += max(1, kind.bit_width // 8)
            else:  # nested values: their share of the column's bytes, spread evenly
                sizes += column.nbytes // max(1, table.num_rows)
        worst = int(np.argmax(sizes))
        if int(sizes[worst]) > limit:
            raise EventTooLarge(
                f"stream {self.name!r}: row {worst} holds {int(sizes[worst]):,} bytes; one "
                f"event may be at most {limit:,} bytes (a Kafka record, "
                "KAFKA__MAX_RECORD_BYTES, less room for its framing)",
                worst,
                int(sizes[worst]),
                limit,
            )

    def read(self, start: int = 0) -> Iterator[SourceChunk]:
        """The offers as chunks from position ``start`` (see the module docstring). Closing the
        iterator while an offer is in hand (its collector failed) tells that offer it was not
        produced."""
        in_hand: list[PushReceipt] = []
        try:
            yield from self._read(start, in_hand)
        finally:
            for receipt in in_hand:
                if not receipt.done.is_set():
                    receipt.failure = "the collector stopped before Kafka acknowledged them"
                    receipt.done.set()

    def _read(self, start: int, in_hand: list[PushReceipt]) -> Iterator[SourceChunk]:
        pos = start
        while True:
            try:
                item = self._queue.get(timeout=self.heartbeat_s)
            except queue.Empty:
                yield SourceChunk(self.schema.empty_table(), last_pos=pos - 1)
                continue
            if item is _CLOSE:
                return
            offer: _Offer = item
            if offer.expect_pos is not None and offer.expect_pos != pos:
                offer.receipt.conflict = pos  # refused with nothing taken
                offer.receipt.done.set()
                continue
            if offer.table is not None:
                n = offer.table.num_rows
                positions = pa.array(np.arange(pos, pos + n, dtype=np.int64))
                events = offer.table.set_column(
                    offer.table.schema.get_field_index(POS), POS, positions
                )
                rejects = [r._replace(pos=pos + i) for i, r in sorted(offer.bad.items())]
                if rejects:
                    keep = np.ones(n, dtype=bool)
                    keep[sorted(offer.bad)] = False
                    events = events.filter(pa.array(keep))
                chunk = SourceChunk(events, rejects, last_pos=pos + n - 1, punctuation=True)
            else:
                rows = offer.rows or []
                n = len(rows)
                chunk = self._chunk(
                    list(zip(range(pos, pos + n), rows, strict=True)), pos + n - 1, True
                )
            receipt = offer.receipt
            receipt.events = chunk.events.num_rows
            receipt.rejects = len(chunk.rejects)
            receipt.rejected = [(r[0], r[1]) for r in chunk.rejects[:RECEIPT_REJECTS]]
            receipt.warnings = list(chunk.warnings)
            receipt.first_pos, receipt.last_pos = pos, pos + n - 1
            pos += n

            def produced(first: int, last: int, receipt: PushReceipt = receipt) -> None:
                receipt.first_batch, receipt.last_batch = first, last
                receipt.done.set()

            chunk.on_produced = produced
            in_hand[:] = [receipt]
            yield chunk


def _fixed(kind: pa.DataType) -> bool:
    try:
        return bool(kind.bit_width > 0)
    except ValueError:
        return False


def _now_us() -> int:
    import time

    return time.time_ns() // 1000
