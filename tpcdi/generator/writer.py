"""The output side of the generator: the staging-area layout, file writing, answer-key rows and
the progress bar.

Layout (clause 2.3, as DIGen writes it): ``Batch1/``, ``Batch2/``, ``Batch3/`` (a longer feed:
up to ``Batch<N+1>/``) with the data files and their ``<name>_audit.csv``; ``Batch<b>_audit.csv``
per batch and ``Generator_audit.csv`` at the top. Every line ends with CRLF.
"""

from __future__ import annotations

import datetime
import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from tpcdi.generator.lines import Field, format_lines
from tpcdi.generator.text import join_fields, write_lines

AUDIT_HEADER = "DataSet, BatchID ,Date , Attribute , Value, DValue"
#: Rows turned into text at a time by :meth:`StagingWriter.delimited_rows`.
CHUNK_ROWS = 500_000
#: Rows formatted at a time by :meth:`StagingWriter.formatted_rows` (~10-20 MB of text): small
#: enough that both cores have a chunk to format in a file of a few hundred thousand lines.
FORMAT_ROWS = 131_072
#: Threads formatting chunks (the formatter releases the GIL): one per core of our machines.
FORMAT_THREADS = 2


@dataclass(frozen=True)
class AuditRow:
    """One answer-key row (clause 2.2.2.20)."""

    dataset: str
    batch: int
    attribute: str
    value: int | None = None
    dvalue: float | None = None
    date: datetime.date | None = None

    def render(self) -> str:
        def text(item: object) -> str:
            return "" if item is None else str(item)

        return ",".join(
            [
                self.dataset,
                str(self.batch),
                text(self.date),
                self.attribute,
                text(self.value),
                text(self.dvalue),
            ]
        )


class Progress:
    """Counts records written; shows a tqdm bar on a terminal when enabled."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.done = 0
        self._lock = threading.Lock()  # files are written on several threads
        self._bar: Any = None
        if enabled:
            from tqdm import tqdm

            self._bar = tqdm(total=total, unit="rec", unit_scale=True, desc="tpcdi generate")

    def advance(self, records: int, label: str = "") -> None:
        with self._lock:
            self.done += records
            if self._bar is not None:
                if label:
                    self._bar.set_postfix_str(label, refresh=False)
                self._bar.update(records)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.total = self._bar.n  # the total was an estimate
            self._bar.refresh()
            self._bar.close()


class StagingWriter:
    """Writes the files of one data set under ``root`` and remembers how many records each has.

    Files may be written from several threads at once, each file from one thread."""

    def __init__(self, root: Path, progress: Progress, batches: Iterable[int] = (1, 2, 3)) -> None:
        self.root = root
        self.progress = progress
        self.records: dict[tuple[int, str], int] = {}
        self._formatters: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        for batch in batches:
            (root / f"Batch{batch}").mkdir(parents=True, exist_ok=True)

    def close(self) -> None:
        """Stop the formatting threads (a later :meth:`formatted` starts them again)."""
        with self._lock:
            if self._formatters is not None:
                self._formatters.shutdown()
                self._formatters = None

    def _formatting(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._formatters is None:
                self._formatters = ThreadPoolExecutor(FORMAT_THREADS, "tpcdi-format")
            return self._formatters

    def path(self, batch: int, name: str) -> Path:
        return self.root / f"Batch{batch}" / name

    def lines(
        self,
        batch: int,
        name: str,
        lines: pa.Array | Iterable[pa.Array],
        *,
        eol: str = "\r\n",
        head: str = "",
        tail: str = "",
    ) -> int:
        """Write a file of ``lines`` (one array, or several written one after the other), each
        followed by ``eol``, between ``head`` and ``tail``; returns the number of lines."""
        parts = [lines] if isinstance(lines, pa.Array) else lines
        count = 0
        with open(self.path(batch, name), "wb") as handle:
            handle.write(head.encode())
            for part in parts:
                count += write_lines(handle, part, eol)
                self.progress.advance(len(part), name)
            handle.write(tail.encode())
        self.records[(batch, name)] = self.records.get((batch, name), 0) + count
        return count

    def delimited(
        self, batch: int, name: str, columns: Sequence[pa.Array], delimiter: str = "|"
    ) -> int:
        """Write a delimited file from its columns (text arrays; null is an empty field)."""
        if not columns or len(columns[0]) == 0:
            return self.lines(batch, name, pa.array([], pa.string()))
        return self.lines(batch, name, join_fields(columns, delimiter))

    def delimited_rows(
        self,
        batch: int,
        name: str,
        rows: int,
        build: Callable[[np.ndarray], Sequence[pa.Array]],
        delimiter: str = "|",
    ) -> int:
        """Write a delimited file of ``rows`` rows whose columns ``build`` makes for a range of
        row numbers; rows are built and written in chunks to bound memory."""
        parts = (
            join_fields(build(np.arange(lo, min(lo + CHUNK_ROWS, rows))), delimiter)
            for lo in range(0, rows, CHUNK_ROWS)
        )
        return self.lines(batch, name, parts)

    def formatted(
        self, batch: int, name: str, parts: Iterable[Sequence[Field]], delimiter: str = "|"
    ) -> int:
        """Write a delimited file whose lines are the fields of ``parts``, one after the other;
        returns the number of lines.

        ``parts`` is consumed in order on the calling thread (a part may draw random numbers or
        take sequence numbers); up to :data:`FORMAT_THREADS` parts are formatted at a time by
        :func:`~tpcdi.generator.lines.format_lines` while earlier ones are written, in order.
        """
        formatters = self._formatting()
        pending: deque[tuple[Future[np.ndarray], int]] = deque()
        count = 0
        with open(self.path(batch, name), "wb") as handle:

            def write_first() -> None:
                nonlocal count
                future, n = pending.popleft()
                handle.write(future.result().data)
                count += n
                self.progress.advance(n, name)

            for fields in parts:
                n = len(fields[0].values)
                for lo in range(0, n, FORMAT_ROWS):  # a big part in pieces: both cores get one
                    piece = [replace(f, values=f.values[lo : lo + FORMAT_ROWS]) for f in fields]
                    m = min(FORMAT_ROWS, n - lo)
                    pending.append((formatters.submit(format_lines, piece, delimiter), m))
                    if len(pending) > FORMAT_THREADS:
                        write_first()
            while pending:
                write_first()
        self.records[(batch, name)] = self.records.get((batch, name), 0) + count
        return count

    def formatted_rows(
        self,
        batch: int,
        name: str,
        rows: int,
        build: Callable[[np.ndarray], Sequence[Field]],
        delimiter: str = "|",
    ) -> int:
        """Write a delimited file of ``rows`` lines whose fields ``build`` makes for a range of
        line numbers (called in order, :data:`FORMAT_ROWS` lines at a time)."""
        parts = (
            build(np.arange(lo, min(lo + FORMAT_ROWS, rows))) for lo in range(0, rows, FORMAT_ROWS)
        )
        return self.formatted(batch, name, parts, delimiter)

    def text(self, batch: int, name: str, content: str, records: int) -> None:
        """Write a file from a string (CRLF line ends) that holds ``records`` records."""
        self.path(batch, name).write_bytes(content.encode("utf-8"))
        self.records[(batch, name)] = records
        self.progress.advance(records, name)

    def audit(self, batch: int | None, name: str, rows: Sequence[AuditRow]) -> None:
        """Write ``<name>_audit.csv`` in ``Batch<batch>`` (or at the top when batch is None)."""
        folder = self.root if batch is None else self.root / f"Batch{batch}"
        body = "".join(row.render() + "\r\n" for row in rows)
        (folder / f"{name}_audit.csv").write_bytes((AUDIT_HEADER + "\r\n" + body).encode())
