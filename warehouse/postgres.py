"""The PostgreSQL driver: psycopg2, rows moved with ``COPY ... FROM STDIN (csv)``.

:class:`PostgresDriver` connects with a libpq DSN and extra libpq parameters (TLS: ``sslmode``,
``sslrootcert``...) through SQLAlchemy (which also emits DDL from metadata,
:meth:`PostgresDriver.create_all`), or wraps a connection its owner opened
(:meth:`PostgresDriver.wrap`; the owner then manages its transactions). Bulk rows travel as CSV
written by Arrow's C++ writer straight into ``copy_expert`` (strings quoted, nulls as empty
unquoted fields, so an empty string stays an empty string). Statements use ``?`` placeholders,
rewritten to psycopg2's ``%s`` outside quotes (:func:`to_pyformat`).

Read-only fenced reads for user SQL (the reader login's connections) are in
:mod:`warehouse.postgres_reads`.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

import psycopg2
import psycopg2.extensions
import pyarrow as pa
import pyarrow.csv as pacsv
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from warehouse.base import BaseWarehouseDriver, Dialect, Hook, Params, quote_identifier
from warehouse.exceptions import WarehouseQueryFailed, WarehouseUnavailable, first_line
from warehouse.postgres_export import copy_out_batches

logger = logging.getLogger(__name__)

_CSV = pacsv.WriteOptions(include_header=False, batch_size=65_536)


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


def csv_bytes(rows: pa.Table) -> bytes:
    """``rows`` as headerless CSV in the form PostgreSQL's COPY reads.

    Empty record batches are dropped first (no copy): pyarrow 26's CSV writer turns a table that
    starts with zero-length chunks into garbage (NUL bytes, then unrelated memory), which
    PostgreSQL rejects as ``invalid byte sequence for encoding "UTF8": 0x00``."""
    batches = [b for b in rows.to_batches() if b.num_rows]
    rows = pa.Table.from_batches(batches, schema=rows.schema)
    sink = pa.BufferOutputStream()
    pacsv.write_csv(rows, sink, _CSV)
    data: bytes = sink.getvalue().to_pybytes()
    return data


class _HookedReader(io.RawIOBase):
    """A file COPY reads from that calls ``hook("copy")`` once half of the bytes were read (the
    crash tests kill the process there, in the middle of a COPY)."""

    def __init__(self, data: bytes, hook: Hook) -> None:
        self._data = memoryview(data)
        self._pos = 0
        self._hook = hook
        self._fired = False

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        if not self._fired and self._pos >= len(self._data) // 2:
            self._fired = True
            self._hook("copy")
        end = len(self._data) if size is None or size < 0 else self._pos + size
        chunk = bytes(self._data[self._pos : end])
        self._pos += len(chunk)
        return chunk


class PostgresDriver(BaseWarehouseDriver):
    """See the module docstring. ``dsn`` is a libpq URL or key=value string; ``connect_args``
    are extra libpq parameters (TLS: ``sslmode``, ``sslrootcert``...). ``connection``: an open
    psycopg2 connection the caller owns (use :meth:`wrap`)."""

    dialect: Dialect = "postgres"

    def __init__(
        self, dsn: str, connect_args: dict[str, str] | None = None, *, connection: Any = None
    ) -> None:
        self._dsn = dsn
        self._connect_args = dict(connect_args or {})
        self._engine: sa.Engine | None = None
        self._proxy: Any = None  # the pool's proxy of the connection connect() opened
        self._con: Any = connection  # the psycopg2 connection
        self._owned = connection is None
        self._in_txn = False
        self._savepoints = 0

    @classmethod
    def wrap(cls, connection: Any) -> PostgresDriver:
        """A driver on a psycopg2 ``connection`` its owner opened and closes: :meth:`close` leaves
        it open, and :meth:`fetch` never ends a transaction the owner left open."""
        return cls("", connection=connection)

    @property
    def dsn(self) -> str:
        """The libpq DSN this driver connects with."""
        return self._dsn

    @property
    def connect_args(self) -> dict[str, str]:
        """The extra libpq parameters (TLS options) this driver connects with."""
        return dict(self._connect_args)

    def new_connection(self) -> psycopg2.extensions.connection:
        """A new psycopg2 connection with this driver's DSN and parameters (the caller owns it).
        Driver errors propagate; use :meth:`guard` to map them."""
        return psycopg2.connect(self._dsn, **self._connect_args)

    @property
    def raw(self) -> Any:
        """The psycopg2 connection (``None`` before :meth:`connect`)."""
        return self._con

    # -- connecting ------------------------------------------------------------------------------

    def _engine_for(self) -> sa.Engine:
        if self._engine is None:
            # no pool: a connection returned is closed, which ends its transaction on the
            # server; the pool's rollback before the close would only fail (and log a
            # traceback) on a connection whose server died
            self._engine = sa.create_engine(
                "postgresql+psycopg2://",
                creator=self.new_connection,
                poolclass=NullPool,
                pool_reset_on_return=None,
            )
        return self._engine

    def connect(self) -> None:
        if self.connected:
            return
        with self.guard():
            self._proxy = self._engine_for().raw_connection()
            self._con = self._proxy.driver_connection
            self._in_txn = False

    @property
    def connected(self) -> bool:
        return self._con is not None and not bool(getattr(self._con, "closed", False))

    def create_all(self, metadata: sa.MetaData, schemas: Sequence[str], lock_key: str) -> None:
        """Create ``schemas`` and ``metadata``'s tables if missing, in one transaction of its own
        holding the advisory lock ``lock_key`` (one DDL writer at a time per database: ``CREATE
        ... IF NOT EXISTS`` races otherwise)."""
        with self.guard(), self._engine_for().begin() as conn:
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext(:k))"), {"k": lock_key})
            for schema in schemas:
                conn.execute(sa.text(f"CREATE SCHEMA IF NOT EXISTS {quote_identifier(schema)}"))
            metadata.create_all(conn, checkfirst=True)

    def close(self) -> None:
        if self._owned:
            target = self._proxy if self._proxy is not None else self._con
            if target is not None:
                with suppress(psycopg2.Error):
                    target.close()
            if self._engine is not None:
                self._engine.dispose()
            self._engine = None
        self._proxy = None
        self._con = None
        self._in_txn = False

    @contextmanager
    def guard(self) -> Iterator[None]:
        try:
            yield
        except (psycopg2.Error, sa.exc.SQLAlchemyError, OSError) as exc:
            broken = isinstance(
                exc,
                psycopg2.OperationalError
                | psycopg2.InterfaceError
                | OSError
                | sa.exc.OperationalError
                | sa.exc.InterfaceError,
            )
            if broken or not self.connected:
                self.close()
            raise WarehouseUnavailable(self.name, first_line(exc)) from exc

    def error_for(self, exc: BaseException, sql: str) -> Exception:
        if isinstance(exc, psycopg2.OperationalError | psycopg2.InterfaceError) and (
            getattr(self._con, "closed", 0) != 0
        ):
            return WarehouseUnavailable(self.name, str(exc).strip())
        return WarehouseQueryFailed(self.name, str(exc).strip(), sql=_first_sql_line(sql))

    @property
    def driver_errors(self) -> tuple[type[Exception], ...]:
        return (psycopg2.Error,)

    # -- transactions and statements ---------------------------------------------------------------

    def _cursor(self) -> Any:
        if self._con is None:
            raise WarehouseUnavailable(self.name, "not connected")
        return self._con.cursor()

    def begin(self) -> None:
        """psycopg2 opens the transaction with the first statement; this marks it open."""
        if self._con is None:
            raise WarehouseUnavailable(self.name, "not connected")
        self._in_txn = True

    def commit(self) -> None:
        self._con.commit()
        self._in_txn = False

    def rollback(self) -> None:
        self._in_txn = False
        if self._con is None:
            return
        try:
            self._con.rollback()
        except psycopg2.Error as exc:
            logger.warning("rollback failed target=postgres: %s", exc)

    @property
    def in_transaction(self) -> bool:
        return self._in_txn

    def execute(self, sql: str, params: Params = None) -> int:
        with self._cursor() as cur:
            if params is None:
                cur.execute(sql)
            else:
                cur.execute(to_pyformat(sql), list(params))
            return int(cur.rowcount)

    def fetch(self, sql: str, params: Params = None) -> list[tuple[Any, ...]]:
        with self._cursor() as cur:
            if params is None:
                cur.execute(sql)
            else:
                cur.execute(to_pyformat(sql), list(params))
            rows = [tuple(r) for r in cur.fetchall()]
        if self._owned and not self._in_txn:
            self._con.rollback()  # end the implicit read transaction
        return rows

    def fetch_arrow(self, sql: str) -> pa.Table:
        """Rows of a small query as an Arrow table (reports, samples; never whole tables)."""
        with self._cursor() as cur:
            cur.execute(sql)
            names = [d[0] for d in cur.description]
            rows = cur.fetchall()
        return pa.table({n: [r[i] for r in rows] for i, n in enumerate(names)})

    def bulk_insert(
        self,
        qualified: str,
        rows: pa.Table,
        hook: Hook | None = None,
        *,
        columns: Sequence[str] | None = None,
    ) -> None:
        data = csv_bytes(rows)
        names = [quote_identifier(c) for c in rows.column_names] if columns is None else columns
        cols = ", ".join(names)
        source: io.RawIOBase | io.BytesIO = (
            _HookedReader(data, hook) if hook is not None else io.BytesIO(data)
        )
        with self._cursor() as cur:
            cur.copy_expert(
                f"COPY {qualified} ({cols}) FROM STDIN WITH (FORMAT csv)", source, size=1 << 20
            )

    def begin_snapshot(self) -> None:
        """The first statement of the transaction psycopg2 opens makes it a snapshot."""
        self.begin()
        self.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")

    def export(self, sql: str, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        """``COPY (sql) TO STDOUT`` streamed into Arrow (:mod:`warehouse.postgres_export`)."""
        if self._con is None:
            raise WarehouseUnavailable(self.name, "not connected")
        return copy_out_batches(self._con, sql, schema, target=self.name)

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        if self._con is None or getattr(self._con, "autocommit", False):
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

    def reclaim(self, qualified: Sequence[str]) -> None:
        con = self._con
        con.autocommit = True  # VACUUM runs outside a transaction
        try:
            with con.cursor() as cur:
                cur.execute(f"VACUUM {', '.join(qualified)}")
        finally:
            con.autocommit = False

    def full_match(self, expression: str, pattern: str) -> str:
        literal = self.quote_literal(pattern)
        return f"({expression} ~ ('^(?:' || {literal} || ')$'))"

    def others_active(self) -> bool:
        """Whether another client runs a query on this database right now."""
        rows = self.fetch(
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
            "AND pid <> pg_backend_pid() AND backend_type = 'client backend' "
            "AND datname = current_database()"
        )
        return int(rows[0][0]) > 0


def _first_sql_line(sql: str) -> str:
    for line in sql.strip().splitlines():
        if line.strip():
            return line.strip()[:120]
    return ""
