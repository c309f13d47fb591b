"""PostgreSQL as a migration target: psycopg2, rows moved with ``COPY ... FROM STDIN (csv)``.

SQLAlchemy owns the connection (one pooled connection, ``pool_pre_ping``) and emits the DDL from
the layout's metadata; the rows travel as CSV written by Arrow's C++ writer straight into
``copy_expert`` (strings quoted, nulls as empty unquoted fields, so an empty string stays an empty
string). The stream lock is a transaction-scoped advisory lock, so two migrators of one stream (a
pipeline and a command, two hosts) never interleave a load or a merge.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import psycopg2
import psycopg2.extensions
import pyarrow as pa
import pyarrow.csv as pacsv
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from migration.exceptions import TargetUnavailable
from migration.schema import LEDGER_SCHEMA, WarehouseLayout
from migration.targets.base import BaseTarget, Hook
from staging.layout import q

logger = logging.getLogger(__name__)

_CSV = pacsv.WriteOptions(include_header=False, batch_size=65_536)


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


class PostgresTarget(BaseTarget):
    """See the module docstring. ``dsn`` is a libpq URL or key=value string; ``connect_args``
    are extra libpq parameters (TLS: ``sslmode``, ``sslrootcert``...)."""

    name = "postgres"

    def __init__(
        self, layout: WarehouseLayout, dsn: str, connect_args: dict[str, str] | None = None
    ) -> None:
        super().__init__(layout)
        self._dsn = dsn
        self._connect_args = dict(connect_args or {})
        self._engine: sa.Engine | None = None
        self._con: Any = None
        self._in_txn = False

    @property
    def dsn(self) -> str:
        """The libpq DSN this target connects with (readers of the same warehouse reuse it)."""
        return self._dsn

    @property
    def connect_args(self) -> dict[str, str]:
        return dict(self._connect_args)

    def _new_connection(self) -> psycopg2.extensions.connection:
        return psycopg2.connect(self._dsn, **self._connect_args)

    def _connect(self) -> None:
        engine = sa.create_engine(
            "postgresql+psycopg2://", creator=self._new_connection, poolclass=NullPool
        )
        layout = self.layout
        with engine.begin() as conn:
            # one DDL writer at a time per database (CREATE ... IF NOT EXISTS races otherwise)
            conn.execute(
                sa.text("SELECT pg_advisory_xact_lock(hashtext(:k))"), {"k": LEDGER_SCHEMA}
            )
            for schema in layout.schemas:
                conn.execute(sa.text(f"CREATE SCHEMA IF NOT EXISTS {q(schema)}"))
            layout.metadata.create_all(conn, checkfirst=True)
        self._engine = engine
        self._con = engine.raw_connection()
        self._in_txn = False

    def close(self) -> None:
        if self._con is not None:
            with suppress(psycopg2.Error):
                self._con.close()
        self._con = None
        if self._engine is not None:
            self._engine.dispose()
        self._engine = None
        self._opened = False

    @contextmanager
    def _guard(self) -> Iterator[None]:
        try:
            yield
        except (psycopg2.Error, sa.exc.SQLAlchemyError, OSError) as exc:
            detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            broken = isinstance(
                exc,
                psycopg2.OperationalError
                | psycopg2.InterfaceError
                | OSError
                | sa.exc.OperationalError
                | sa.exc.InterfaceError,
            )
            if broken or self._con is None or bool(getattr(self._con, "closed", False)):
                self.close()
            raise TargetUnavailable(self.name, detail) from exc

    def _cursor(self) -> Any:
        if self._con is None:
            raise TargetUnavailable(self.name, "not connected")
        return self._con.cursor()

    def _begin(self) -> None:
        self._in_txn = True
        with self._cursor() as cur:
            cur.execute(
                "SELECT pg_advisory_xact_lock(hashtext(%s))", [f"streamdi:{self.layout.stream}"]
            )

    def _commit(self) -> None:
        self._con.commit()
        self._in_txn = False

    def _rollback(self) -> None:
        self._in_txn = False
        if self._con is None:
            return
        try:
            self._con.rollback()
        except psycopg2.Error as exc:
            logger.warning("rollback failed target=postgres: %s", exc)

    def _execute(self, sql: str, params: list[Any] | None = None) -> int:
        with self._cursor() as cur:
            cur.execute(sql.replace("?", "%s"), params)
            return int(cur.rowcount)

    def fetch(self, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
        with self._cursor() as cur:
            cur.execute(sql.replace("?", "%s"), params)
            rows = [tuple(r) for r in cur.fetchall()]
        if not self._in_txn:
            self._con.rollback()  # end the implicit read transaction
        return rows

    def _bulk_insert(self, qualified: str, rows: pa.Table, hook: Hook | None) -> None:
        data = csv_bytes(rows)
        cols = ", ".join(q(c) for c in rows.column_names)
        source: io.RawIOBase | io.BytesIO = (
            _HookedReader(data, hook) if hook is not None else io.BytesIO(data)
        )
        with self._cursor() as cur:
            cur.copy_expert(
                f"COPY {qualified} ({cols}) FROM STDIN WITH (FORMAT csv)", source, size=1 << 20
            )

    def busy(self) -> bool:
        with self._guard():
            rows = self.fetch(
                "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
                "AND pid <> pg_backend_pid() AND backend_type = 'client backend' "
                "AND datname = current_database()"
            )
        return int(rows[0][0]) > 0
