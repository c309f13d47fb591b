"""The historical load's moves between the driver, Spark and the files in its work directory.

Everything crosses as Parquet files, never as rows through the driver:

* in: the small dimensions are written by pyarrow from the driver's Arrow tables
  (:meth:`SparkWork.view`); the big Batch1 sources were streamed to Parquet while they were read
  (:mod:`tpcdi.historical.inputs`) and are only scanned (:meth:`SparkWork.view_parquet`). Measured
  at SF=3 before: DailyMarket (1.28 M rows) took 7.4 s through ``createDataFrame`` (the rows
  travel through the driver, which also keeps them in its heap) and 0.2 s to write plus a
  parallel scan as Parquet;
* out: a fact table is written by Spark's tasks as Parquet files (:meth:`SparkWork.write`), which
  the warehouse load reads back in bounded pieces (:mod:`tpcdi.historical.pieces`). Only small
  answers (alerts, the 52-week window seed, a count) come back with ``toArrow``
  (:meth:`SparkWork.arrow`).

The work directory must be the same path on the driver and on every Spark worker (one machine,
or a shared volume as in the compose stack).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

logger = logging.getLogger(__name__)

#: Parquet row groups Spark writes are cut at about this many bytes, so a reader's row group
#: (what pyarrow decodes at once) stays small.
ROW_GROUP_BYTES = 16 << 20
#: Most rows of one Parquet file Spark writes.
FILE_ROWS = 4_000_000


class SparkWork:
    """A SparkSession and the load's work directory (``in/`` for the driver's tables, ``out/``
    for what Spark writes)."""

    def __init__(self, session: Any, workdir: Path) -> None:
        self.session = session
        self.workdir = Path(workdir)
        (self.workdir / "in").mkdir(parents=True, exist_ok=True)
        (self.workdir / "out").mkdir(parents=True, exist_ok=True)

    def view(self, name: str, table: pa.Table) -> None:
        """Temporary view ``name`` over ``table`` (written as a Parquet file)."""
        import pyarrow.parquet as pq

        path = self.workdir / "in" / f"{name}.parquet"
        pq.write_table(table, path, compression="none", row_group_size=256 * 1024)
        self.view_parquet(name, path)

    def view_parquet(self, name: str, path: Path) -> None:
        """Temporary view ``name`` over the Parquet file or directory ``path``."""
        self.session.read.parquet(str(path)).createOrReplaceTempView(name)

    def sql(self, query: str) -> Any:
        return self.session.sql(query)

    def arrow(self, query: str) -> pa.Table:
        """The answer of ``query`` in the driver: for small answers only."""
        started = time.perf_counter()
        table: pa.Table = self.sql(query).toArrow()
        logger.debug(
            "spark query rows=%s seconds=%.2f: %s",
            table.num_rows,
            time.perf_counter() - started,
            " ".join(query.split())[:60],
        )
        return table

    def write(self, name: str, query: str, *, view: bool = True) -> Path:
        """Run ``query`` on Spark and let its tasks write the rows as Parquet files under
        ``out/<name>``; with ``view``, temporary view ``name`` then scans them. The directory."""
        started = time.perf_counter()
        path = self.workdir / "out" / name
        (
            self.sql(query)
            .write.mode("overwrite")
            .option("parquet.block.size", str(ROW_GROUP_BYTES))
            .option("maxRecordsPerFile", str(FILE_ROWS))
            .parquet(str(path))
        )
        if view:
            self.view_parquet(name, path)
        logger.info(
            "spark wrote %s files=%s seconds=%.2f",
            name,
            len(list(path.glob("*.parquet"))),
            time.perf_counter() - started,
        )
        return path

    def read(self, name: str, query: str) -> pa.Table:
        """``query`` written by Spark (:meth:`write`) and read back by pyarrow: for answers too
        big for ``toArrow`` through the driver's heap (the engine's seed)."""
        import pyarrow.dataset as ds

        path = self.write(name, query, view=False)
        files = sorted(str(p) for p in path.glob("*.parquet"))
        if not files:
            empty: pa.Table = self.sql(query).limit(0).toArrow()
            return empty
        return ds.dataset(files, format="parquet").to_table()
