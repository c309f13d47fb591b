"""Reading Batch1 for the historical load: every file through :mod:`tpcdi.readers`, in threads.

The readers type every column (Arrow) and reject bad lines with the file, line and reason; the
rejects become DImessages rows (MessageType ``Reject``, clause 3.2.8) instead of stopping the load.
A Batch1 directory that lacks any file the load needs fails at start with the list.

With a ``spill`` directory, the big fact sources (:data:`SPILLED`: the ones that grow with the
scale factor into the tens of millions of rows) never become whole tables in memory: each is read
in chunks of whole lines and every chunk is appended to a Parquet file there as it is parsed
(:attr:`HistoricalInputs.parquet`), for Spark to scan; memory holds a few chunks per file, not the
file. The dimension sources stay in memory (:attr:`HistoricalInputs.tables`).
"""

from __future__ import annotations

import datetime
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from tpcdi.exceptions import SourceNotFound
from tpcdi.readers import iter_file, read_batch_date, read_batch_finwire, read_file
from tpcdi.readers.finwire import finwire_files
from tpcdi.readers.rejects import concat_rejects

logger = logging.getLogger(__name__)

#: The files of Batch1 the historical load reads (besides the FINWIRE quarter files).
BATCH1_FILES: tuple[str, ...] = (
    "BatchDate.txt",
    "CashTransaction.txt",
    "CustomerMgmt.xml",
    "DailyMarket.txt",
    "Date.txt",
    "HR.csv",
    "HoldingHistory.txt",
    "Industry.txt",
    "Prospect.csv",
    "StatusType.txt",
    "TaxRate.txt",
    "Time.txt",
    "Trade.txt",
    "TradeHistory.txt",
    "TradeType.txt",
    "WatchHistory.txt",
)
_WITH_LINES = {"Trade.txt", "CashTransaction.txt", "HoldingHistory.txt", "WatchHistory.txt"}
#: The sources streamed to Parquet with a ``spill`` directory.
SPILLED: tuple[str, ...] = (
    "CashTransaction.txt",
    "DailyMarket.txt",
    "HoldingHistory.txt",
    "Trade.txt",
    "TradeHistory.txt",
    "WatchHistory.txt",
)


@dataclass
class HistoricalInputs:
    """Every Batch1 source as a typed Arrow table (``tables`` by file name; FINWIRE records as
    ``CMP``, ``SEC``, ``FIN``) or, when spilled, as a Parquet file (``parquet`` by file name, its
    rows in ``spilled_rows``), the batch date, the rejects and the rows read per file."""

    batch_date: datetime.date
    tables: dict[str, pa.Table] = field(default_factory=dict)
    rejects: pa.Table = field(default_factory=lambda: concat_rejects([]))
    seconds: float = 0.0
    parquet: dict[str, Path] = field(default_factory=dict)
    spilled_rows: dict[str, int] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        """Source rows read (FINWIRE records counted once)."""
        return int(sum(t.num_rows for t in self.tables.values()) + sum(self.spilled_rows.values()))


def missing_batch1_files(directory: Path) -> list[str]:
    """The files the historical load needs that ``directory`` lacks."""
    directory = Path(directory)
    if not directory.is_dir():
        return [*BATCH1_FILES, "FINWIRE<yyyy>Q<n>"]
    missing = [n for n in BATCH1_FILES if not (directory / n).is_file()]
    if not finwire_files(directory):
        missing.append("FINWIRE<yyyy>Q<n>")
    return missing


def spill_file(path: Path, out: Path, *, line_numbers: bool) -> tuple[int, pa.Table]:
    """Stream the delimited source ``path`` into the Parquet file ``out`` (one row group per
    parsed chunk); the rows written and the rejects."""
    import pyarrow.parquet as pq

    rows = 0
    rejects = []
    writer: pq.ParquetWriter | None = None
    try:
        for piece in iter_file(path, batch=1, line_numbers=line_numbers):
            if writer is None:
                writer = pq.ParquetWriter(out, piece.table.schema, compression="none")
            writer.write_table(piece.table)
            rows += piece.table.num_rows
            rejects.append(piece.rejects)
        if writer is None:  # no chunk at all: an empty file
            empty = read_file(path, batch=1, line_numbers=line_numbers)
            writer = pq.ParquetWriter(out, empty.table.schema, compression="none")
            rejects.append(empty.rejects)
    finally:
        if writer is not None:
            writer.close()
    return rows, concat_rejects(rejects)


def read_batch1(
    directory: Path, *, threads: int = 4, spill: Path | None = None
) -> HistoricalInputs:
    """Read Batch1 (see the module docstring; ``spill``: where the big sources go as Parquet);
    raises :class:`~tpcdi.exceptions.SourceNotFound` listing every missing file."""
    directory = Path(directory)
    missing = missing_batch1_files(directory)
    if missing:
        raise SourceNotFound(
            f"{directory} lacks {len(missing)} file(s) the historical load needs: "
            + ", ".join(missing),
            path=str(directory),
        )
    started = time.perf_counter()
    batch_date = read_batch_date(directory / "BatchDate.txt")
    names = [n for n in BATCH1_FILES if n != "BatchDate.txt"]
    # the slowest readers first, so the pool finishes evenly
    names.sort(key=lambda n: (directory / n).stat().st_size, reverse=True)
    inputs = HistoricalInputs(batch_date)
    rejects = []
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="tpcdi-read") as pool:
        finwire = pool.submit(read_batch_finwire, directory)
        spilled = {}
        if spill is not None:
            spill.mkdir(parents=True, exist_ok=True)
            for n in SPILLED:
                inputs.parquet[n] = spill / f"{Path(n).stem}.parquet"
                spilled[n] = pool.submit(
                    spill_file, directory / n, inputs.parquet[n], line_numbers=n in _WITH_LINES
                )
        futures = {
            n: pool.submit(read_file, directory / n, batch=1, line_numbers=n in _WITH_LINES)
            for n in names
            if n not in spilled
        }
        for name, future in futures.items():
            result = future.result()
            inputs.tables[name] = result.table
            rejects.append(result.rejects)
        for name, streamed in spilled.items():
            inputs.spilled_rows[name], spilled_rejects = streamed.result()
            rejects.append(spilled_rejects)
        fw = finwire.result()
        for kind in ("CMP", "SEC", "FIN"):
            inputs.tables[kind] = fw.tables[kind]
        rejects.append(fw.rejects)
    inputs.rejects = concat_rejects(rejects)
    inputs.seconds = time.perf_counter() - started
    logger.info(
        "read batch1 rows=%s rejects=%s seconds=%.2f",
        inputs.rows,
        inputs.rejects.num_rows,
        inputs.seconds,
    )
    return inputs
