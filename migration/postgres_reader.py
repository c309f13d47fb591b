"""The PostgreSQL warehouse reader: snapshots on connections of the reader login, answers through a
byte-capped ``COPY``; see :mod:`migration.reader` for the contract and
:mod:`migration.reader_login` for the login."""

from __future__ import annotations

import io
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv

from migration.exceptions import (
    TargetUnavailable,
    WarehouseQueryFailed,
    WarehouseQueryOutOfMemory,
    WarehouseQueryTimeout,
    WarehouseQueryTooLarge,
)
from migration.reader import DEFAULT_MAX_BYTES, WarehouseReader, WarehouseSnapshot
from migration.reader_login import LoginPlan, ReaderLogin, open_login
from migration.schema import WarehouseLayout
from streamdi.watchdog import statement

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


#: What a PostgreSQL row-size guard says when a row passes the cap (see ``_row_guard``).
_ROW_TOO_LARGE = "streamdi: answer row too large"


class _CappedSink(io.RawIOBase):
    """Where ``COPY ... TO STDOUT`` writes (through :meth:`writer`, a 1 MiB buffer in C, so the
    count costs nothing per row): keeps at most ``cap`` bytes; past it, cancels the statement
    (``cancel``) and raises, so nothing more is read or drained."""

    def __init__(self, cap: int, cancel: Callable[[], object], target: str) -> None:
        self.buffer = io.BytesIO()
        self.cap = cap
        self.passed = False
        self._size = 0
        self._cancel = cancel
        self._target = target

    def writer(self) -> io.BufferedWriter:
        return io.BufferedWriter(self, buffer_size=1 << 20)

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        size = len(data)
        if self._size + size > self.cap:
            self.passed = True
            with suppress(Exception):
                self._cancel()
            raise WarehouseQueryTooLarge(self._target, self.cap)
        self._size += size
        self.buffer.write(data)
        return size


#: Type OIDs of fixed, small size (bool, ints, floats, dates, times, intervals, uuid, money):
#: a row of only these needs no size check.
_FIXED_SIZE = frozenset(
    {16, 18, 20, 21, 23, 26, 700, 701, 790, 1082, 1083, 1114, 1184, 1186, 1266, 2950}
)


def _row_guard(sql: str, cap: int, oids: list[int]) -> str:
    """``sql`` (whose columns have type ``oids``) with every row checked on the server to be at
    most ``cap`` bytes in its variable-size columns: a larger one fails the statement (with
    :data:`_ROW_TOO_LARGE` in its message) before it is sent, so the service never receives a
    row larger than its cap in one piece. Columns are renamed by position inside (the caller
    names them)."""
    varying = [i for i, oid in enumerate(oids) if oid not in _FIXED_SIZE]
    if not varying:
        return sql
    names = ", ".join(f"c{i}" for i in range(len(oids)))
    size = " + ".join(f"coalesce(pg_column_size(_q.c{i}), 0)" for i in varying)
    return (
        f"SELECT * FROM ({sql}) AS _q({names}) WHERE CASE WHEN {size} > {int(cap)} "
        f"THEN ('{_ROW_TOO_LARGE} ' || ({size}))::int = 0 ELSE true END"
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
                writer = sink.writer()
                self._cursor.copy_expert(f"COPY ({sql}) TO STDOUT WITH (FORMAT csv)", writer)
                writer.flush()
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
        oids = [int(d[1]) for d in description]
        return self._copy(_row_guard(sql, cap, oids), names, types, cap)


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
        if self._login is not None:
            return
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
