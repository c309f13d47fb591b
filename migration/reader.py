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
service); both return Arrow, both stop at a byte cap (``max_bytes``: reading stops there and
:class:`~migration.exceptions.WarehouseQueryTooLarge` is raised), both run each statement under
its deadline and inside the current query's scope (:func:`streamdi.watchdog.statement`: the
service may interrupt it), and both run fenced in, because service SQL may carry a user's
predicate:

* **PostgreSQL**: connections whose *session* user is the reader login of
  :mod:`migration.reader_login` (not a superuser, a member of no role, ``SELECT`` on the
  warehouse only; ``SET ROLE`` under another session user would be no fence), in a
  ``REPEATABLE READ READ ONLY`` transaction with ``SET LOCAL statement_timeout``. Rows leave
  through ``COPY (...) TO STDOUT`` as CSV into a buffer that counts bytes (past the cap the
  statement is cancelled and the connection dropped, never drained), read by Arrow; a user
  query's rows are each checked to be smaller than the cap on the server, before they are sent
  (libpq holds a whole row in memory).
* **DuckDB**: every snapshot opens its own connection to the warehouse file's database instance
  (the one the migration target opened: one instance per file and process; a connection of its
  own, not a cursor of the target's, so closing either never waits for the other), which runs
  with ``enable_external_access = false``, a memory limit and a thread limit
  (:func:`migration.targets.duckdb_file.lock_down`, checked on every snapshot). Results stream
  in bounded pieces (:mod:`migration.bounded`).
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
from migration.bounded import read_bounded
from migration.exceptions import (
    TargetUnavailable,
    WarehouseQueryFailed,
    WarehouseQueryOutOfMemory,
    WarehouseQueryTimeout,
    WarehouseQueryTooLarge,
)
from migration.reader_login import LoginPlan, ReaderLogin, open_login
from migration.schema import WarehouseLayout
from staging.layout import q
from streamdi.watchdog import statement

logger = logging.getLogger(__name__)

#: Default byte cap of one read (``API__MAX_ANSWER_MB`` sets the service's).
DEFAULT_MAX_BYTES = 64 << 20

#: What a PostgreSQL row-size guard says when a row passes the cap (see ``_row_guard``).
_ROW_TOO_LARGE = "streamdi: answer row too large"

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
    """One read-only transaction on a warehouse; see the module docstring. Each statement stops
    after ``timeout_s``; each read at ``max_bytes`` unless it names its own cap."""

    target: str
    dialect: str

    def __init__(
        self,
        layout: WarehouseLayout,
        watermark: int,
        merged_through: int,
        *,
        timeout_s: float,
        max_bytes: int,
    ) -> None:
        self.layout = layout
        self.watermark = watermark
        self.merged_through = merged_through
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes

    def relation_sql(self, name: str, upto: int, columns: Sequence[str] | None = None) -> str:
        chosen = list(columns) if columns is not None else list(self.layout.tables[name].columns)
        return relation_sql(self.layout, name, upto, chosen)

    @abstractmethod
    def fetch(
        self, sql: str, types: dict[str, pa.DataType], *, max_bytes: int | None = None
    ) -> pa.Table:
        """Rows of service-made ``sql`` whose columns are ``types`` (names and Arrow types)."""

    @abstractmethod
    def query(self, sql: str, *, max_bytes: int | None = None) -> pa.Table:
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

    def prepare(self) -> None:  # noqa: B027 - readers without set-up keep the default
        """Set up and verify what user queries will run as (at the service's start; the first
        snapshot does it otherwise). Raises :class:`~migration.exceptions.ReaderLoginRefused`
        on a configuration that is not safe."""

    @abstractmethod
    def snapshot(
        self, *, timeout_s: float, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> AbstractContextManager[WarehouseSnapshot]:
        """A context manager yielding a snapshot whose statements each stop after
        ``timeout_s`` seconds and whose reads stop at ``max_bytes``."""

    def close(self) -> None:  # noqa: B027 - readers without resources keep the default
        """Release connections."""


# -- PostgreSQL ------------------------------------------------------------------------------------


class _CappedSink(io.RawIOBase):
    """Where ``COPY ... TO STDOUT`` writes: keeps at most ``cap`` bytes; past it, cancels the
    statement (``cancel``) and raises, so nothing more is read or drained."""

    def __init__(self, cap: int, cancel: Callable[[], object], target: str) -> None:
        self.buffer = io.BytesIO()
        self.cap = cap
        self.passed = False
        self._cancel = cancel
        self._target = target

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        size = len(data)
        if self.buffer.tell() + size > self.cap:
            self.passed = True
            with suppress(Exception):
                self._cancel()
            raise WarehouseQueryTooLarge(self._target, self.cap)
        self.buffer.write(data)
        return size


def _row_guard(sql: str, cap: int) -> str:
    """``sql`` whose every row is checked on the server to be at most ``cap`` bytes: a larger
    one fails the statement (with :data:`_ROW_TOO_LARGE` in its message) before it is sent, so
    the service never receives a row larger than its cap in one piece."""
    return (
        f"SELECT _q.* FROM ({sql}) AS _q WHERE CASE WHEN pg_column_size(_q.*) > {int(cap)} "
        f"THEN ('{_ROW_TOO_LARGE} ' || pg_column_size(_q.*))::int = 0 ELSE true END"
    )


class _PostgresSnapshot(WarehouseSnapshot):
    target = "postgres"
    dialect = "postgres"

    def __init__(
        self,
        layout: WarehouseLayout,
        connection: Any,
        cursor: Any,
        watermark: int,
        merged: int,
        *,
        timeout_s: float,
        max_bytes: int,
    ) -> None:
        super().__init__(layout, watermark, merged, timeout_s=timeout_s, max_bytes=max_bytes)
        self._con = connection
        self._cursor = cursor
        self.broken = False

    def _copy(
        self, sql: str, names: list[str], types: list[pa.DataType], max_bytes: int
    ) -> pa.Table:
        sink = _CappedSink(max_bytes, self._con.cancel, self.target)
        try:
            with (
                statement(self.timeout_s, self._con.cancel),
                _pg_errors(self.target, self.timeout_s, max_bytes),
            ):
                self._cursor.copy_expert(f"COPY ({sql}) TO STDOUT WITH (FORMAT csv)", sink)
        except WarehouseQueryTooLarge:
            self.broken = True  # the COPY was cut short: drop the connection, never drain it
            raise
        except (WarehouseQueryTimeout, TargetUnavailable):
            self.broken = True
            raise
        buffer = sink.buffer
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

    def fetch(
        self, sql: str, types: dict[str, pa.DataType], *, max_bytes: int | None = None
    ) -> pa.Table:
        return self._copy(sql, list(types), list(types.values()), max_bytes or self.max_bytes)

    def query(self, sql: str, *, max_bytes: int | None = None) -> pa.Table:
        cap = max_bytes or self.max_bytes
        # the result's shape first (planning only), then the rows through COPY
        with (
            statement(self.timeout_s, self._con.cancel),
            _pg_errors(self.target, self.timeout_s, cap),
        ):
            self._cursor.execute(f"SELECT * FROM ({sql}) AS _shape LIMIT 0")
            description = list(self._cursor.description or [])
        names = [str(d[0]) for d in description]
        types = [_PG_TYPES.get(int(d[1]), pa.string()) for d in description]
        return self._copy(_row_guard(sql, cap), names, types, cap)


@contextmanager
def _pg_errors(target: str, timeout_s: float, max_bytes: int = 0) -> Iterator[None]:
    import psycopg2
    import psycopg2.errors

    try:
        yield
    except psycopg2.errors.QueryCanceled as exc:
        raise WarehouseQueryTimeout(target, timeout_s) from exc
    except psycopg2.errors.OutOfMemory as exc:
        raise WarehouseQueryOutOfMemory(target, _first_line(exc)) from exc
    except (psycopg2.OperationalError, psycopg2.InterfaceError) as exc:
        raise TargetUnavailable(target, _first_line(exc)) from exc
    except psycopg2.Error as exc:
        if _ROW_TOO_LARGE in str(exc):
            raise WarehouseQueryTooLarge(target, max_bytes) from exc
        raise WarehouseQueryFailed(target, _first_line(exc)) from exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class PostgresReader(WarehouseReader):
    """Snapshots of a PostgreSQL warehouse from a small pool of connections of the reader login
    (``login``: the operator's DSN or a role streamdi manages; see :mod:`migration.reader_login`).
    ``dsn``/``connect_args`` are the migration's, used only to set the login up."""

    name = "postgres"
    dialect = "postgres"

    def __init__(
        self,
        layout: WarehouseLayout,
        ensure_layout: Callable[[], object],
        dsn: str,
        connect_args: dict[str, str] | None = None,
        *,
        login: LoginPlan,
        pool_size: int = 8,
    ) -> None:
        super().__init__(layout, ensure_layout)
        self._dsn = dsn
        self._args = dict(connect_args or {})
        self._plan = login
        self._login: ReaderLogin | None = None
        self._idle: list[Any] = []
        self._slots = threading.BoundedSemaphore(pool_size)
        self._lock = threading.Lock()
        self._prepare_lock = threading.Lock()

    @property
    def login(self) -> ReaderLogin | None:
        """The login user queries run as, once prepared."""
        return self._login

    def prepare(self) -> None:
        """Once: the layout exists, the reader login is set up and verified (see
        :mod:`migration.reader_login`). Raises
        :class:`~migration.exceptions.ReaderLoginRefused` (fix the configuration) or
        :class:`~migration.exceptions.TargetUnavailable` (tried again on the next snapshot)."""
        with self._prepare_lock:
            if self._login is not None:
                return
            self._ensure_layout()
            self._login = open_login(self._plan, self._dsn, self._args, self.layout)

    def _connect(self) -> Any:
        import psycopg2

        login = self._login
        assert login is not None
        try:
            return psycopg2.connect(login.dsn, **login.params)
        except psycopg2.Error as exc:
            raise TargetUnavailable(self.name, _first_line(exc)) from exc

    @contextmanager
    def snapshot(
        self, *, timeout_s: float, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> Iterator[WarehouseSnapshot]:
        import psycopg2
        import psycopg2.extensions

        self.prepare()
        self._slots.acquire()
        con: Any = None
        broken = False
        snap: _PostgresSnapshot | None = None
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
            except psycopg2.Error as exc:
                broken = True
                raise TargetUnavailable(self.name, _first_line(exc)) from exc
            snap = _PostgresSnapshot(
                layout,
                con,
                cur,
                int(watermark),
                int(merged),
                timeout_s=timeout_s,
                max_bytes=max_bytes,
            )
            try:
                yield snap
            except TargetUnavailable:
                broken = True
                raise
        finally:
            if snap is not None and snap.broken:
                broken = True
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
        self,
        layout: WarehouseLayout,
        connection: Any,
        watermark: int,
        merged: int,
        *,
        timeout_s: float,
        max_bytes: int,
    ) -> None:
        super().__init__(layout, watermark, merged, timeout_s=timeout_s, max_bytes=max_bytes)
        self._con = connection

    def _run(self, sql: str, max_bytes: int | None) -> pa.Table:
        cap = max_bytes or self.max_bytes
        with (
            statement(self.timeout_s, self._con.interrupt),
            _duck_errors(self.target, self.timeout_s),
        ):
            return read_bounded(
                self._con.sql(sql), cap, lambda n: WarehouseQueryTooLarge(self.target, n)
            )

    def fetch(
        self, sql: str, types: dict[str, pa.DataType], *, max_bytes: int | None = None
    ) -> pa.Table:
        table = self._run(sql, max_bytes)
        return table.rename_columns(list(types)).cast(pa.schema(list(types.items())))

    def query(self, sql: str, *, max_bytes: int | None = None) -> pa.Table:
        return self._run(sql, max_bytes)


@contextmanager
def _duck_errors(target: str, timeout_s: float) -> Iterator[None]:
    import duckdb

    try:
        yield
    except duckdb.InterruptException as exc:
        raise WarehouseQueryTimeout(target, timeout_s) from exc
    except duckdb.OutOfMemoryException as exc:
        raise WarehouseQueryOutOfMemory(target, _first_line(exc)) from exc
    except (duckdb.IOException, duckdb.ConnectionException) as exc:
        raise TargetUnavailable(target, _first_line(exc)) from exc
    except duckdb.Error as exc:
        raise WarehouseQueryFailed(target, _first_line(exc)) from exc


class DuckDBReader(WarehouseReader):
    """Snapshots of the DuckDB warehouse file ``path``, each on a connection of its own to the
    database instance the migration target opened (``ensure_layout`` opens it first; a
    connection with the same, empty configuration joins it). ``lock_down`` (the target's
    :meth:`~migration.targets.duckdb_file.DuckDBTarget.lock_down`) is applied again whenever a
    snapshot finds external access on (a new instance). ``mark_busy`` tells the target a reader is
    at work (its idle pull waits)."""

    name = "duckdb"
    dialect = "duckdb"

    def __init__(
        self,
        layout: WarehouseLayout,
        ensure_layout: Callable[[], object],
        path: str,
        lock_down: Callable[[Any], None],
        mark_busy: Callable[[float], None] | None = None,
    ) -> None:
        super().__init__(layout, ensure_layout)
        self._path = path
        self._lock_down = lock_down
        self._mark_busy = mark_busy

    @contextmanager
    def snapshot(
        self, *, timeout_s: float, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> Iterator[WarehouseSnapshot]:
        import duckdb

        self._ensure_layout()
        if self._mark_busy is not None:
            self._mark_busy(timeout_s)
        with _duck_errors(self.name, timeout_s):
            con = duckdb.connect(self._path)
        try:
            with _duck_errors(self.name, timeout_s):
                external = con.execute(
                    "SELECT current_setting('enable_external_access')"
                ).fetchall()[0][0]
                if external:  # a new instance (the target reconnected meanwhile): lock it down
                    self._lock_down(con)
                con.execute("BEGIN TRANSACTION")
                layout = self.layout
                watermark, merged = con.execute(
                    f"SELECT (SELECT coalesce(max(batch_id), 0) FROM {layout.ledger_name} "
                    f"WHERE stream = ?), (SELECT coalesce(max(through_batch), 0) FROM "
                    f"{layout.merges_name} WHERE stream = ?)",
                    [layout.stream, layout.stream],
                ).fetchall()[0]
            yield _DuckDBSnapshot(
                layout, con, int(watermark), int(merged), timeout_s=timeout_s, max_bytes=max_bytes
            )
        finally:
            with suppress(Exception):
                con.execute("ROLLBACK")
            with suppress(Exception):
                con.close()
