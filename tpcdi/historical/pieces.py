"""Fact tables from Spark to the warehouses in bounded pieces.

Spark writes each fact table of the historical load as Parquet files under the load's work
directory (:meth:`tpcdi.historical.spark.SparkWork.write`): its tasks write them wherever they
run, so no fact row passes through the Spark driver. The load then reads each table back as Arrow
record batches of at most :data:`PIECE_ROWS` rows (pyarrow's dataset scanner: one file at a time,
a couple of batches ahead), keeps the rows whose references resolved (:attr:`FactOutput.required`;
the others became DImessages alerts on Spark), casts them to the warehouse's columns and appends
them piece by piece to every target (:func:`load_fact`). Memory is bounded by the piece, not by
the table; :class:`PieceLog` records every table's pieces and the largest one, which the run's
report names.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import reduce
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from tpcdi.warehouse.exceptions import WarehouseMismatch
from tpcdi.warehouse.tables import WarehouseType
from tpcdi.warehouse.warehouse import Warehouse

#: Most rows of one piece moved into the warehouse.
PIECE_ROWS = 1 << 17

ARROW_TYPES: dict[WarehouseType, pa.DataType] = {
    "int64": pa.int64(),
    "float64": pa.float64(),
    "bool": pa.bool_(),
    "string": pa.string(),
    "timestamp": pa.timestamp("us"),
    "date": pa.date32(),
    "time": pa.time32("s"),
}


def conform(rows: pa.Table, columns: dict[str, str]) -> pa.Table:
    """``rows`` with exactly ``columns`` (in order), cast to their Arrow types; raises
    :class:`WarehouseMismatch` naming a column the rows lack."""
    arrays = []
    for name, kind in columns.items():
        target = ARROW_TYPES[kind]  # type: ignore[index]
        if name not in rows.column_names:
            raise WarehouseMismatch(f"historical load produced no column {name!r}")
        column = rows.column(name)
        if pa.types.is_timestamp(column.type) and column.type.tz is not None:
            column = pc.cast(column, pa.timestamp("us", tz=column.type.tz)).cast(pa.timestamp("us"))
        arrays.append(column.cast(target))
    return pa.Table.from_arrays(arrays, names=list(columns))


@dataclass(frozen=True)
class FactOutput:
    """One fact table as Spark wrote it: Parquet files under ``path`` holding every row the
    transformation produced, the warehouse's ``columns`` (name -> type) among others; a row is
    loaded when every ``required`` column is set."""

    table: str
    path: Path
    columns: dict[str, str]
    required: tuple[str, ...] = ()

    def files(self) -> list[str]:
        """The Parquet files, in name order (Spark's part files)."""
        return sorted(str(p) for p in self.path.glob("*.parquet"))

    def loadable(self) -> ds.Expression | None:
        """The filter of the rows to load (None: every row)."""
        if not self.required:
            return None
        tests = [pc.field(c).is_valid() for c in self.required]
        return reduce(lambda a, b: a & b, tests)

    def pieces(self, *, rows: int = PIECE_ROWS) -> Iterator[pa.Table]:
        """The rows to load, conformed to :attr:`columns`, as tables of at most ``rows`` rows
        (empty pieces skipped)."""
        files = self.files()
        if not files:
            return
        dataset = ds.dataset(files, format="parquet")
        scanner = dataset.scanner(
            columns=list(self.columns),
            filter=self.loadable(),
            batch_size=rows,
            batch_readahead=2,
            fragment_readahead=1,
            use_threads=True,
        )
        for batch in scanner.to_batches():
            if batch.num_rows:
                yield conform(pa.Table.from_batches([batch]), self.columns)


@dataclass
class PieceLog:
    """What moved into the warehouse: per table the pieces, rows and bytes (Arrow buffers), and
    the largest piece of all (by bytes)."""

    tables: dict[str, dict[str, int]] = field(default_factory=dict)
    largest: dict[str, Any] = field(default_factory=dict)

    def record(self, table: str, piece: pa.Table) -> None:
        entry = self.tables.setdefault(table, {"pieces": 0, "rows": 0, "bytes": 0})
        size = int(piece.nbytes)
        entry["pieces"] += 1
        entry["rows"] += piece.num_rows
        entry["bytes"] += size
        if size > int(self.largest.get("bytes", -1)):
            self.largest = {"table": table, "rows": piece.num_rows, "bytes": size}

    def as_json(self) -> dict[str, Any]:
        return {"piece_rows_max": PIECE_ROWS, "largest": self.largest, "tables": self.tables}


def load_fact(warehouse: Warehouse, output: FactOutput, log: PieceLog) -> int:
    """Append ``output``'s loadable rows to its table in every target, piece by piece; the rows
    loaded. A failure leaves the pieces before it loaded (the run starts afresh anyway:
    initialization drops the warehouse)."""
    loaded = 0
    for piece in output.pieces():
        warehouse.load(output.table, piece)
        log.record(output.table, piece)
        loaded += piece.num_rows
    return loaded
