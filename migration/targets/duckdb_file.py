"""A DuckDB warehouse file as a migration target: rows moved as Arrow tables.

SQLAlchemy (the duckdb-engine dialect) compiles the DDL from the layout's metadata; it runs, and
the rows travel, through one plain DuckDB connection (a duckdb-engine connection would carry
another configuration, which DuckDB refuses while another connection of the process holds the
file): each Arrow table is registered as a
view and appended with one ``INSERT ... SELECT`` (DuckDB reads Arrow without copying it row by
row). The file has one writing process, so the stream lock is a lock of this process.

The file's database instance runs user queries too (the query service's reader joins it: one
instance per file and process), so :meth:`DuckDBTarget.lock_down` sets it up for that when the
target connects: ``enable_external_access = false`` (no file, network or extension from any SQL,
and DuckDB refuses to turn it back on while the instance lives; the rows the target loads arrive
as registered Arrow tables, which it still reads), a ``memory_limit`` (sorts and joins past it
spill to ``<file>.tmp``; DuckDB's default is 80% of RAM) and a thread count.

Idle detection: DuckDB has no view of other clients, so a warehouse file counts as busy only while
:meth:`DuckDBTarget.mark_busy` says so (the query service marks its reads).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import sqlalchemy as sa

from migration.exceptions import TargetUnavailable
from migration.schema import WarehouseLayout, create_statements
from migration.targets.base import BaseTarget, Hook
from staging.layout import q

logger = logging.getLogger(__name__)


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
        super().__init__(layout)
        self.path = Path(path)
        self.memory_limit = memory_limit
        self.threads = threads
        self._con: duckdb.DuckDBPyConnection | None = None
        self._lock = threading.RLock()
        self._busy_until = 0.0
        self._view = 0

    def _connect(self) -> None:
        from duckdb_engine import Dialect

        self.path.parent.mkdir(parents=True, exist_ok=True)
        con = duckdb.connect(str(self.path))
        try:
            con.execute("BEGIN TRANSACTION")
            for statement in create_statements(
                self.layout.metadata, Dialect(), self.layout.schemas, row_keys=False
            ):
                con.execute(statement)
            con.execute("COMMIT")
        except BaseException:
            con.close()
            raise
        self._con = con
        self.lock_down(con)
        # Loads append to index-free delta tables; checkpointing belongs to the merges (which
        # rewrite the full tables anyway), not to whichever load crosses DuckDB's 16 MB default.
        self._con.execute("SET checkpoint_threshold = '256MB'")

    def lock_down(self, con: duckdb.DuckDBPyConnection) -> None:
        """Set up the instance ``con`` belongs to for user queries (see the module docstring)."""
        con.execute("SET enable_external_access = false")
        con.execute(f"SET memory_limit = '{self.memory_limit}'")
        con.execute(f"SET threads = {int(self.threads)}")

    def close(self) -> None:
        if self._con is not None:
            try:
                self._con.close()
            except duckdb.Error as exc:  # a statement of ours still runs on it: leave it be
                logger.warning("closing the duckdb warehouse connection failed: %s", exc)
        self._con = None
        self._opened = False

    @contextmanager
    def _guard(self) -> Iterator[None]:
        try:
            yield
        except (duckdb.Error, sa.exc.SQLAlchemyError, OSError) as exc:
            detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            if isinstance(exc, duckdb.IOException | OSError | sa.exc.OperationalError):
                self.close()
            raise TargetUnavailable(self.name, detail) from exc

    @property
    def connection(self) -> duckdb.DuckDBPyConnection:
        if self._con is None:
            raise TargetUnavailable(self.name, "not connected")
        return self._con

    def _begin(self) -> None:
        self._lock.acquire()
        try:
            self.connection.execute("BEGIN TRANSACTION")
        except BaseException:
            self._lock.release()
            raise

    def _commit(self) -> None:
        try:
            self.connection.execute("COMMIT")
        finally:
            self._lock.release()

    def _rollback(self) -> None:
        try:
            if self._con is not None:
                # nothing open when a failed COMMIT already rolled back
                with suppress(duckdb.Error):
                    self._con.execute("ROLLBACK")
        finally:
            with suppress(RuntimeError):  # not held: the failure came before BEGIN
                self._lock.release()

    def _execute(self, sql: str, params: list[Any] | None = None) -> int:
        rows = self.connection.execute(sql, params or []).fetchall()
        return int(rows[0][0]) if rows and rows[0] and isinstance(rows[0][0], int) else 0

    def fetch(self, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
        cursor = self.connection
        return [tuple(r) for r in cursor.execute(sql, params or []).fetchall()]

    def _bulk_insert(self, qualified: str, rows: pa.Table, hook: Hook | None) -> None:
        cols = ", ".join(q(c) for c in rows.column_names)
        # with a hook, half the rows go in first and the hook runs mid-load (crash tests)
        parts = (
            [rows.slice(0, rows.num_rows // 2), rows.slice(rows.num_rows // 2)]
            if hook is not None and rows.num_rows > 1
            else [rows]
        )
        con = self.connection
        for i, part in enumerate(parts):
            if i == 1 and hook is not None:
                hook("copy")
            self._view += 1
            view = f"_bulk_{self._view}"
            con.register(view, part)
            try:
                con.execute(f"INSERT INTO {qualified} ({cols}) SELECT {cols} FROM {view}")
            finally:
                con.unregister(view)

    def _upsert(
        self, full: str, rows: str, columns: tuple[str, ...], row_id: tuple[str, ...]
    ) -> int:
        """Delete the rows being replaced, then insert: DuckDB's ``ON CONFLICT DO UPDATE`` that
        sets every column of a wide table is pathologically slow (measured on TPC-DI's Prospect,
        15 k rows of 28 columns: 20 s against 0.1 s for the delete and insert), and the two
        statements run in the merge's transaction, so the result is the same."""
        cols = ", ".join(q(c) for c in columns)
        match = " AND ".join(f"f.{q(c)} = u.{q(c)}" for c in row_id)
        self._execute(f"DELETE FROM {full} AS f USING {rows} u WHERE {match}")
        return self._execute(f"INSERT INTO {full} ({cols}) SELECT {cols} FROM {rows} u")

    def _after_merge(self) -> None:
        """Checkpoint after a merge (loads leave it to the merges, see ``_connect``); skipped
        while another transaction is open."""
        with self._lock, suppress(duckdb.Error):
            self.connection.execute("CHECKPOINT")

    def mark_busy(self, seconds: float) -> None:
        """Count the warehouse as busy (a reader is working) for the next ``seconds``."""
        self._busy_until = max(self._busy_until, time.monotonic() + seconds)

    def busy(self) -> bool:
        return time.monotonic() < self._busy_until
