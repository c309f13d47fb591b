"""One connection to a TPC-DI warehouse, DuckDB or PostgreSQL, behind one small interface.

The checks, the batch validation and the metric are written once, in SQL both dialects accept
(``||``, ``DATE '...'``, ``date - integer``, ``date - INTERVAL '1 year'``, window functions,
``SELECT`` without ``FROM``). What differs is the warehouse driver's
(:class:`warehouse.base.BaseWarehouseDriver`); this class adds the TPC-DI side's conventions:

* table names: SQL templates name tables in braces (``SELECT count(*) FROM {dimcustomer}``) and
  :meth:`WarehouseConnection.sql` qualifies them with the warehouse schema, so nothing depends on
  the session's search path;
* parameters: statements use ``?`` (the driver rewrites them for psycopg2);
* regular expressions: :meth:`WarehouseConnection.full_match` (the driver's);
* a failed statement: on PostgreSQL it runs inside a savepoint (:meth:`attempt`, the driver's
  :meth:`~warehouse.base.BaseWarehouseDriver.savepoint`), so one failed check does not abort the
  caller's transaction; DuckDB in auto-commit mode needs nothing.

Driver errors become :class:`~warehouse.exceptions.WarehouseQueryFailed` (the statement was
rejected) or :class:`~warehouse.exceptions.WarehouseUnavailable` (the connection is gone).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import pyarrow as pa

from warehouse.base import BaseWarehouseDriver, quote_identifier
from warehouse.duckdb import DuckDBDriver
from warehouse.postgres import PostgresDriver

Dialect = Literal["duckdb", "postgres"]
Params = Sequence[Any] | None

_TABLE_REF = re.compile(r"\{([a-z_][a-z0-9_]*)\}")


class WarehouseConnection:
    """A DuckDB or PostgreSQL connection to the warehouse tables of clause 3.2.

    ``dialect`` is ``'duckdb'`` or ``'postgres'``; ``schema`` the schema holding the warehouse
    tables (``None``: the connection's default schema; ``catalog.schema`` for an attached DuckDB
    database). Construct with :meth:`duckdb` or :meth:`postgres`; a connection opened from a path
    or DSN is closed by :meth:`close`, one passed in is left to its owner (``owned``: closed
    too). ``driver`` is the warehouse driver statements run through.
    """

    def __init__(
        self,
        raw: Any,
        dialect: Dialect,
        schema: str | None,
        *,
        owned: bool,
        driver: BaseWarehouseDriver | None = None,
        pool_proxy: Any = None,
    ) -> None:
        self._raw = raw
        self.dialect: Dialect = dialect
        self.schema = schema
        self._owned = owned
        self.driver: BaseWarehouseDriver = driver or (
            DuckDBDriver.wrap(raw) if dialect == "duckdb" else PostgresDriver.wrap(raw)
        )
        self._pool_proxy: Any = pool_proxy  # returned to its SQLAlchemy pool by close()
        self._current_catalog: str | None = None

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def duckdb(cls, path_or_conn: Any, schema: str | None = None) -> WarehouseConnection:
        """Wrap a ``duckdb`` connection, or open the DuckDB file at a path (``:memory:`` too)."""
        if isinstance(path_or_conn, str | Path):
            driver = DuckDBDriver(path_or_conn)
            driver.connect()
            return cls(driver.connection, "duckdb", schema, owned=False, driver=driver)
        return cls(path_or_conn, "duckdb", schema, owned=False)

    @classmethod
    def postgres(cls, dsn_or_conn: Any, schema: str | None = None) -> WarehouseConnection:
        """Wrap a psycopg2 connection or a SQLAlchemy ``Connection``/``Engine`` on psycopg2, or
        connect to a libpq DSN/URL."""
        if isinstance(dsn_or_conn, str):
            opener = PostgresDriver(dsn_or_conn)
            with opener.guard():
                raw = opener.new_connection()
            return cls(raw, "postgres", schema, owned=True)
        sa_connection = getattr(dsn_or_conn, "connection", None)
        if sa_connection is not None and hasattr(sa_connection, "dbapi_connection"):
            return cls(sa_connection.dbapi_connection, "postgres", schema, owned=False)
        if hasattr(dsn_or_conn, "raw_connection"):  # a SQLAlchemy Engine: borrow one from its pool
            proxy = dsn_or_conn.raw_connection()
            return cls(proxy.dbapi_connection, "postgres", schema, owned=False, pool_proxy=proxy)
        return cls(dsn_or_conn, "postgres", schema, owned=False)

    # -- names and dialect ------------------------------------------------------------------------

    def table(self, name: str) -> str:
        """``name`` qualified with the warehouse schema (as written when there is none). On
        DuckDB a bare schema is prefixed with the current catalog, since a schema may share its
        name with an attached database (``dw`` in ``dw.duckdb``)."""
        if not self.schema:
            return name
        parts = self.schema.split(".")
        if self.dialect == "duckdb" and len(parts) == 1:
            parts = [self._catalog(), *parts]
        return ".".join(quote_identifier(part) for part in parts) + "." + name

    def _catalog(self) -> str:
        if self._current_catalog is None:
            sql = "SELECT current_database()"
            with self._mapped(sql):
                self._current_catalog = str(self.driver.fetch(sql)[0][0])
        return self._current_catalog

    def qualified_schema(self) -> str:
        """The warehouse schema as SQL (quoted; catalog-qualified on DuckDB); requires one."""
        assert self.schema, "no warehouse schema configured"
        return self.table("x")[: -len(".x")]

    def sql(self, template: str) -> str:
        """Render a statement template: every ``{table}`` becomes the qualified table name."""
        return _TABLE_REF.sub(lambda m: self.table(m.group(1)), template)

    def full_match(self, expression: str, pattern: str) -> str:
        """A boolean SQL expression: ``expression`` matches the regular expression entirely."""
        return self.driver.full_match(expression, pattern)

    # -- statements -------------------------------------------------------------------------------

    @contextmanager
    def _mapped(self, sql: str) -> Iterator[None]:
        try:
            yield
        except self.driver.driver_errors as exc:
            raise self.driver.error_for(exc, sql) from exc

    def execute(self, sql: str, params: Params = None) -> None:
        """Run one statement (a template is rendered first) and discard any result."""
        self._run(sql, params, fetch=False)

    def query(self, sql: str, params: Params = None) -> list[tuple[Any, ...]]:
        """Run one statement and return its rows as tuples."""
        rows = self._run(sql, params, fetch=True)
        assert rows is not None
        return rows

    def _run(self, sql: str, params: Params, *, fetch: bool) -> list[tuple[Any, ...]] | None:
        text = self.sql(sql)
        with self._mapped(text):
            if fetch:
                return self.driver.fetch(text, params)
            self.driver.execute(text, params)
            return None

    def scalar(self, sql: str, params: Params = None) -> Any:
        """The first column of the first row (``None`` when there is no row)."""
        rows = self.query(sql, params)
        return rows[0][0] if rows else None

    def query_arrow(self, sql: str) -> pa.Table:
        """Run a query and return its result as an Arrow table (for small results: reports,
        samples; never for whole warehouse tables)."""
        text = self.sql(sql)
        with self._mapped(text):
            return self.driver.fetch_arrow(text)

    def begin(self) -> None:
        """Start an explicit transaction (DuckDB; psycopg2 starts one with the first statement)."""
        with self._mapped("BEGIN TRANSACTION"):
            self.driver.begin()

    def load_arrow(self, table: str, data: pa.Table, columns: Sequence[str]) -> None:
        """Append ``data`` (its columns in the order of ``columns``) to ``table`` in bulk: an
        Arrow scan on DuckDB, ``COPY ... FROM STDIN`` on PostgreSQL (the driver's bulk path);
        never row by row. No commit."""
        qualified = self.table(table)
        with self._mapped(f"INSERT INTO {qualified} ({', '.join(columns)})"):
            self.driver.bulk_insert(qualified, data, columns=columns)

    @contextmanager
    def attempt(self) -> Iterator[None]:
        """Run the enclosed statements so that, if one fails, the connection stays usable and the
        caller's transaction (PostgreSQL) is not aborted: a savepoint rolled back on error."""
        with self._mapped("SAVEPOINT"), self.driver.savepoint():
            yield

    def commit(self) -> None:
        """Commit the connection's open transaction (a no-op when there is none)."""
        with self._mapped("COMMIT"):
            self.driver.commit()

    def rollback(self) -> None:
        """Roll back the connection's open transaction (a no-op when there is none). Unlike the
        driver's, a failed rollback is raised: the audit reports it."""
        try:
            self._raw.rollback()
        except Exception as exc:
            if "no transaction is active" not in str(exc).lower():
                raise self.driver.error_for(exc, "ROLLBACK") from exc

    # -- catalogue ---------------------------------------------------------------------------------

    def existing_tables(self) -> set[str]:
        """Lower-case names of the tables (and views) in the warehouse schema."""
        catalog: str | None = None
        schema: str | None = None
        if self.schema:
            parts = self.schema.split(".")
            schema = parts[-1]
            catalog = parts[0] if len(parts) > 1 else None
        rows = self.query(
            "SELECT lower(table_name) FROM information_schema.tables "
            "WHERE table_schema = coalesce(CAST(? AS VARCHAR), current_schema()) "
            "AND table_catalog = coalesce(CAST(? AS VARCHAR), current_database())",
            [schema, catalog],
        )
        return {r[0] for r in rows}

    def missing_tables(self, names: Sequence[str]) -> list[str]:
        """The names among ``names`` (any case) that are not tables of the warehouse schema."""
        present = self.existing_tables()
        return [n for n in names if n.lower() not in present]

    # -- lifetime ----------------------------------------------------------------------------------

    @property
    def raw(self) -> Any:
        """The driver connection (duckdb or psycopg2)."""
        return self._raw

    def close(self) -> None:
        """Close the connection if this object opened it (or return it to its pool)."""
        if self._pool_proxy is not None:
            self._pool_proxy.close()
            self._pool_proxy = None
        elif self._owned:
            self._raw.close()
        else:
            self.driver.close()  # a wrapped connection's driver leaves it open

    def __enter__(self) -> WarehouseConnection:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"WarehouseConnection(dialect={self.dialect!r}, schema={self.schema!r})"
