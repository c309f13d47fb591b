"""Pipe-delimited (``|``) and comma-separated source files into typed Arrow tables.

Contract:

* Lines end with CRLF (DIGen's) or LF; a last line without a terminator is read too.
* Pipe files have no quoting; CSV files use standard double-quote quoting (DIGen writes
  ``"Toys ""R"" Us"`` in Prospect.csv). An empty field is null.
* A line is rejected, with its file, 1-based line number, text and reason, when it has the wrong
  number of fields, a value that does not parse as its column's type, an empty required field, or
  is empty. Every other line becomes a row; rows keep the file's order.
* Files are parsed in chunks of whole lines. Chunks are parsed in parallel threads (Arrow releases
  the GIL); within a chunk Arrow converts while parsing, and only a chunk with a bad value is
  re-read as text and converted column by column (:mod:`tpcdi.readers.convert`).
"""

from __future__ import annotations

import collections
import os
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from tpcdi.readers.convert import FALSE_VALUES, TRUE_VALUES, convert_table
from tpcdi.readers.registry import Field, SourceFile
from tpcdi.readers.rejects import ReadResult, concat_rejects, rejects_table

#: Bytes per parsed chunk (whole lines).
CHUNK_BYTES = 16 << 20
#: Name of the optional column holding each row's 1-based line number.
LINE_COLUMN = "_line"


def iter_chunks(
    path: Path, *, chunk_bytes: int = CHUNK_BYTES, skip_header: bool = False
) -> Iterator[tuple[bytes, int]]:
    """Yield ``(data, first_line)``: runs of whole lines of ``path`` of about ``chunk_bytes``."""
    with open(path, "rb") as handle:
        line = 1
        if skip_header:
            if not handle.readline():
                return
            line = 2
        carry = b""
        while True:
            block = handle.read(chunk_bytes)
            if not block:
                if carry:
                    yield carry, line
                return
            data = carry + block if carry else block
            cut = data.rfind(b"\n")
            if cut < 0:
                carry = data
                continue
            chunk, carry = data[: cut + 1], data[cut + 1 :]
            yield chunk, line
            line += chunk.count(b"\n")


def _line_count(data: bytes) -> int:
    return data.count(b"\n") + (0 if data.endswith(b"\n") else 1)


def _line_text(data: bytes, index: int) -> str:
    """The text of the ``index``-th (0-based) line of ``data``, without its terminator."""
    starts = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10) + 1
    begin = 0 if index == 0 else int(starts[index - 1])
    end = int(starts[index]) - 1 if index < len(starts) else len(data)
    return data[begin:end].decode("utf-8", "replace").rstrip("\r")


class _ChunkParser:
    """Parses chunks of one file into typed rows and rejects."""

    def __init__(self, file: str, fields: tuple[Field, ...], delimiter: str, quoting: bool) -> None:
        self.file = file
        self.fields = fields
        self.names = [f.name for f in fields]
        self.delimiter = delimiter
        self.quoting = quoting
        self.required = [f.name for f in fields if f.required]

    def _read(self, data: bytes, typed: bool, invalid: list[tuple[int, str, int]]) -> pa.Table:
        def on_invalid(row: pacsv.InvalidRow) -> str:
            invalid.append((int(row.number), str(row.text), int(row.actual_columns)))
            return "skip"

        types = {f.name: (f.type if typed else pa.string()) for f in self.fields}
        return pacsv.read_csv(
            pa.BufferReader(data),
            read_options=pacsv.ReadOptions(
                column_names=self.names, use_threads=False, block_size=max(1 << 20, len(data) + 1)
            ),
            parse_options=pacsv.ParseOptions(
                delimiter=self.delimiter,
                quote_char='"' if self.quoting else False,
                ignore_empty_lines=False,
                invalid_row_handler=on_invalid,
            ),
            convert_options=pacsv.ConvertOptions(
                column_types=types,
                strings_can_be_null=True,
                null_values=[""],
                true_values=TRUE_VALUES,
                false_values=FALSE_VALUES,
            ),
        )

    def parse(self, data: bytes, first_line: int, line_numbers: bool) -> ReadResult:
        invalid: list[tuple[int, str, int]] = []
        reasons: list[str] | None = None
        try:
            table = self._read(data, True, invalid)
            bad = np.zeros(table.num_rows, dtype=bool)
        except pa.ArrowInvalid:
            invalid.clear()
            table, bad, reasons = convert_table(self._read(data, False, invalid), self.fields)
        total = _line_count(data)
        lines = np.delete(np.arange(first_line, first_line + total), [n - 1 for n, _, _ in invalid])
        if len(lines) != table.num_rows:  # pragma: no cover - Arrow counts rows as lines
            raise RuntimeError(f"{self.file}: {table.num_rows} rows for {len(lines)} lines")
        reject_lines = [first_line + n - 1 for n, _, _ in invalid]
        reject_reasons = [
            f"expected {len(self.fields)} fields, found {count}" for _, _, count in invalid
        ]
        reject_texts: list[str | None] = [text.rstrip("\r") for _, text, _ in invalid]
        empty_required = np.zeros(table.num_rows, dtype=bool)
        missing: dict[int, list[str]] = collections.defaultdict(list)
        for name in self.required:
            nulls = table.column(name).is_null().to_numpy(zero_copy_only=False)
            if reasons is not None:
                nulls &= ~bad  # a value that did not convert is reported as such, not as empty
            for row in np.flatnonzero(nulls):
                missing[int(row)].append(name)
            empty_required |= nulls
        rejected = bad | empty_required
        for row in np.flatnonzero(rejected):
            text = _line_text(data, int(lines[row]) - first_line)
            if text == "":
                reason = "empty line"
            elif reasons is not None and reasons[row]:
                reason = reasons[row]
            else:
                reason = "required field empty: " + ", ".join(missing[int(row)])
            reject_lines.append(int(lines[row]))
            reject_reasons.append(reason)
            reject_texts.append(text)
        if rejected.any():
            keep = pa.array(~rejected)
            table = table.filter(keep)
            lines = lines[~rejected]
        if line_numbers:
            table = table.append_column(LINE_COLUMN, pa.array(lines, pa.int64()))
        rejects = rejects_table(self.file, reject_lines, reject_reasons, reject_texts)
        return ReadResult(table, concat_rejects([rejects]))


def _parser(path: Path, spec: SourceFile, batch: int) -> _ChunkParser:
    delimiter = "|" if spec.format == "pipe" else ","
    return _ChunkParser(path.name, spec.fields_for(batch), delimiter, quoting=delimiter == ",")


def _workers(threads: bool) -> int:
    return max(1, min(4, os.cpu_count() or 1)) if threads else 1


def iter_delimited(
    path: Path,
    spec: SourceFile,
    batch: int,
    *,
    line_numbers: bool = False,
    chunk_bytes: int = CHUNK_BYTES,
    threads: bool = True,
) -> Iterator[ReadResult]:
    """Yield the file as a sequence of :class:`ReadResult`, one per chunk, in file order; every
    table has the registry's schema (plus ``_line`` when asked)."""
    parser = _parser(path, spec, batch)
    schema = _schema(spec, batch, line_numbers)
    chunks = iter_chunks(path, chunk_bytes=chunk_bytes, skip_header=spec.header)
    workers = _workers(threads)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        pending: collections.deque[Future[ReadResult]] = collections.deque()
        for data, first in chunks:
            pending.append(pool.submit(parser.parse, data, first, line_numbers))
            if len(pending) > workers:
                yield _typed(pending.popleft().result(), schema)
        while pending:
            yield _typed(pending.popleft().result(), schema)


def _schema(spec: SourceFile, batch: int, line_numbers: bool) -> pa.Schema:
    schema = spec.schema(batch)
    if line_numbers:
        schema = schema.append(pa.field(LINE_COLUMN, pa.int64(), nullable=False))
    return schema


def _typed(result: ReadResult, schema: pa.Schema) -> ReadResult:
    return ReadResult(result.table.cast(schema), result.rejects)


def read_delimited(
    path: Path,
    spec: SourceFile,
    batch: int,
    *,
    line_numbers: bool = False,
    chunk_bytes: int = CHUNK_BYTES,
    threads: bool = True,
) -> ReadResult:
    """Read a whole delimited file into one table (one chunk per parsed piece) and its rejects."""
    parts = list(
        iter_delimited(
            path, spec, batch, line_numbers=line_numbers, chunk_bytes=chunk_bytes, threads=threads
        )
    )
    schema = _schema(spec, batch, line_numbers)
    tables = [p.table for p in parts]
    table = pa.concat_tables(tables) if tables else schema.empty_table()
    return ReadResult(table, concat_rejects(p.rejects for p in parts))
