"""One connection to a TPC-DI warehouse, DuckDB or PostgreSQL, behind one small interface.

The checks, the batch validation and the metric are written once, in SQL both dialects accept
(``||``, ``DATE '...'``, ``date - integer``, ``date - INTERVAL '1 year'``, window functions,
``SELECT`` without ``FROM``). What differs lives here:

* table names: SQL templates name tables in braces (``SELECT count(*) FROM {dimcustomer}``) and
  :meth:`WarehouseConnection.sql` qualifies them with the warehouse schema, so nothing depends on
  the session's search path;
* parameters: statements use ``?``; for psycopg2 they become ``%s`` (and a literal ``%`` ``%%``);
* regular expressions: :meth:`WarehouseConnection.full_match`;
* a failed statement: on PostgreSQL it runs inside a savepoint (:meth:`attempt`), so one failed
  check does not abort the caller's transaction; DuckDB in auto-commit mode needs nothing.

Driver errors become :class:`~tpcdi.audit.exceptions.WarehouseQueryFailed` (the statement was
rejected) or :class:`~tpcdi.audit.exceptions.WarehouseUnavailable` (the connection is gone).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import pyarrow as pa

from tpcdi.audit.exceptions import WarehouseQueryFailed, WarehouseUnavailable

Dialect = Literal["duckdb", "postgres"]
Params = Sequence[Any] | None

_TABLE_REF = re.compile(r"\{([a-z_][a-z0-9_]*)\}")


def _first_line(sql: str) -> str:
    for line in sql.strip().splitlines():
        if line.strip():
            return line.strip()[:120]
    return ""


def to_pyformat(sql: str) -> str:
    """``?`` placeholders (outside quotes) to psycopg2's ``%s``; a literal ``%`` to ``%%``."""
    out: list[str] = []
    quote: str | None = None
    for char in sql:
        if char == "%":
            out.append("%%")
            continue
        if quote is not None:
            if char == quote:
                quote = None
        elif char in ("'", '"'):
            quote = char
        elif char == "?":
            out.append("%s")
            continue
        out.append(char)
    return "".join(out)


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class WarehouseConnection:
    """A DuckDB or PostgreSQL connection to the warehouse tables of clause 3.2.

    ``dialect`` is ``'duckdb'`` or ``'postgres'``; ``schema`` the schema holding the warehouse
    tables (``None``: the connection's default schema; ``catalog.schema`` for an attached DuckDB
    database). Construct with :meth:`duckdb` or :meth:`postgres`; a connection opened from a path
    or DSN is closed by :meth:`close`, one passed in is left to its owner.
    """

    def __init__(self, raw: Any, dialect: Dialect, schema: str | None, *, owned: bool) -> None:
        self._raw = raw
        self.dialect: Dialect = dialect
        self.schema = schema
        self._owned = owned
        self._savepoints = 0
        self._pool_proxy: Any = None
        self._current_catalog: str | None = None

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def duckdb(cls, path_or_conn: Any, schema: str | None = None) -> WarehouseConnection:
        """Wrap a ``duckdb`` connection, or open the DuckDB file at a path (``:memory:`` too)."""
        import duckdb

        if isinstance(path_or_conn, str | Path):
            try:
                raw = duckdb.connect(str(path_or_conn))
            except duckdb.Error as exc:
                raise WarehouseUnavailable("duckdb", f"{path_or_conn}: {exc}") from exc
            return cls(raw, "duckdb", schema, owned=True)
        return cls(path_or_conn, "duckdb", schema, owned=False)

    @classmethod
    def postgres(cls, dsn_or_conn: Any, schema: str | None = None) -> WarehouseConnection:
        """Wrap a psycopg2 connection or a SQLAlchemy ``Connection``/``Engine`` on psycopg2, or
        connect to a libpq DSN/URL."""
        import psycopg2

        if isinstance(dsn_or_conn, str):
            try:
                raw = psycopg2.connect(dsn_or_conn)
            except psycopg2.Error as exc:
                raise WarehouseUnavailable("postgres", str(exc).strip()) from exc
            return cls(raw, "postgres", schema, owned=True)
        sa_connection = getattr(dsn_or_conn, "connection", None)
        if sa_connection is not None and hasattr(sa_connection, "dbapi_connection"):
            return cls(sa_connection.dbapi_connection, "postgres", schema, owned=False)
        if hasattr(dsn_or_conn, "raw_connection"):  # a SQLAlchemy Engine: borrow one from its pool
            proxy = dsn_or_conn.raw_connection()
            wrapped = cls(proxy.dbapi_connection, "postgres", schema, owned=False)
            wrapped._pool_proxy = proxy
            return wrapped
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
        return ".".join(_quote_ident(part) for part in parts) + "." + name

    def _catalog(self) -> str:
        if self._current_catalog is None:
            try:
                self._current_catalog = str(
                    self._raw.execute("SELECT current_database()").fetchone()[0]
                )
            except self._errors() as exc:
                raise self._fail(exc, "SELECT current_database()") from exc
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
        literal = "'" + pattern.replace("'", "''") + "'"
        if self.dialect == "duckdb":
            return f"regexp_full_match({expression}, {literal})"
        return f"({expression} ~ ('^(?:' || {literal} || ')$'))"

    # -- statements -------------------------------------------------------------------------------

    def _fail(self, exc: Exception, sql: str) -> Exception:
        if self.dialect == "postgres":
            import psycopg2

            if isinstance(exc, psycopg2.OperationalError | psycopg2.InterfaceError) and (
                getattr(self._raw, "closed", 0) != 0
            ):
                return WarehouseUnavailable("postgres", str(exc).strip())
        return WarehouseQueryFailed(self.dialect, _first_line(sql), str(exc).strip())

    def _errors(self) -> tuple[type[Exception], ...]:
        if self.dialect == "duckdb":
            import duckdb

            return (duckdb.Error,)
        import psycopg2

        return (psycopg2.Error,)

    def execute(self, sql: str, params: Params = None) -> None:
        """Run one statement (a template is rendered first) and discard any result."""
        self._run(sql, params, fetch=False)

    def query(self, sql: str, params: Params = None) -> list[tuple[Any, ...]]:
        """Run one statement and return its rows as tuples."""
        rows = self._run(sql, params, fetch=True)
        assert rows is not None
        return rows

    def scalar(self, sql: str, params: Params = None) -> Any:
        """The first column of the first row (``None`` when there is no row)."""
        rows = self.query(sql, params)
        return rows[0][0] if rows else None

    def _run(self, sql: str, params: Params, *, fetch: bool) -> list[tuple[Any, ...]] | None:
        text = self.sql(sql)
        try:
            if self.dialect == "duckdb":
                cursor = self._raw.execute(text, list(params) if params is not None else None)
                return [tuple(r) for r in cursor.fetchall()] if fetch else None
            with self._raw.cursor() as cur:
                if params is None:
                    cur.execute(text)
                else:
                    cur.execute(to_pyformat(text), list(params))
                return [tuple(r) for r in cur.fetchall()] if fetch else None
        except self._errors() as exc:
            raise self._fail(exc, text) from exc

    def query_arrow(self, sql: str) -> pa.Table:
        """Run a query and return its result as an Arrow table (for small results: reports,
        samples; never for whole warehouse tables)."""
        text = self.sql(sql)
        try:
            if self.dialect == "duckdb":
                relation = self._raw.sql(text)
                to_table = getattr(relation, "to_arrow_table", None)
                table: pa.Table = to_table() if to_table is not None else relation.arrow()
                return table
            with self._raw.cursor() as cur:
                cur.execute(text)
                names = [d[0] for d in cur.description]
                rows = cur.fetchall()
        except self._errors() as exc:
            raise self._fail(exc, text) from exc
        return pa.table({n: [r[i] for r in rows] for i, n in enumerate(names)})

    def begin(self) -> None:
        """Start an explicit transaction (DuckDB; psycopg2 starts one with the first statement)."""
        if self.dialect == "duckdb":
            self.execute("BEGIN TRANSACTION")

    def load_arrow(self, table: str, data: pa.Table, columns: Sequence[str]) -> None:
        """Append ``data`` (its columns in the order of ``columns``) to ``table`` in bulk: an
        Arrow scan on DuckDB, ``COPY ... FROM STDIN`` on PostgreSQL; never row by row. No
        commit."""
        target = f"{self.table(table)} ({', '.join(columns)})"
        if self.dialect == "duckdb":
            view = f"_streamdi_load_{id(data):x}"
            try:
                self._raw.register(view, data)
                try:
                    names = ", ".join(_quote_ident(n) for n in data.column_names)
                    self._raw.execute(f"INSERT INTO {target} SELECT {names} FROM {view}")
                finally:
                    self._raw.unregister(view)
            except self._errors() as exc:
                raise self._fail(exc, f"INSERT INTO {target}") from exc
            return
        import io

        from migration.targets.postgres import csv_bytes  # the migration's COPY form

        buffer = io.BytesIO(csv_bytes(data))
        sql = f"COPY {target} FROM STDIN WITH (FORMAT csv)"
        try:
            with self._raw.cursor() as cur:
                cur.copy_expert(sql, buffer)
        except self._errors() as exc:
            raise self._fail(exc, sql) from exc

    @contextmanager
    def attempt(self) -> Iterator[None]:
        """Run the enclosed statements so that, if one fails, the connection stays usable and the
        caller's transaction (PostgreSQL) is not aborted: a savepoint rolled back on error."""
        if self.dialect != "postgres" or getattr(self._raw, "autocommit", False):
            yield
            return
        self._savepoints += 1
        name = f"streamdi_attempt_{self._savepoints}"
        self.execute(f"SAVEPOINT {name}")
        try:
            yield
        except BaseException:
            self.execute(f"ROLLBACK TO SAVEPOINT {name}")
            raise
        finally:
            self._savepoints -= 1
        self.execute(f"RELEASE SAVEPOINT {name}")

    def commit(self) -> None:
        """Commit the connection's open transaction (a no-op when there is none)."""
        try:
            if self.dialect == "duckdb":
                try:
                    self._raw.commit()
                except Exception as exc:  # duckdb raises when no transaction is active
                    if "no transaction is active" not in str(exc).lower():
                        raise
            else:
                self._raw.commit()
        except self._errors() as exc:
            raise self._fail(exc, "COMMIT") from exc

    def rollback(self) -> None:
        """Roll back the connection's open transaction (a no-op when there is none)."""
        try:
            self._raw.rollback()
        except Exception as exc:
            if "no transaction is active" not in str(exc).lower():
                raise self._fail(exc, "ROLLBACK") from exc

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
