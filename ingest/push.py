"""The HTTP push source: events a client POSTs to the service, collected like any other input.

An :class:`HttpPushSource` is an unbounded source fed by :meth:`HttpPushSource.offer`. The
stream's ordinary :class:`~ingest.collector.BatchCollector` reads it, so pushed events travel the
same path as a file's: logical batches with per-stream ids, Arrow IPC records, ``acks=all``,
checkpoints, and rows that do not parse going to the dead letters with their position.

An offer, in order:

1. The caller's events (JSON objects, or an Arrow table with the stream's columns) wait in a
   bounded queue (a full queue blocks the caller: backpressure).
2. The collector takes them as one chunk: consecutive source positions, then a punctuation, so
   they form their own logical batch (or several, above ``INGEST__BATCH_EVENTS``).
3. The collector produces the batch, flushes the producer and writes its checkpoint, then reports
   the batch ids back; :meth:`~HttpPushSource.offer` returns a :class:`PushReceipt`.

When the offer returns, the events are in Kafka, acknowledged by every in-sync replica; an offer
that times out may or may not have been produced (the receipt never lies about what was). Between
offers the source yields empty chunks every ``heartbeat_s`` so the collector notices a stop.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from etl_dataflows.types import POS, TS
from ingest.exceptions import PushRefused, PushTimedOut
from ingest.sources import IterableSource, SourceChunk


@dataclass
class PushReceipt:
    """What became of one offer: ``events`` accepted (typed), ``rejects`` (to the dead letters,
    with their positions), the positions ``first_pos..last_pos`` and the logical batch ids that
    carry them."""

    stream: str
    events: int
    rejects: int
    first_pos: int
    last_pos: int
    first_batch: int = 0
    last_batch: int = 0
    done: threading.Event = field(default_factory=threading.Event, repr=False)


@dataclass
class _Offer:
    rows: list[Any] | None
    table: pa.Table | None
    receipt: PushReceipt


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
    def identity(self) -> str:
        return f"http:{self.name}"

    def offer(
        self, events: Sequence[Mapping[str, Any]] | pa.Table, *, timeout_s: float = 30.0
    ) -> PushReceipt:
        """Hand ``events`` to the collector and wait until they are produced (see the module
        docstring). Raises :class:`PushRefused` for a table that does not fit the stream and
        :class:`PushTimedOut` when the collector did not produce them within ``timeout_s``."""
        if isinstance(events, pa.Table):
            offer = _Offer(None, self._conform(events), PushReceipt(self.name, 0, 0, -1, -1))
        else:
            offer = _Offer(list(events), None, PushReceipt(self.name, 0, 0, -1, -1))
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
        return offer.receipt

    def close(self) -> None:
        """End :meth:`read` after the offers already queued."""
        self._queue.put(_CLOSE)

    def _conform(self, table: pa.Table) -> pa.Table:
        allowed = set(self.columns) | {TS}
        unknown = sorted(set(table.column_names) - allowed)
        if unknown:
            raise PushRefused(
                f"stream {self.name!r} has no columns {unknown}; its columns are "
                f"{list(self.columns)} (and {TS})"
            )
        n = table.num_rows
        arrays = []
        for f in self.schema:
            if f.name == POS:
                arrays.append(pa.nulls(n, pa.int64()))
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
        return pa.Table.from_arrays(arrays, schema=self.schema)

    def read(self, start: int = 0) -> Iterator[SourceChunk]:
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
            if offer.table is not None:
                n = offer.table.num_rows
                positions = pa.array(np.arange(pos, pos + n, dtype=np.int64))
                events = offer.table.set_column(
                    offer.table.schema.get_field_index(POS), POS, positions
                )
                chunk = SourceChunk(events, [], last_pos=pos + n - 1, punctuation=True)
            else:
                rows = offer.rows or []
                n = len(rows)
                chunk = self._chunk(
                    list(zip(range(pos, pos + n), rows, strict=True)), pos + n - 1, True
                )
            receipt = offer.receipt
            receipt.events = chunk.events.num_rows
            receipt.rejects = len(chunk.rejects)
            receipt.first_pos, receipt.last_pos = pos, pos + n - 1
            pos += n

            def produced(first: int, last: int, receipt: PushReceipt = receipt) -> None:
                receipt.first_batch, receipt.last_batch = first, last
                receipt.done.set()

            chunk.on_produced = produced
            yield chunk


def _now_us() -> int:
    import time

    return time.time_ns() // 1000
