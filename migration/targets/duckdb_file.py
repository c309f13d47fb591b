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
from migration.targets.base import BaseTarget, BaseWarehouseFile, Hook
from staging.layout import q
from warehouse.duckdb import DuckDBDriver, replace_file, wal_path, writer_lock

if TYPE_CHECKING:
    import duckdb

    from migration.reader import ReaderOptions, WarehouseReader


#: A merge leaving at least this much write-ahead log checkpoints it (DuckDB's own threshold, set
#: to 256 MB at connect, is the backstop).
CHECKPOINT_WAL_BYTES = 64 * 1024 * 1024

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
        self._lock = writer_lock(self.path)
        self._busy_until = 0.0

    def twin(self) -> DuckDBTarget:
        """Another target on the same file (it joins the DuckDB instance this process holds)."""
        return DuckDBTarget(
            self.layout, self.path, memory_limit=self.memory_limit, threads=self.threads
        )

    def whole_file(self) -> DuckDBWarehouseFile:
        return DuckDBWarehouseFile(self, self._driver)

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
        """The file's writer lock :meth:`begin` took is the stream's lock (one writing
        process)."""

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

    def _merge_unique(
        self, full: str, delta: str, columns: tuple[str, ...], row_id: tuple[str, ...]
    ) -> int:
        """The delta, its own newest, replaces rows by delete and insert as :meth:`_upsert`
        does: DuckDB's ``UPDATE ... FROM`` of wide rows is slower still (TPC-DI's DimCustomer,
        1,000 of 6,600 rows of 36 columns: ~1.2 s against ~12 ms)."""
        return self._upsert(full, delta, columns, row_id)

    def _after_merge(self, emptied: set[str]) -> None:
        """Checkpoint after a merge once the write-ahead log holds
        :data:`CHECKPOINT_WAL_BYTES` (loads leave it to the merges, see ``_connect``); skipped
        while another transaction is open. A checkpoint after every merge cost more than the
        merge itself on small ones (TPC-DI's daily feed at SF 3: 0.1-0.7 s against ~0.3 s, its
        CPU taken from the other warehouse's merge); the row groups several merges touch are
        rewritten once."""
        wal = wal_path(self.path)
        if wal.exists() and wal.stat().st_size >= CHECKPOINT_WAL_BYTES:
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


class DuckDBWarehouseFile(BaseWarehouseFile):
    """The file of a :class:`DuckDBTarget` (see :class:`~migration.targets.base.BaseWarehouseFile`).
    The relations a layout has are those its DDL creates (:func:`layout_ddl`)."""

    def __init__(self, target: DuckDBTarget, driver: DuckDBDriver) -> None:
        self.target = target
        self.driver = driver
        self.path = target.path

    def copy_to(self, dest: Path, hook: Hook | None = None) -> None:
        self.driver.copy_file(dest, hook)

    def target_on(self, path: Path) -> DuckDBTarget:
        t = self.target
        return DuckDBTarget(t.layout, path, memory_limit=t.memory_limit, threads=t.threads)

    def _foreign(self) -> list[tuple[str, str, str | None]]:
        """``(kind, schema, name)`` of each foreign relation (``name`` None for a schema)."""
        layout = self.target.layout
        ours = {(str(t.schema), t.name) for t in layout.metadata.tables.values()}
        found = self.target.fetch(
            "WITH here AS (SELECT current_database() AS db) "
            "SELECT 'MACRO', schema_name, function_name FROM duckdb_functions(), here "
            "WHERE database_name = db AND NOT internal AND function_type = 'macro' "
            "UNION ALL SELECT 'MACRO TABLE', schema_name, function_name FROM duckdb_functions(), "
            "here WHERE database_name = db AND NOT internal AND function_type = 'table_macro' "
            "UNION ALL SELECT 'VIEW', schema_name, view_name FROM duckdb_views(), here "
            "WHERE database_name = db AND NOT internal AND NOT temporary "
            "UNION ALL SELECT 'TABLE', schema_name, table_name FROM duckdb_tables(), here "
            "WHERE database_name = db AND NOT internal AND NOT temporary "
            "UNION ALL SELECT 'SEQUENCE', schema_name, sequence_name FROM duckdb_sequences(), "
            "here WHERE database_name = db AND NOT temporary "
            "UNION ALL SELECT 'TYPE', schema_name, type_name FROM duckdb_types(), here "
            "WHERE database_name = db AND NOT internal "
            "UNION ALL SELECT 'SCHEMA', schema_name, NULL FROM duckdb_schemas(), here "
            "WHERE database_name = db AND NOT internal"
        )
        schemas = set(layout.schemas)
        out: list[tuple[str, str, str | None]] = []
        for kind, schema, name in found:
            if kind == "SCHEMA":
                if schema not in schemas:
                    out.append((kind, str(schema), None))
            elif kind != "TABLE" or (schema, name) not in ours:
                out.append((str(kind), str(schema), str(name)))
        return out

    def foreign_relations(self) -> list[str]:
        with self.target.guard():
            return [s if n is None else f"{s}.{n}" for _, s, n in self._foreign()]

    def drop_foreign_relations(self) -> list[str]:
        """Objects inside a foreign schema go with it (``CASCADE``); the others one by one,
        macros and views before the tables they may read."""
        foreign = self._foreign()
        gone = {s for kind, s, _ in foreign if kind == "SCHEMA"}
        order = ("MACRO", "MACRO TABLE", "VIEW", "TABLE", "SEQUENCE", "TYPE")
        dropped: list[str] = []
        for kind in order:
            for k, schema, name in foreign:
                if k == kind and schema not in gone and name is not None:
                    self.target.execute(f"DROP {kind} {q(schema)}.{q(name)}")
                    dropped.append(f"{schema}.{name}")
        for schema in sorted(gone):
            self.target.execute(f"DROP SCHEMA {q(schema)} CASCADE")
            dropped.append(schema)
        return dropped

    def replace_with(self, source: Path) -> None:
        self.target.close()
        replace_file(self.path, source, self.target.name)
