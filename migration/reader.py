"""Reading a warehouse for the query service: consistent snapshots, Arrow out, user SQL fenced in.

A :class:`WarehouseReader` opens snapshots of one target (:meth:`WarehouseReader.snapshot`). A
:class:`WarehouseSnapshot` is one read-only transaction: everything read inside sees the
warehouse as of one committed state, and tells which:

* ``watermark``: the last batch the target's ledger holds (its loads are atomic with the ledger);
* ``merged_through``: the last batch folded into the full tables.

:meth:`WarehouseSnapshot.relation_sql` is the SELECT of a table *as of* a batch ``upto``
(``merged_through <= upto <= watermark``): the full table's rows overlaid with the newest delta of
each row id among the deltas of batches ``<= upto`` (a sink: its full and delta rows of batches
``<= upto``). :meth:`~WarehouseSnapshot.fetch` runs such service-made SQL and
:meth:`~WarehouseSnapshot.query` a user's query (already checked and rewritten by the query
service); both return Arrow and both run fenced in, because service SQL may carry a user's
predicate:

* **PostgreSQL**: a ``REPEATABLE READ READ ONLY`` transaction with ``SET LOCAL statement_timeout``,
  under ``SET LOCAL ROLE`` of a ``NOLOGIN`` reader role that holds only ``USAGE`` and ``SELECT`` on
  the warehouse schemas (created when the connecting user may; ``pg_read_file``, ``COPY ... TO
  PROGRAM``, ``lo_import`` and the like need privileges it lacks). Rows leave through ``COPY (...)
  TO STDOUT`` as CSV read by Arrow, never row by row through Python.
* **DuckDB**: the warehouse file's database instance runs with ``enable_external_access = false``
  (set before the first user query; the setting is per instance and cannot be turned back on while
  it lives, which is why this reader shares the migration target's instance instead of opening a
  second one), and a timer interrupts a statement that passes the time limit.
"""

from __future__ import annotations

import io
import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv

from etl_dataflows.types import ColumnType, arrow_type
from migration.exceptions import TargetUnavailable, WarehouseQueryFailed, WarehouseQueryTimeout
from migration.schema import WarehouseLayout
from staging.layout import q
from staging.store import arrow_of
from streamdi.watchdog import WATCHDOG

logger = logging.getLogger(__name__)

#: The PostgreSQL role user queries run as (``NOLOGIN``; ``USAGE``/``SELECT`` on the warehouse).
READER_ROLE = "streamdi_reader"

#: PostgreSQL type OIDs and the Arrow types their CSV text is read as (others stay text).
_PG_TYPES: dict[int, pa.DataType] = {
    16: pa.bool_(),
    20: pa.int64(),
    21: pa.int64(),
    23: pa.int64(),
    26: pa.int64(),
    700: pa.float64(),
    701: pa.float64(),
    1700: pa.float64(),
    1082: pa.date32(),
    1114: pa.timestamp("us"),
}


def relation_sql(layout: WarehouseLayout, name: str, upto: int, columns: Sequence[str]) -> str:
    """SELECT ``columns`` of table or sink ``name`` as of batch ``upto`` (see the module
    docstring); valid while ``upto`` is at least the last merged batch."""
    table = layout.tables[name]
    cols = ", ".join(q(c) for c in columns)
    full, delta = layout.full_name(name), layout.delta_name(name)
    upto = int(upto)
    if table.kind == "output":
        return (
            f"SELECT {cols} FROM {full} WHERE batch_id <= {upto} UNION ALL "
            f"SELECT {cols} FROM {delta} WHERE batch_id <= {upto}"
        )
    ids = ", ".join(q(c) for c in table.row_id)
    match = " AND ".join(f"d.{q(c)} = f.{q(c)}" for c in table.row_id)
    newest = (
        f"SELECT *, row_number() OVER (PARTITION BY {ids} ORDER BY batch_id DESC) AS _rn "
        f"FROM {delta} WHERE batch_id <= {upto}"
    )
    return (
        f"SELECT {cols} FROM {full} f WHERE NOT EXISTS (SELECT 1 FROM {delta} d WHERE "
        f"d.batch_id <= {upto} AND {match}) "
        f"UNION ALL SELECT {cols} FROM ({newest}) n WHERE _rn = 1 AND op = 'upsert'"
    )


def column_types(layout: WarehouseLayout, name: str) -> dict[str, pa.DataType]:
    """The Arrow type of every column of table or sink ``name`` in the warehouse."""
    flow = layout.flow
    kinds: dict[str, ColumnType | None]
    if name in flow.tables:
        kinds = dict(flow.tables[name].image_columns())
    else:
        from staging.layout import output_columns

        kinds = {"batch_id": "int64", **output_columns(flow, name)}
    return {c: arrow_type(k) if k is not None else pa.string() for c, k in kinds.items()}


class WarehouseSnapshot(ABC):
    """One read-only transaction on a warehouse; see the module docstring."""

    target: str
    dialect: str

    def __init__(self, layout: WarehouseLayout, watermark: int, merged_through: int) -> None:
        self.layout = layout
        self.watermark = watermark
        self.merged_through = merged_through

    def relation_sql(self, name: str, upto: int, columns: Sequence[str] | None = None) -> str:
        chosen = list(columns) if columns is not None else list(self.layout.tables[name].columns)
        return relation_sql(self.layout, name, upto, chosen)

    @abstractmethod
    def fetch(self, sql: str, types: dict[str, pa.DataType]) -> pa.Table:
        """Rows of service-made ``sql`` whose columns are ``types`` (names and Arrow types)."""

    @abstractmethod
    def query(self, sql: str) -> pa.Table:
        """Rows of a user's query (checked and rewritten by the caller), fenced in."""

    def count(self, name: str, upto: int) -> int:
        """Rows of ``name`` as of ``upto``."""
        sql = (
            f"SELECT count(*) AS n FROM ({self.relation_sql(name, upto, self._id_columns(name))}) c"
        )
        table = self.fetch(sql, {"n": pa.int64()})
        return int(table.column(0)[0].as_py())

    def size(self, name: str) -> int:
        """Rows of ``name``'s full and delta tables together: what a read of it scans (an upper
        bound of its row count, cheaper than :meth:`count`)."""
        sql = (
            f"SELECT (SELECT count(*) FROM {self.layout.full_name(name)}) + "
            f"(SELECT count(*) FROM {self.layout.delta_name(name)}) AS n"
        )
        table = self.fetch(sql, {"n": pa.int64()})
        return int(table.column(0)[0].as_py())

    def _id_columns(self, name: str) -> list[str]:
        table = self.layout.tables[name]
        return list(table.row_id) if table.row_id else ["batch_id"]


class WarehouseReader(ABC):
    """Opens :class:`WarehouseSnapshot` s of one target. ``ensure_layout`` makes sure the
    target's tables exist (the migrator opens the target) before the first read."""

    name: str
    dialect: str

    def __init__(self, layout: WarehouseLayout, ensure_layout: Callable[[], object]) -> None:
        self.layout = layout
        self._ensure_layout = ensure_layout

    @abstractmethod
    def snapshot(self, *, timeout_s: float) -> AbstractContextManager[WarehouseSnapshot]:
        """A context manager yielding a snapshot whose statements each stop after
        ``timeout_s`` seconds."""

    def close(self) -> None:  # noqa: B027 - readers without resources keep the default
        """Release connections."""


# -- PostgreSQL ------------------------------------------------------------------------------------


class _PostgresSnapshot(WarehouseSnapshot):
    target = "postgres"
    dialect = "postgres"

    def __init__(
        self, layout: WarehouseLayout, cursor: Any, watermark: int, merged: int, timeout_s: float
    ) -> None:
        super().__init__(layout, watermark, merged)
        self._cursor = cursor
        self._timeout_s = timeout_s

    def _copy(self, sql: str, names: list[str], types: list[pa.DataType]) -> pa.Table:
        buffer = io.BytesIO()
        with _pg_errors(self.target, self._timeout_s):
            self._cursor.copy_expert(f"COPY ({sql}) TO STDOUT WITH (FORMAT csv)", buffer)
        placeholder = [f"c{i}" for i in range(len(names))]
        if buffer.tell() == 0:
            arrays = [pa.array([], t) for t in types]
            return pa.Table.from_arrays(arrays, names=names)
        buffer.seek(0)
        table = pacsv.read_csv(
            buffer,
            read_options=pacsv.ReadOptions(column_names=placeholder, block_size=1 << 24),
            parse_options=pacsv.ParseOptions(newlines_in_values=True),
            convert_options=pacsv.ConvertOptions(
                column_types=dict(zip(placeholder, types, strict=True)),
                null_values=[""],
                strings_can_be_null=True,
                quoted_strings_can_be_null=False,
                true_values=["t"],
                false_values=["f"],
            ),
        )
        return pa.Table.from_arrays(list(table.columns), names=names)

    def fetch(self, sql: str, types: dict[str, pa.DataType]) -> pa.Table:
        return self._copy(sql, list(types), list(types.values()))

    def query(self, sql: str) -> pa.Table:
        # the result's shape first (planning only), then the rows through COPY
        with _pg_errors(self.target, self._timeout_s):
            self._cursor.execute(f"SELECT * FROM ({sql}) AS _shape LIMIT 0")
            description = list(self._cursor.description or [])
        names = [str(d[0]) for d in description]
        types = [_PG_TYPES.get(int(d[1]), pa.string()) for d in description]
        return self._copy(sql, names, types)


@contextmanager
def _pg_errors(target: str, timeout_s: float) -> Iterator[None]:
    import psycopg2
    import psycopg2.errors

    try:
        yield
    except psycopg2.errors.QueryCanceled as exc:
        raise WarehouseQueryTimeout(target, timeout_s) from exc
    except (psycopg2.OperationalError, psycopg2.InterfaceError) as exc:
        raise TargetUnavailable(target, _first_line(exc)) from exc
    except psycopg2.Error as exc:
        raise WarehouseQueryFailed(target, _first_line(exc)) from exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class PostgresReader(WarehouseReader):
    """Snapshots of a PostgreSQL warehouse from a small pool of connections."""

    name = "postgres"
    dialect = "postgres"

    def __init__(
        self,
        layout: WarehouseLayout,
        ensure_layout: Callable[[], object],
        dsn: str,
        connect_args: dict[str, str] | None = None,
        *,
        pool_size: int = 8,
        role: str | None = READER_ROLE,
    ) -> None:
        super().__init__(layout, ensure_layout)
        self._dsn = dsn
        self._args = dict(connect_args or {})
        self._idle: list[Any] = []
        self._slots = threading.BoundedSemaphore(pool_size)
        self._lock = threading.Lock()
        self._role = role
        self._prepared = False

    def _connect(self) -> Any:
        import psycopg2

        try:
            return psycopg2.connect(self._dsn, **self._args)
        except psycopg2.Error as exc:
            raise TargetUnavailable(self.name, _first_line(exc)) from exc

    def _prepare(self) -> None:
        """Once: the layout exists, and the reader role exists with read access (or, when the
        connecting user may not create it, reads run as that user: logged)."""
        if self._prepared:
            return
        self._ensure_layout()
        if self._role is not None:
            self._role = self._create_role(self._role)
        self._prepared = True

    def _create_role(self, role: str) -> str | None:
        import psycopg2

        con = self._connect()
        schemas = ", ".join(q(s) for s in self.layout.schemas)
        try:
            with con.cursor() as cur:
                cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [READER_ROLE])
                cur.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role])
                if not cur.fetchall():
                    cur.execute(f"CREATE ROLE {q(role)} NOLOGIN")
                cur.execute(
                    "SELECT rolsuper FROM pg_roles WHERE rolname = current_user",
                )
                if not cur.fetchall()[0][0]:
                    cur.execute(f"GRANT {q(role)} TO CURRENT_USER")
                cur.execute(f"GRANT USAGE ON SCHEMA {schemas} TO {q(role)}")
                cur.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {schemas} TO {q(role)}")
            con.commit()
            with con.cursor() as cur:
                cur.execute(f"SET LOCAL ROLE {q(role)}")  # proves we may take it
            con.rollback()
            return role
        except psycopg2.Error as exc:
            with suppress(psycopg2.Error):
                con.rollback()
            logger.warning(
                "postgres reader role unavailable role=%s: %s; user queries run as the "
                "connecting user (still read-only, with a statement timeout)",
                role,
                _first_line(exc),
            )
            return None
        finally:
            con.close()

    @contextmanager
    def snapshot(self, *, timeout_s: float) -> Iterator[WarehouseSnapshot]:
        import psycopg2
        import psycopg2.extensions

        self._prepare()
        self._slots.acquire()
        con: Any = None
        broken = False
        try:
            with self._lock:
                con = self._idle.pop() if self._idle else None
            if con is None or con.closed:
                con = self._connect()
            try:
                con.set_session(
                    isolation_level=psycopg2.extensions.ISOLATION_LEVEL_REPEATABLE_READ,
                    readonly=True,
                )
                cur = con.cursor()
                ms = max(1, int(timeout_s * 1000))
                cur.execute(f"SET LOCAL statement_timeout = {ms}")
                cur.execute("SET LOCAL TimeZone = 'UTC'")
                layout = self.layout
                cur.execute(
                    f"SELECT (SELECT coalesce(max(batch_id), 0) FROM {layout.ledger_name} "
                    f"WHERE stream = %s), (SELECT coalesce(max(through_batch), 0) FROM "
                    f"{layout.merges_name} WHERE stream = %s)",
                    [layout.stream, layout.stream],
                )
                watermark, merged = cur.fetchone()
                if self._role is not None:
                    cur.execute(f"SET LOCAL ROLE {q(self._role)}")
            except (psycopg2.OperationalError, psycopg2.InterfaceError) as exc:
                broken = True
                raise TargetUnavailable(self.name, _first_line(exc)) from exc
            except psycopg2.Error as exc:
                broken = True
                raise TargetUnavailable(self.name, _first_line(exc)) from exc
            try:
                yield _PostgresSnapshot(layout, cur, int(watermark), int(merged), timeout_s)
            except TargetUnavailable:
                broken = True
                raise
        finally:
            if con is not None:
                try:
                    if not broken and not con.closed:
                        con.rollback()
                        # nothing a query set for the session outlives its snapshot
                        con.autocommit = True
                        with con.cursor() as reset:
                            reset.execute("DISCARD ALL")
                        con.autocommit = False
                except psycopg2.Error:
                    broken = True
                if broken or con.closed:
                    with suppress(psycopg2.Error):
                        con.close()
                else:
                    with self._lock:
                        self._idle.append(con)
            self._slots.release()

    def close(self) -> None:
        import psycopg2

        with self._lock:
            idle, self._idle = self._idle, []
        for con in idle:
            with suppress(psycopg2.Error):
                con.close()


# -- DuckDB ------------------------------------------------------------------------------------


class _DuckDBSnapshot(WarehouseSnapshot):
    target = "duckdb"
    dialect = "duckdb"

    def __init__(
        self, layout: WarehouseLayout, cursor: Any, watermark: int, merged: int, timeout_s: float
    ) -> None:
        super().__init__(layout, watermark, merged)
        self._cursor = cursor
        self._timeout_s = timeout_s

    def _run(self, sql: str) -> pa.Table:
        with (
            WATCHDOG.armed(self._timeout_s, self._cursor.interrupt),
            _duck_errors(self.target, self._timeout_s),
        ):
            return arrow_of(self._cursor.sql(sql))

    def fetch(self, sql: str, types: dict[str, pa.DataType]) -> pa.Table:
        table = self._run(sql)
        return table.rename_columns(list(types)).cast(pa.schema(list(types.items())))

    def query(self, sql: str) -> pa.Table:
        return self._run(sql)


@contextmanager
def _duck_errors(target: str, timeout_s: float) -> Iterator[None]:
    import duckdb

    try:
        yield
    except duckdb.InterruptException as exc:
        raise WarehouseQueryTimeout(target, timeout_s) from exc
    except (duckdb.IOException, duckdb.ConnectionException) as exc:
        raise TargetUnavailable(target, _first_line(exc)) from exc
    except duckdb.Error as exc:
        raise WarehouseQueryFailed(target, _first_line(exc)) from exc


class DuckDBReader(WarehouseReader):
    """Snapshots of the DuckDB warehouse file through cursors of the migration target's own
    connection (``connection()``): one database instance per file and process, so its
    ``enable_external_access = false`` covers every user query. Cursors live for one snapshot
    only: the target may close and reopen its connection between snapshots. ``mark_busy``
    tells the target a reader is at work (its idle pull waits)."""

    name = "duckdb"
    dialect = "duckdb"

    def __init__(
        self,
        layout: WarehouseLayout,
        ensure_layout: Callable[[], object],
        connection: Callable[[], Any],
        mark_busy: Callable[[float], None] | None = None,
    ) -> None:
        super().__init__(layout, ensure_layout)
        self._connection = connection
        self._mark_busy = mark_busy
        self._locked: Any = None  # the target connection whose instance was locked down

    @contextmanager
    def snapshot(self, *, timeout_s: float) -> Iterator[WarehouseSnapshot]:
        self._ensure_layout()
        if self._mark_busy is not None:
            self._mark_busy(timeout_s)
        with _duck_errors(self.name, timeout_s):
            connection = self._connection()
            cursor = connection.cursor()
        try:
            with _duck_errors(self.name, timeout_s):
                if self._locked is not connection:
                    # a new connection may be a new database instance: lock it down (once)
                    cursor.execute("SET enable_external_access = false")
                    self._locked = connection
                cursor.execute("BEGIN TRANSACTION")
                layout = self.layout
                watermark, merged = cursor.execute(
                    f"SELECT (SELECT coalesce(max(batch_id), 0) FROM {layout.ledger_name} "
                    f"WHERE stream = ?), (SELECT coalesce(max(through_batch), 0) FROM "
                    f"{layout.merges_name} WHERE stream = ?)",
                    [layout.stream, layout.stream],
                ).fetchall()[0]
            yield _DuckDBSnapshot(layout, cursor, int(watermark), int(merged), timeout_s)
        finally:
            with suppress(Exception):
                cursor.execute("ROLLBACK")
            with suppress(Exception):
                cursor.close()
