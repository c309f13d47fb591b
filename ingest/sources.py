"""Sources: files and Python iterables turned into chunks of typed events.

Every event gets an event time ``_ts`` (µs since the epoch) and a source position ``_pos`` (the
data line of a file, the item index of an iterable, counting from 0). A source reads from any
position on (:meth:`BaseSource.read`), which is how a collector resumes after a crash.

Rows that cannot become events — a wrong field count, a value that does not parse as its declared
type, bytes that are not valid text, a missing event time, an event time out of range
(:mod:`ingest.eventtime`) — are *rejects*: their position, the reason and the row as it came (the
line's text, the undecodable bytes in base64, a Python or JSON event as JSON) travel on to the
dead-letter table; the other rows go on.

::

    txns = DelimitedFileSource(
        "txns.txt",
        columns={"kind": "string", "src": "int64", "amount": "int64", "ts": "timestamp"},
        delimiter="|",
        timestamp="ts",
    )
"""

from __future__ import annotations

import base64
import csv
import io
import json
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from etl_dataflows.raw_values import convert_columns, event_times, python_columns
from etl_dataflows.types import POS, TS, ColumnType, arrow_type, check_column_type
from ingest.eventtime import EventTimeBounds
from ingest.exceptions import SourceUnavailable

PayloadEncoding = str
"""How a dead letter's payload text holds the original: ``json`` (a JSON document: the event as
given), ``utf8`` (the original text, e.g. a file's line) or ``base64`` (raw bytes that are not
text)."""


class Reject(NamedTuple):
    """A row a source could not turn into an event: its position, the reason, and the row as it
    came in ``encoding`` (see :data:`PayloadEncoding`)."""

    pos: int
    reason: str
    payload: str
    encoding: PayloadEncoding = "utf8"


def json_payload(value: Any) -> str:
    """An event (or any JSON-ish value) as the JSON text a dead letter keeps."""
    return json.dumps(value, default=str, ensure_ascii=False)


def bytes_payload(raw: bytes) -> tuple[str, PayloadEncoding]:
    """Raw bytes as dead-letter text: the text when they are UTF-8, else base64."""
    try:
        return raw.decode("utf-8"), "utf8"
    except UnicodeDecodeError:
        return base64.b64encode(raw).decode("ascii"), "base64"


class _Punctuation:
    def __repr__(self) -> str:
        return "PUNCTUATION"


#: Yield this from an iterable source to close the current logical batch there.
PUNCTUATION: Final = _Punctuation()


@dataclass
class SourceChunk:
    """Events read from a source (declared columns + ``_ts`` + ``_pos``), the rejected rows, the
    last position covered, and whether a punctuation follows the chunk."""

    events: pa.Table
    rejects: list[Reject] = field(default_factory=list)
    last_pos: int = -1
    punctuation: bool = False
    warnings: list[str] = field(default_factory=list)
    """Things a client should know about accepted events (e.g. some had no ``_ts``)."""
    on_produced: Callable[[int, int], None] | None = None
    """Called by the collector with the first and last logical batch ids that carry this chunk,
    once they are produced, flushed and checkpointed (a pushed source answers its caller then)."""


class BaseSource(ABC):
    """A source of events with declared columns; see the module docstring.

    :attr:`event_time_bounds` is the accepted range of event times (the defaults of
    :class:`~ingest.eventtime.EventTimeBounds`) and :attr:`max_record_bytes` the largest Kafka
    record the events travel in; the collector sets both from the run's settings before it
    reads."""

    event_time_bounds: EventTimeBounds = EventTimeBounds()
    max_record_bytes: int = 900_000

    def __init__(self, columns: Mapping[str, str], timestamp: str | None) -> None:
        try:
            self.columns: dict[str, ColumnType] = {
                n: check_column_type(n, str(t)) for n, t in columns.items()
            }
        except ValueError as exc:
            raise SourceUnavailable(str(exc)) from exc
        if timestamp is not None and timestamp not in self.columns:
            raise SourceUnavailable(
                f"event-time column {timestamp!r} is not among the columns {list(self.columns)}"
            )
        if timestamp is not None and self.columns[timestamp] not in ("timestamp", "date", "int64"):
            raise SourceUnavailable(
                f"event-time column {timestamp!r} must be timestamp, date or int64"
            )
        self.timestamp = timestamp
        self.schema = pa.schema(
            [(n, arrow_type(t)) for n, t in self.columns.items()]
            + [(TS, pa.int64()), (POS, pa.int64())]
        )

    @abstractmethod
    def read(self, start: int = 0) -> Iterator[SourceChunk]:
        """Chunks of events from position ``start`` on, in position order."""

    @property
    @abstractmethod
    def identity(self) -> str:
        """What the source reads (a path, a name); a collector checkpoint belongs to it."""

    def _events(
        self,
        raw: Mapping[str, pa.Array],
        positions: np.ndarray,
        times: pa.Array | None,
        time_problems: Mapping[int, str] | None = None,
    ) -> tuple[pa.Table, dict[int, str]]:
        """Typed events from raw columns, without the rows that fail: returns the events and
        ``{row index: reason}`` of the rows left out (values that do not convert, a missing or
        out-of-range event time, and ``time_problems`` the caller found)."""
        arrays, bad = convert_columns(raw, self.columns)
        for i, reason in (time_problems or {}).items():
            bad.setdefault(i, reason)
        if self.timestamp is not None:
            index = list(self.columns).index(self.timestamp)
            ts = event_times(arrays[index], self.columns[self.timestamp])
            missing = np.flatnonzero(np.asarray(pc.is_null(ts))).tolist()
            for i in missing:
                bad.setdefault(int(i), f"no event time in column {self.timestamp!r}")
        elif times is not None:
            ts = times
        else:
            now = time.time_ns() // 1000
            ts = pa.array(np.full(len(positions), now, dtype=np.int64))
        ts = ts.cast(pa.int64())
        values = np.asarray(ts.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
        for i, reason in self.event_time_bounds.check(values).items():
            if not ts[i].is_valid:
                continue
            bad.setdefault(i, reason)
        table = pa.Table.from_arrays(
            [*arrays, ts, pa.array(positions, pa.int64())], schema=self.schema
        )
        if not bad:
            return table, {}
        keep = np.ones(len(positions), dtype=bool)
        keep[sorted(bad)] = False
        return table.filter(pa.array(keep)), bad


class DelimitedFileSource(BaseSource):
    """A delimited text file (pipe-delimited by default) with declared columns in file order.

    ``header`` skips a first line of column names; ``quote`` enables quoted fields (CSV);
    ``encoding`` is the file's text encoding; ``timestamp`` names the event-time column (else the
    read time is the event time). Lines end with LF or CRLF; blank lines are skipped (they keep
    their position). The end of the file is a punctuation.
    """

    def __init__(
        self,
        path: str | Path,
        columns: Mapping[str, str],
        *,
        delimiter: str = "|",
        header: bool = False,
        quote: str | None = None,
        encoding: str = "utf-8",
        timestamp: str | None = None,
        chunk_bytes: int = 4 * 1024 * 1024,
    ) -> None:
        super().__init__(columns, timestamp)
        self.path = Path(path)
        self.delimiter = delimiter
        self.header = header
        self.quote = quote
        self.encoding = encoding
        self.chunk_bytes = chunk_bytes

    @property
    def identity(self) -> str:
        return str(self.path.resolve())

    def read(self, start: int = 0) -> Iterator[SourceChunk]:
        try:
            handle = self.path.open("rb")
        except OSError as exc:
            raise SourceUnavailable(f"cannot read {self.path}: {exc.strerror}") from exc
        with handle:
            if self.header:
                handle.readline()
            pos = 0
            last = -1
            while True:
                lines = handle.readlines(self.chunk_bytes)
                if not lines:
                    break
                first = pos
                pos += len(lines)
                last = pos - 1
                if pos <= start:
                    continue
                if first < start:
                    lines = lines[start - first :]
                    first = start
                yield self._parse(lines, first)
            yield SourceChunk(pa.schema(self.schema).empty_table(), last_pos=last, punctuation=True)

    def _decode(self, lines: list[bytes], first: int) -> tuple[list[str | None], list[Reject]]:
        texts: list[str | None] = []
        rejects: list[Reject] = []
        stripped = [line.rstrip(b"\r\n") for line in lines]
        if self.encoding.replace("-", "").lower() == "utf8":
            try:
                joined = pa.array(stripped, pa.binary()).cast(pa.string())
                return [t if t else None for t in joined.to_pylist()], []
            except pa.ArrowInvalid:
                pass
        for i, raw in enumerate(stripped):
            try:
                text = raw.decode(self.encoding)
                texts.append(text or None)
            except UnicodeDecodeError as exc:
                texts.append(None)
                rejects.append(
                    Reject(
                        first + i,
                        f"bad encoding: not {self.encoding} ({exc.reason})",
                        base64.b64encode(raw).decode("ascii"),
                        "base64",
                    )
                )
        return texts, rejects

    def _split(self, texts: list[str]) -> pa.ListArray:
        if self.quote is None:
            result: pa.ListArray = pc.split_pattern(pa.array(texts, pa.string()), self.delimiter)
            return result
        reader = csv.reader(
            io.StringIO("\n".join(texts)), delimiter=self.delimiter, quotechar=self.quote
        )
        return pa.array([list(row) for row in reader], pa.list_(pa.string()))

    def _parse(self, lines: list[bytes], first: int) -> SourceChunk:
        texts, rejects = self._decode(lines, first)
        present = [i for i, t in enumerate(texts) if t is not None]
        rejected = {r[0] - first for r in rejects}
        rows = [i for i in present if i not in rejected]
        kept = [texts[i] or "" for i in rows]
        fields = self._split(kept) if kept else pa.array([], pa.list_(pa.string()))
        counts = np.asarray(pc.list_value_length(fields).fill_null(0))
        width = len(self.columns)
        wrong = np.flatnonzero(counts != width)
        for w in wrong.tolist():
            rejects.append(
                Reject(
                    first + rows[w],
                    f"wrong field count: expected {width}, got {counts[w]}",
                    kept[w],
                )
            )
        good = np.flatnonzero(counts == width)
        fields = fields.take(pa.array(good, pa.int64()))
        raw = {
            name: pc.list_element(fields, i) if len(fields) else pa.array([], pa.string())
            for i, name in enumerate(self.columns)
        }
        positions = np.asarray([first + rows[i] for i in good], dtype=np.int64)
        events, bad = self._events(raw, positions, None)
        for i, reason in bad.items():
            line = int(good[i])
            rejects.append(Reject(first + rows[line], reason, kept[line]))
        rejects.sort(key=lambda r: r[0])
        return SourceChunk(events, rejects, last_pos=first + len(lines) - 1)


class CsvFileSource(DelimitedFileSource):
    """A CSV file: comma-delimited with double-quoted fields (``header=True`` by default)."""

    def __init__(
        self, path: str | Path, columns: Mapping[str, str], *, header: bool = True, **kwargs: Any
    ) -> None:
        kwargs.setdefault("delimiter", ",")
        kwargs.setdefault("quote", '"')
        super().__init__(path, columns, header=header, **kwargs)


class IterableSource(BaseSource):
    """Events from Python dicts (``{column: value, "_ts": µs?}``); :data:`PUNCTUATION` items close
    a logical batch. ``items`` is a sequence or a function returning a fresh iterable (so a
    restarted collector can read again from a position)."""

    def __init__(
        self,
        name: str,
        items: Sequence[Any] | Callable[[], Iterable[Any]],
        columns: Mapping[str, str],
        *,
        timestamp: str | None = None,
        chunk_size: int = 10_000,
    ) -> None:
        super().__init__(columns, timestamp)
        self.name = name
        self._items = items
        self.chunk_size = chunk_size

    @property
    def identity(self) -> str:
        return f"iterable:{self.name}"

    def read(self, start: int = 0) -> Iterator[SourceChunk]:
        source = self._items() if callable(self._items) else self._items
        pending: list[tuple[int, Any]] = []
        pos = 0
        for item in source:
            if item is PUNCTUATION:
                if pos > start or pending:
                    yield self._chunk(pending, pos - 1, punctuation=True)
                pending = []
                continue
            if pos >= start:
                pending.append((pos, item))
            pos += 1
            if len(pending) >= self.chunk_size:
                yield self._chunk(pending, pos - 1)
                pending = []
        yield self._chunk(pending, pos - 1, punctuation=True)

    def _chunk(
        self, items: list[tuple[int, Any]], last: int, punctuation: bool = False
    ) -> SourceChunk:
        """Typed events of ``(position, item)`` pairs. Without a timestamp column an item's
        ``_ts`` is its event time (it must be integer µs in range, else the item is a reject),
        and an item without one gets the time it was read (a chunk where only some items have
        one says so in its warnings)."""
        rows = [(p, r) for p, r in items if isinstance(r, Mapping)]
        rejects: list[Reject] = [
            _not_a_mapping(p, r) for p, r in items if not isinstance(r, Mapping)
        ]
        positions = np.asarray([p for p, _ in rows], dtype=np.int64)
        raw, problems = python_columns(self.columns, [r for _, r in rows])
        times = None
        warnings: list[str] = []
        if self.timestamp is None:
            given = [i for i, (_, r) in enumerate(rows) if TS in r]
            if given:
                now = time.time_ns() // 1000
                values = [now] * len(rows)
                for i in given:
                    value = rows[i][1][TS]
                    problem = self.event_time_bounds.problem(value, now)
                    if problem is None:
                        values[i] = int(value)
                    else:
                        problems.setdefault(i, problem)
                times = pa.array(values, pa.int64())
                if len(given) < len(rows):
                    warnings.append(
                        f"{len(rows) - len(given)} of {len(rows)} events have no {TS}: their "
                        "event time is the time they arrived"
                    )
        events, bad = self._events(raw, positions, times, problems)
        for i, reason in bad.items():
            p, row = rows[i]
            rejects.append(Reject(p, reason, json_payload(dict(row)), "json"))
        rejects.sort(key=lambda r: r[0])
        return SourceChunk(
            events, rejects, last_pos=last, punctuation=punctuation, warnings=warnings
        )


def _not_a_mapping(pos: int, item: Any) -> Reject:
    reason = f"not a mapping: {type(item).__name__}"
    try:
        return Reject(pos, reason, json.dumps(item, ensure_ascii=False), "json")
    except (TypeError, ValueError):
        return Reject(pos, reason, repr(item), "utf8")
