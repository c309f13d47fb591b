"""The DuckDB driver: a warehouse file, rows moved as Arrow tables.

:class:`DuckDBDriver` opens the file (or wraps a connection its owner opened,
:meth:`DuckDBDriver.wrap`). DuckDB keeps one database instance per file and process: every
connection to the file from this process joins it, so settings made on one (memory, threads,
external access) hold for all.

A driver opened ``fenced`` sets that instance up for user queries when it connects
(:meth:`DuckDBDriver.fence`): ``enable_external_access = false`` (no file, network or extension
from any SQL, and DuckDB refuses to turn it back on while the instance lives; rows loaded through
:meth:`~DuckDBDriver.bulk_insert` arrive as registered Arrow tables, which it still reads), a
``memory_limit`` (sorts and joins past it spill to ``<file>.tmp``; DuckDB's default is 80% of
RAM) and a thread count.

Fenced reads: :meth:`DuckDBDriver.read_connection` opens a connection of its own to the instance
(a cursor of the writer's would make closing either wait for the other), fenced again if the
instance is new; :func:`read_fenced` runs a query on it under a deadline (interrupted past it:
:class:`~warehouse.exceptions.WarehouseQueryTimeout`) and a byte cap (the answer streams through
:func:`warehouse.bounded.read_bounded`), errors mapped by :func:`duckdb_errors`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import sqlalchemy as sa

from streamdi.watchdog import statement
from warehouse.base import BaseWarehouseDriver, Dialect, Hook, Params, quote_identifier
from warehouse.bounded import read_bounded
from warehouse.exceptions import (
    WarehouseQueryFailed,
    WarehouseQueryOutOfMemory,
    WarehouseQueryTimeout,
    WarehouseQueryTooLarge,
    WarehouseUnavailable,
    first_line,
)

logger = logging.getLogger(__name__)

#: Most rows per record batch :meth:`DuckDBDriver.export` asks for.
EXPORT_BATCH_ROWS = 1 << 20


class DuckDBDriver(BaseWarehouseDriver):
    """See the module docstring. ``memory_limit``/``threads`` are set on the instance when given;
    ``fenced`` also turns external access off (:meth:`fence`). ``connection``: an open
    connection the caller owns (use :meth:`wrap`)."""

    dialect: Dialect = "duckdb"

    def __init__(
        self,
        path: Path | str,
        *,
        memory_limit: str | None = None,
        threads: int | None = None,
        fenced: bool = False,
        connection: duckdb.DuckDBPyConnection | None = None,
    ) -> None:
        self.path = Path(path) if str(path) != ":memory:" else None
        self._location = str(path)
        self.memory_limit = memory_limit
        self.threads = threads
        self.fenced = fenced
        self._con: duckdb.DuckDBPyConnection | None = connection
        self._owned = connection is None
        self._in_txn = False
        self._view = 0

    @classmethod
    def wrap(cls, connection: duckdb.DuckDBPyConnection) -> DuckDBDriver:
        """A driver on a ``connection`` its owner opened and closes (:meth:`close` leaves it)."""
        return cls(":memory:", connection=connection)

    @property
    def connection(self) -> duckdb.DuckDBPyConnection:
        """The driver's connection. Raises :class:`~warehouse.exceptions.WarehouseUnavailable`
        when not connected."""
        if self._con is None:
            raise WarehouseUnavailable(self.name, "not connected")
        return self._con

    # -- connecting ------------------------------------------------------------------------------

    def connect(self) -> None:
        if self._con is not None:
            return
        with self.guard():
            if self.path is not None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            con = duckdb.connect(self._location)
            try:
                self.configure(con)
            except BaseException:
                con.close()
                raise
            self._con = con
            self._in_txn = False

    def configure(self, con: duckdb.DuckDBPyConnection) -> None:
        """Apply this driver's settings to the instance ``con`` belongs to: the fence when
        ``fenced``, else the memory and thread limits that were given."""
        if self.fenced:
            self.fence(con)
            return
        if self.memory_limit is not None:
            con.execute(f"SET memory_limit = '{self.memory_limit}'")
        if self.threads is not None:
            con.execute(f"SET threads = {int(self.threads)}")

    def fence(self, con: duckdb.DuckDBPyConnection) -> None:
        """Set up the instance ``con`` belongs to for user queries (see the module docstring)."""
        con.execute("SET enable_external_access = false")
        con.execute(f"SET memory_limit = '{self.memory_limit or '1GB'}'")
        con.execute(f"SET threads = {int(self.threads or 2)}")

    @property
    def connected(self) -> bool:
        return self._con is not None

    def close(self) -> None:
        if self._con is not None and self._owned:
            try:
                self._con.close()
            except duckdb.Error as exc:  # a statement of ours still runs on it: leave it be
                logger.warning("closing the duckdb warehouse connection failed: %s", exc)
        self._con = None
        self._in_txn = False

    @contextmanager
    def guard(self) -> Iterator[None]:
        try:
            yield
        except (duckdb.Error, sa.exc.SQLAlchemyError, OSError) as exc:
            if isinstance(exc, duckdb.IOException | OSError | sa.exc.OperationalError):
                self.close()
            raise WarehouseUnavailable(self.name, first_line(exc)) from exc

    def error_for(self, exc: BaseException, sql: str) -> Exception:
        text = sql.strip().splitlines()
        return WarehouseQueryFailed(self.name, str(exc).strip(), sql=text[0][:120] if text else "")

    @property
    def driver_errors(self) -> tuple[type[Exception], ...]:
        return (duckdb.Error,)

    def execute_script(self, statements: Sequence[str]) -> None:
        """Run ``statements`` (DDL) in one transaction of their own."""
        con = self.connection
        con.execute("BEGIN TRANSACTION")
        try:
            for statement in statements:
                con.execute(statement)
            con.execute("COMMIT")
        except BaseException:
            with suppress(duckdb.Error):
                con.execute("ROLLBACK")
            raise

    def current_catalog(self) -> str:
        """The name of the database the connection is in (the file's stem for a file)."""
        return str(self.connection.execute("SELECT current_database()").fetchall()[0][0])

    # -- transactions and statements ---------------------------------------------------------------

    def begin(self) -> None:
        self.connection.execute("BEGIN TRANSACTION")
        self._in_txn = True

    def commit(self) -> None:
        """COMMIT; a no-op when no transaction is open (auto-commit mode)."""
        try:
            self.connection.execute("COMMIT")
        except duckdb.Error as exc:
            if "no transaction is active" not in str(exc).lower():
                raise
        finally:
            self._in_txn = False

    def rollback(self) -> None:
        self._in_txn = False
        if self._con is not None:
            # nothing open when a failed COMMIT already rolled back
            with suppress(duckdb.Error):
                self._con.execute("ROLLBACK")

    @property
    def in_transaction(self) -> bool:
        return self._in_txn

    def execute(self, sql: str, params: Params = None) -> int:
        rows = self.connection.execute(sql, list(params) if params else []).fetchall()
        return int(rows[0][0]) if rows and rows[0] and isinstance(rows[0][0], int) else 0

    def fetch(self, sql: str, params: Params = None) -> list[tuple[Any, ...]]:
        cursor = self.connection.execute(sql, list(params) if params is not None else None)
        return [tuple(r) for r in cursor.fetchall()]

    def fetch_arrow(self, sql: str) -> pa.Table:
        """Rows of a small query as an Arrow table (reports, samples; never whole tables)."""
        relation = self.connection.sql(sql)
        to_table = getattr(relation, "to_arrow_table", None)
        table: pa.Table = to_table() if to_table is not None else relation.arrow()
        return table

    def bulk_insert(
        self,
        qualified: str,
        rows: pa.Table,
        hook: Hook | None = None,
        *,
        columns: Sequence[str] | None = None,
    ) -> None:
        cols = ", ".join(quote_identifier(c) for c in rows.column_names)
        into = cols if columns is None else ", ".join(columns)
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
            view = f"_bulk_{id(self):x}_{self._view}"
            con.register(view, part)
            try:
                con.execute(f"INSERT INTO {qualified} ({into}) SELECT {cols} FROM {view}")
            finally:
                con.unregister(view)

    def begin_snapshot(self) -> None:
        """BEGIN: every DuckDB transaction reads one snapshot (read-only by use: nothing here
        writes in it)."""
        self.begin()

    def export(self, sql: str, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        """DuckDB's Arrow stream of ``sql`` (vectors of its own size, at most
        :data:`EXPORT_BATCH_ROWS` rows per batch)."""
        with self.guard():
            reader = self.connection.sql(sql).to_arrow_reader(EXPORT_BATCH_ROWS)
        try:
            while True:
                with self.guard():
                    try:
                        batch = reader.read_next_batch()
                    except StopIteration:
                        return
                if batch.schema.types == schema.types and batch.schema.names == schema.names:
                    yield batch  # DuckDB's types already (the usual case: no cast to pay)
                    continue
                yield pa.RecordBatch.from_arrays(
                    [c.cast(t) for c, t in zip(batch.columns, schema.types, strict=True)],
                    schema=schema,
                )
        finally:
            reader.close()

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """Nothing: DuckDB has no savepoints. In auto-commit mode a failed statement leaves
        nothing to undo; inside a transaction :meth:`begin` opened, a failure aborts it (the
        caller rolls back)."""
        yield

    def reclaim(self, qualified: Sequence[str]) -> None:
        """``CHECKPOINT``; skipped (errors ignored) while another transaction is open."""
        if self._con is not None:
            with suppress(duckdb.Error):
                self._con.execute("CHECKPOINT")

    def full_match(self, expression: str, pattern: str) -> str:
        return f"regexp_full_match({expression}, {self.quote_literal(pattern)})"

    # -- fenced reads ------------------------------------------------------------------------------

    def read_connection(self) -> duckdb.DuckDBPyConnection:
        """A new connection to the file's instance for one reader, fenced (:meth:`fence`) if
        external access is on (a new instance: the writer reconnected meanwhile). Raises
        :class:`~warehouse.exceptions.WarehouseUnavailable` when the file cannot be opened."""
        with duckdb_errors(self.name, 0.0):
            con = duckdb.connect(self._location)
        try:
            self.ensure_fenced(con)
        except BaseException:
            with suppress(duckdb.Error):
                con.close()
            raise
        return con

    def ensure_fenced(self, con: duckdb.DuckDBPyConnection) -> None:
        """Fence ``con``'s instance again if external access is on (checked on every read)."""
        with duckdb_errors(self.name, 0.0):
            external = con.execute("SELECT current_setting('enable_external_access')").fetchall()
            if external[0][0]:
                self.fence(con)


@contextmanager
def duckdb_errors(target: str, timeout_s: float) -> Iterator[None]:
    """DuckDB errors of a bounded read as warehouse errors: an interrupt is the deadline
    (:class:`~warehouse.exceptions.WarehouseQueryTimeout` after ``timeout_s``), a refused
    allocation :class:`~warehouse.exceptions.WarehouseQueryOutOfMemory`, a lost file
    :class:`~warehouse.exceptions.WarehouseUnavailable`, anything else
    :class:`~warehouse.exceptions.WarehouseQueryFailed`."""
    try:
        yield
    except duckdb.InterruptException as exc:
        raise WarehouseQueryTimeout(target, timeout_s) from exc
    except duckdb.OutOfMemoryException as exc:
        raise WarehouseQueryOutOfMemory(target, first_line(exc)) from exc
    except (duckdb.IOException, duckdb.ConnectionException) as exc:
        raise WarehouseUnavailable(target, first_line(exc)) from exc
    except duckdb.Error as exc:
        raise WarehouseQueryFailed(target, first_line(exc)) from exc


def read_fenced(
    con: duckdb.DuckDBPyConnection,
    sql: str,
    *,
    timeout_s: float,
    max_bytes: int,
    target: str = "duckdb",
) -> pa.Table:
    """The rows of ``sql`` on read connection ``con`` (see
    :meth:`DuckDBDriver.read_connection`) as one Arrow table: interrupted after ``timeout_s``
    (:class:`~warehouse.exceptions.WarehouseQueryTimeout`), stopped at ``max_bytes``
    (:class:`~warehouse.exceptions.WarehouseQueryTooLarge`), other errors as
    :func:`duckdb_errors` maps them. Inside a user query's scope the service may interrupt it
    (:func:`streamdi.watchdog.statement`)."""
    with statement(timeout_s, con.interrupt), duckdb_errors(target, timeout_s):
        return read_bounded(con.sql(sql), max_bytes, lambda n: WarehouseQueryTooLarge(target, n))
