"""What every warehouse driver does: one connection to one warehouse, in one dialect.

A driver owns everything that differs between PostgreSQL and DuckDB below the SQL a caller writes:

* connecting (:meth:`BaseWarehouseDriver.connect`: a DSN with TLS options, or a DuckDB file) and
  closing, idempotently;
* quoting (:meth:`~BaseWarehouseDriver.quote_identifier`,
  :meth:`~BaseWarehouseDriver.quote_literal`) and parameters: statements use ``?`` placeholders
  in every dialect;
* transactions as public methods (:meth:`~BaseWarehouseDriver.begin`,
  :meth:`~BaseWarehouseDriver.commit`, :meth:`~BaseWarehouseDriver.rollback`) and statements inside
  them (:meth:`~BaseWarehouseDriver.execute`, :meth:`~BaseWarehouseDriver.fetch`);
* bulk loads (:meth:`~BaseWarehouseDriver.bulk_insert`: ``COPY`` on PostgreSQL, an Arrow scan on
  DuckDB; never row by row) and bulk reads of results of any size in bounded pieces
  (:meth:`~BaseWarehouseDriver.export`: ``COPY ... TO STDOUT`` on PostgreSQL, an Arrow stream on
  DuckDB), inside a snapshot (:meth:`~BaseWarehouseDriver.begin_snapshot`);
* the one set of errors (:mod:`warehouse.exceptions`): :meth:`~BaseWarehouseDriver.guard` maps a
  driver error to :class:`~warehouse.exceptions.WarehouseUnavailable` (and drops a broken
  connection), :meth:`~BaseWarehouseDriver.error_for` tells a rejected statement
  (:class:`~warehouse.exceptions.WarehouseQueryFailed`) from a lost connection.

Read-only, bounded reads for user SQL (fenced in, under a deadline and a byte cap) live next to
each driver: :mod:`warehouse.postgres_reads` and :class:`warehouse.duckdb.DuckDBDriver`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, Literal

import pyarrow as pa

#: The warehouse dialects, each with one driver.
Dialect = Literal["postgres", "duckdb"]

#: ``hook(phase)`` is called at fault-injection points of a bulk load: ``copy`` (half of the rows
#: are in, the load still runs). The crash tests kill the process there.
Hook = Callable[[str], None]

#: Statement parameters (``?`` placeholders).
Params = Sequence[Any] | None


def quote_identifier(name: str) -> str:
    """``name`` as a quoted SQL identifier (the same in both dialects)."""
    return '"' + name.replace('"', '""') + '"'


def quote_literal(value: str) -> str:
    """``value`` as a SQL string literal (the same in both dialects)."""
    return "'" + value.replace("'", "''") + "'"


class BaseWarehouseDriver(ABC):
    """One connection to one warehouse; see the module docstring. Not thread-safe: one caller at a
    time (the migration's targets and the TPC-DI run each hold their own)."""

    dialect: Dialect

    @property
    def name(self) -> str:
        """The warehouse's name in messages and errors (its dialect)."""
        return self.dialect

    quote_identifier = staticmethod(quote_identifier)
    quote_literal = staticmethod(quote_literal)

    # -- connecting ------------------------------------------------------------------------------

    @abstractmethod
    def connect(self) -> None:
        """Connect if not connected. Raises
        :class:`~warehouse.exceptions.WarehouseUnavailable` when the warehouse cannot be reached."""

    @property
    @abstractmethod
    def connected(self) -> bool:
        """Whether a connection is open."""

    @abstractmethod
    def close(self) -> None:
        """Close the connection (idempotent; an open transaction is rolled back by the server)."""

    @abstractmethod
    def guard(self) -> AbstractContextManager[None]:
        """A context manager mapping driver errors raised inside it to
        :class:`~warehouse.exceptions.WarehouseUnavailable` (closing a broken connection)."""

    @abstractmethod
    def error_for(self, exc: BaseException, sql: str) -> Exception:
        """The warehouse error for driver error ``exc`` raised by ``sql``:
        :class:`~warehouse.exceptions.WarehouseUnavailable` when the connection is gone,
        :class:`~warehouse.exceptions.WarehouseQueryFailed` when the statement was rejected."""

    @property
    @abstractmethod
    def driver_errors(self) -> tuple[type[Exception], ...]:
        """The exception types of the underlying driver (what :meth:`error_for` maps)."""

    # -- transactions and statements ---------------------------------------------------------------

    @abstractmethod
    def begin(self) -> None:
        """Open a transaction; statements run in it until :meth:`commit` or :meth:`rollback`."""

    @abstractmethod
    def commit(self) -> None:
        """Commit the open transaction."""

    @abstractmethod
    def rollback(self) -> None:
        """Roll back the open transaction; a no-op (never an error) when none is open or the
        connection is gone."""

    @property
    @abstractmethod
    def in_transaction(self) -> bool:
        """Whether :meth:`begin` opened a transaction not yet ended."""

    @abstractmethod
    def execute(self, sql: str, params: Params = None) -> int:
        """Run one statement (``?`` placeholders); the affected row count (0 when unknown)."""

    @abstractmethod
    def fetch(self, sql: str, params: Params = None) -> list[tuple[Any, ...]]:
        """Rows of a query; outside a transaction it runs in a short one of its own."""

    @abstractmethod
    def fetch_arrow(self, sql: str) -> pa.Table:
        """Rows of a small query as an Arrow table (reports, samples; never whole tables)."""

    @abstractmethod
    def bulk_insert(
        self,
        qualified: str,
        rows: pa.Table,
        hook: Hook | None = None,
        *,
        columns: Sequence[str] | None = None,
    ) -> None:
        """Append ``rows`` to table ``qualified`` (already quoted) in the open transaction
        through the dialect's bulk path; never row by row. The rows' columns go, in order, into
        the table's columns ``columns`` (SQL, written as given) or, by default, into the columns
        named as theirs. With a ``hook``, ``hook("copy")`` runs once about half of the rows are
        in."""

    @abstractmethod
    def begin_snapshot(self) -> None:
        """Open a read-only transaction whose statements all see one committed state of the
        warehouse (PostgreSQL: ``REPEATABLE READ READ ONLY``; a DuckDB transaction is a
        snapshot); end it with :meth:`rollback`."""

    @abstractmethod
    def export(self, sql: str, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        """The rows of query ``sql``, of any size, as record batches of ``schema`` (its names
        and types, by position) read through the dialect's bulk path out (``COPY ... TO
        STDOUT`` on PostgreSQL, an Arrow stream on DuckDB), in bounded pieces: never the whole
        result in memory. Runs in the open transaction (:meth:`begin_snapshot`); a caller that
        stops early closes the generator. Raises
        :class:`~warehouse.exceptions.WarehouseUnavailable` when the read fails."""

    @abstractmethod
    def savepoint(self) -> AbstractContextManager[None]:
        """A context manager after which a statement that failed inside it leaves the enclosing
        transaction usable (PostgreSQL: a savepoint rolled back on error; DuckDB in auto-commit
        mode needs nothing). Driver errors of the savepoint statements themselves propagate."""

    @abstractmethod
    def reclaim(self, qualified: Sequence[str]) -> None:
        """Give the space of deleted rows back now (PostgreSQL ``VACUUM`` of the tables, DuckDB
        ``CHECKPOINT``), outside any transaction."""

    @abstractmethod
    def full_match(self, expression: str, pattern: str) -> str:
        """A boolean SQL expression: ``expression`` matches regular expression ``pattern``
        entirely."""
