"""The ``changes`` stream: every record of an incremental batch as one ordered event stream.

An incremental update (Batch2, Batch3) is eight files. Their records travel through Kafka as one
stream, file after file in dependency order (:data:`KINDS`: prospects, customers, accounts, trades,
cash, holdings, prices, watches), so that however the pipeline cuts the stream into engine batches,
a record's dimensions are always applied before it (S-Store's CreateAccount -> CreateTrades order,
across batch boundaries too). One event has the union of the files' columns (null where its file
has no such column) plus:

* ``kind`` — the file (``Trade``, ``Customer``…), ``batchid`` — the TPC-DI BatchID of the update,
  ``batchdate`` — its BatchDate, ``line`` — the record's 1-based line in its file;
* ``_ts`` — the event time: the record's own timestamp (T_DTS, CT_DTS, W_DTS, DM_DATE) or, for
  files without one (customers, accounts, prospects, holdings), the batch date at midnight;
* ``_pos`` — ``batchid * 10**10 + file index * 10**8 + line``: unique, increasing in stream order,
  and it says where a record came from.

Lines the readers reject (wrong field count, bad value, empty required field) travel with the
stream as rejects and land in the staging dead-letter table with the file, the line and the reason.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from etl_dataflows.types import ColumnType, column_type_of
from ingest.sources import BaseSource, Reject, SourceChunk
from tpcdi.exceptions import SourceNotFound
from tpcdi.readers import iter_file, read_batch_date, source_file

#: The files of an incremental batch, in stream order, with their event-time column.
KINDS: tuple[tuple[str, str, str | None], ...] = (
    ("Prospect", "Prospect.csv", None),
    ("Customer", "Customer.txt", None),
    ("Account", "Account.txt", None),
    ("Trade", "Trade.txt", "T_DTS"),
    ("CashTransaction", "CashTransaction.txt", "CT_DTS"),
    ("HoldingHistory", "HoldingHistory.txt", None),
    ("DailyMarket", "DailyMarket.txt", "DM_DATE"),
    ("WatchHistory", "WatchHistory.txt", "W_DTS"),
)
KIND_NAMES: tuple[str, ...] = tuple(k for k, _, _ in KINDS)
FILE_OF: dict[str, str] = {k: f for k, f, _ in KINDS}
#: Files an incremental batch directory must hold (the eight data files and BatchDate.txt).
REQUIRED_FILES: tuple[str, ...] = (*(f for _, f, _ in KINDS), "BatchDate.txt")

POS_BATCH = 10**10
POS_FILE = 10**8
MICROS_PER_DAY = 86_400_000_000


def _union_columns() -> dict[str, ColumnType]:
    columns: dict[str, ColumnType] = {
        "kind": "string",
        "batchid": "int64",
        "batchdate": "date",
        "line": "int64",
    }
    for _, name, _ in KINDS:
        for field in source_file(name).schema(2):
            kind = column_type_of(field.type)
            if columns.setdefault(field.name, kind) != kind:
                raise ValueError(f"column {field.name} has two types in the incremental files")
    return columns


#: The columns of a ``changes`` event (without ``_ts``/``_pos``).
CHANGE_COLUMNS: dict[str, ColumnType] = _union_columns()


def columns_of_kind(kind: str) -> dict[str, ColumnType]:
    """The columns of ``changes`` an event of ``kind`` can have a value in (its file's and the
    four every event has), in :data:`CHANGE_COLUMNS` order."""
    own = {field.name for field in source_file(FILE_OF[kind]).schema(2)}
    own |= {"kind", "batchid", "batchdate", "line"}
    return {name: kind_ for name, kind_ in CHANGE_COLUMNS.items() if name in own}


def position(batch: int, file_index: int, line: int) -> int:
    """The ``_pos`` of line ``line`` of file ``file_index`` of batch ``batch``."""
    return batch * POS_BATCH + file_index * POS_FILE + line


def locate(pos: int) -> tuple[int, str, int]:
    """``(batchid, file, line)`` of a ``_pos``."""
    batch, rest = divmod(pos, POS_BATCH)
    index, line = divmod(rest, POS_FILE)
    return batch, KINDS[index][1], line


def missing_files(directory: Path, names: tuple[str, ...] = REQUIRED_FILES) -> list[str]:
    """The required files ``directory`` lacks (all of them when it does not exist)."""
    return [n for n in names if not (Path(directory) / n).is_file()]


@dataclass
class ChangesSource(BaseSource):
    """One incremental batch directory as the ``changes`` stream (see the module docstring).

    Several batches go through the same stream one after the other; their positions never
    overlap (``_pos`` starts at ``batchid * 10**10``), so a collector resumes correctly across
    them and within one.
    """

    directory: Path
    batch: int

    def __post_init__(self) -> None:
        super().__init__(CHANGE_COLUMNS, None)
        self.directory = Path(self.directory)
        missing = missing_files(self.directory)
        if missing:
            raise SourceNotFound(
                f"{self.directory} lacks {', '.join(missing)}", path=str(self.directory)
            )
        self.batch_date = read_batch_date(self.directory / "BatchDate.txt")

    @property
    def identity(self) -> str:
        return "tpcdi-changes"

    def read(self, start: int = 0) -> Iterator[SourceChunk]:
        last = start - 1
        for index, (kind, name, _) in enumerate(KINDS):
            first = position(self.batch, index, 0)
            if position(self.batch, index + 1, 0) <= start:
                continue
            for piece in iter_file(self.directory / name, batch=self.batch, line_numbers=True):
                chunk = events_of(
                    kind, index, piece.table, piece.rejects, self.batch, self.batch_date
                )
                if start > position(self.batch, index, 0):  # a resume inside this file
                    keep = pc.greater_equal(chunk.events.column("_pos"), start)
                    chunk.events = chunk.events.filter(keep)  # (a copy of every column)
                    chunk.rejects = [r for r in chunk.rejects if r[0] >= start]
                if chunk.events.num_rows or chunk.rejects:
                    last = max(last, chunk.last_pos)
                    chunk.last_pos = last
                    yield chunk
            last = max(last, first)
        yield SourceChunk(self.schema.empty_table(), last_pos=last, punctuation=True)


def _repeated_string(value: str, n: int) -> pa.Array:
    """``value`` ``n`` times, built as a dictionary of one (``pa.repeat`` of a string, and a
    Python list, cost ~50x as much)."""
    indices = pa.array(np.zeros(n, dtype=np.int32))
    return pa.DictionaryArray.from_arrays(indices, pa.array([value])).cast(pa.string())


def events_of(
    kind: str,
    file_index: int,
    table: pa.Table,
    rejects: pa.Table,
    batch: int,
    batch_date: datetime.date,
) -> SourceChunk:
    """The ``changes`` events (and rejects) of rows of one file; ``table`` has a ``_line``."""
    n = table.num_rows
    lines = table.column("_line").combine_chunks() if n else pa.array([], pa.int64())
    arrays: list[pa.Array] = []
    nulls: dict[ColumnType, pa.Array] = {}  # one all-null array per type, shared by its columns
    for name, column_type in CHANGE_COLUMNS.items():
        if name == "kind":
            arrays.append(_repeated_string(kind, n))
        elif name == "batchid":
            arrays.append(pa.array(np.full(n, batch, dtype=np.int64)))
        elif name == "batchdate":
            arrays.append(pa.repeat(pa.scalar(batch_date, pa.date32()), n))
        elif name == "line":
            arrays.append(lines)
        elif name in table.column_names:
            arrays.append(table.column(name).combine_chunks())
        else:
            from etl_dataflows.types import arrow_type

            if column_type not in nulls:
                nulls[column_type] = pa.nulls(n, arrow_type(column_type))
            arrays.append(nulls[column_type])
    time_column = dict((k, t) for k, _, t in KINDS)[kind]
    midnight = (batch_date - datetime.date(1970, 1, 1)).days * MICROS_PER_DAY
    if time_column is None or n == 0:
        ts = pa.array(np.full(n, midnight, dtype=np.int64))
    else:
        values = table.column(time_column)
        if pa.types.is_date(values.type):
            days = pc.cast(pc.cast(values, pa.date32()), pa.int32()).to_numpy(zero_copy_only=False)
            ts = pa.array(days.astype(np.int64) * MICROS_PER_DAY)
        else:
            ts = pc.cast(pc.cast(values, pa.timestamp("us")), pa.int64()).combine_chunks()
    base = position(batch, file_index, 0)
    pos = pc.add(lines, base) if n else pa.array([], pa.int64())
    events = pa.Table.from_arrays([*arrays, ts, pos], names=[*CHANGE_COLUMNS, "_ts", "_pos"])
    reject_rows: list[Reject] = [
        Reject(
            base + int(r["line"]), f"{r['file']} line {r['line']}: {r['reason']}", r["text"] or ""
        )
        for r in rejects.to_pylist()
    ]
    last = base + (int(pc.max(lines).as_py()) if n else 0)
    if reject_rows:
        last = max(last, max(r[0] for r in reject_rows))
    return SourceChunk(events, reject_rows, last_pos=last)
