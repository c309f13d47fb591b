"""A DuckDB warehouse file as a migration target, through :class:`warehouse.duckdb.DuckDBDriver`.

SQLAlchemy (the duckdb-engine dialect) compiles the DDL from the layout's metadata; it runs, and
the rows travel (Arrow tables registered as views, appended with one ``INSERT ... SELECT``),
through the driver's one plain DuckDB connection (a duckdb-engine connection would carry another
configuration, which DuckDB refuses while another connection of the process holds the file). The
file has one writing process, so the stream lock is a lock of this process.

The file's database instance runs user queries too (the query service's reader joins it: one
instance per file and process), so the driver is opened *fenced*
(:meth:`warehouse.duckdb.DuckDBDriver.fence`: external access off, a memory limit, a thread
count) when the target connects.

Idle detection: DuckDB has no view of other clients, so a warehouse file counts as busy only while
:meth:`DuckDBTarget.mark_busy` says so (the query service marks its reads).
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa

from migration.schema import WarehouseLayout, create_statements
from migration.targets.base import BaseTarget
from staging.layout import q
from warehouse.duckdb import DuckDBDriver

if TYPE_CHECKING:
    import duckdb

    from migration.reader import ReaderOptions, WarehouseReader


#: The layout's DDL compiled for DuckDB, once per layout (a layout is immutable): compiling it
#: through SQLAlchemy costs ~15 ms, paid on every open (a bootstrap opens a twin of its peer).
_DDL: weakref.WeakKeyDictionary[WarehouseLayout, list[str]] = weakref.WeakKeyDictionary()
_DDL_LOCK = threading.Lock()


def layout_ddl(layout: WarehouseLayout) -> list[str]:
    """``CREATE ... IF NOT EXISTS`` statements of ``layout`` for DuckDB (compiled once)."""
    with _DDL_LOCK:
        statements = _DDL.get(layout)
        if statements is None:
            from duckdb_engine import Dialect

            statements = create_statements(
                layout.metadata, Dialect(), layout.schemas, row_keys=False
            )
            _DDL[layout] = statements
        return list(statements)


class DuckDBTarget(BaseTarget):
    """See the module docstring."""

    name = "duckdb"

    def __init__(
        self,
        layout: WarehouseLayout,
        path: Path | str,
        *,
        memory_limit: str = "1GB",
        threads: int = 2,
    ) -> None:
        self._driver = DuckDBDriver(path, memory_limit=memory_limit, threads=threads, fenced=True)
        super().__init__(layout, self._driver)
        self.path = Path(path)
        self.memory_limit = memory_limit
        self.threads = threads
        self._lock = threading.RLock()
        self._busy_until = 0.0

    def twin(self) -> DuckDBTarget:
        """Another target on the same file (it joins the DuckDB instance this process holds)."""
        return DuckDBTarget(
            self.layout, self.path, memory_limit=self.memory_limit, threads=self.threads
        )

    def _connect(self) -> None:
        driver = self._driver
        driver.connect()
        try:
            driver.execute_script(layout_ddl(self.layout))
            # Loads append to index-free delta tables; checkpointing belongs to the merges (which
            # rewrite the full tables anyway), not to whichever load crosses DuckDB's 16 MB default.
            driver.execute("SET checkpoint_threshold = '256MB'")
        except BaseException:
            driver.close()
            raise

    def sql_dialect(self) -> sa.engine.Dialect:
        from duckdb_engine import Dialect

        return Dialect()

    def create_missing_tables(self) -> None:
        for statement in layout_ddl(self.layout):
            self.execute(statement)

    @property
    def connection(self) -> duckdb.DuckDBPyConnection:
        """The driver's DuckDB connection (tests inspect the file through it)."""
        return self._driver.connection

    def begin(self) -> None:
        self._lock.acquire()
        try:
            super().begin()
        except BaseException:
            self._lock.release()
            raise

    def _lock_stream(self) -> None:
        """The process lock :meth:`begin` took is the stream's lock (one writing process)."""

    def commit(self) -> None:
        try:
            super().commit()
        finally:
            self._lock.release()

    def rollback(self) -> None:
        try:
            super().rollback()
        finally:
            with suppress(RuntimeError):  # not held: the failure came before BEGIN
                self._lock.release()

    def _upsert(
        self, full: str, rows: str, columns: tuple[str, ...], row_id: tuple[str, ...]
    ) -> int:
        """Delete the rows being replaced, then insert: DuckDB's ``ON CONFLICT DO UPDATE`` that
        sets every column of a wide table is pathologically slow (measured on TPC-DI's Prospect,
        15 k rows of 28 columns: 20 s against 0.1 s for the delete and insert), and the two
        statements run in the merge's transaction, so the result is the same."""
        cols = ", ".join(q(c) for c in columns)
        match = " AND ".join(f"f.{q(c)} = u.{q(c)}" for c in row_id)
        self.execute(f"DELETE FROM {full} AS f USING {rows} u WHERE {match}")
        return self.execute(f"INSERT INTO {full} ({cols}) SELECT {cols} FROM {rows} u")

    def _after_merge(self) -> None:
        """Checkpoint after a merge (loads leave it to the merges, see ``_connect``); skipped
        while another transaction is open."""
        with self._lock:
            self._driver.reclaim([])

    def mark_busy(self, seconds: float) -> None:
        """Count the warehouse as busy (a reader is working) for the next ``seconds``."""
        self._busy_until = max(self._busy_until, time.monotonic() + seconds)

    def busy(self) -> bool:
        return time.monotonic() < self._busy_until

    def reader(
        self, ensure_layout: Callable[[], object], options: ReaderOptions
    ) -> WarehouseReader:
        from migration.reader import DuckDBReader

        return DuckDBReader(self.layout, ensure_layout, self._driver, self.mark_busy)
