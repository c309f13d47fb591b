"""Fenced, bounded reads on PostgreSQL: what a reader of user SQL runs on its connections.

A fenced read runs on a connection whose *session* user may only read (the caller connects as
such a login: :func:`connect`), in a ``REPEATABLE READ READ ONLY`` transaction with ``SET LOCAL
statement_timeout`` (:func:`begin_fenced`). Rows leave through ``COPY (...) TO STDOUT`` as CSV
into a buffer that counts bytes (:func:`copy_out`: past the cap the statement is cancelled and
the caller must drop the connection, never drain it), read by Arrow. For a user query,
:func:`result_shape` plans it first and :func:`row_guard` makes the server check each row against
the cap before it is sent (libpq holds a whole row in memory). :func:`end_fenced` leaves a
connection clean for the next read (``DISCARD ALL``). Errors are mapped by
:func:`postgres_errors`.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

import psycopg2
import psycopg2.errors
import psycopg2.extensions
import pyarrow as pa
import pyarrow.csv as pacsv

from streamdi.errors import ConfigurationError
from streamdi.watchdog import statement
from warehouse.exceptions import (
    WarehouseQueryFailed,
    WarehouseQueryOutOfMemory,
    WarehouseQueryTimeout,
    WarehouseQueryTooLarge,
    WarehouseUnavailable,
    first_line,
)

#: PostgreSQL type OIDs and the Arrow types their CSV text is read as (others stay text).
PG_TYPES: dict[int, pa.DataType] = {
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

#: What a PostgreSQL row-size guard says when a row passes the cap (see :func:`row_guard`).
ROW_TOO_LARGE = "streamdi: answer row too large"

#: Type OIDs of fixed, small size (bool, ints, floats, dates, times, intervals, uuid, money):
#: a row of only these needs no size check.
_FIXED_SIZE = frozenset(
    {16, 18, 20, 21, 23, 26, 700, 701, 790, 1082, 1083, 1114, 1184, 1186, 1266, 2950}
)


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


def row_guard(sql: str, cap: int, oids: list[int]) -> str:
    """``sql`` (whose columns have type ``oids``) with every row checked on the server to be at
    most ``cap`` bytes in its variable-size columns: a larger one fails the statement (with
    :data:`ROW_TOO_LARGE` in its message) before it is sent, so the service never receives a
    row larger than its cap in one piece. Columns are renamed by position inside (the caller
    names them)."""
    varying = [i for i, oid in enumerate(oids) if oid not in _FIXED_SIZE]
    if not varying:
        return sql
    names = ", ".join(f"c{i}" for i in range(len(oids)))
    size = " + ".join(f"coalesce(pg_column_size(_q.c{i}), 0)" for i in varying)
    return (
        f"SELECT * FROM ({sql}) AS _q({names}) WHERE CASE WHEN {size} > {int(cap)} "
        f"THEN ('{ROW_TOO_LARGE} ' || ({size}))::int = 0 ELSE true END"
    )


@contextmanager
def postgres_errors(target: str, timeout_s: float, max_bytes: int = 0) -> Iterator[None]:
    """psycopg2 errors of a bounded read as warehouse errors: a cancel is the deadline
    (:class:`~warehouse.exceptions.WarehouseQueryTimeout`), a lost connection
    :class:`~warehouse.exceptions.WarehouseUnavailable`, a row past the guard
    :class:`~warehouse.exceptions.WarehouseQueryTooLarge`, anything else
    :class:`~warehouse.exceptions.WarehouseQueryFailed`."""
    try:
        yield
    except psycopg2.errors.QueryCanceled as exc:
        raise WarehouseQueryTimeout(target, timeout_s) from exc
    except psycopg2.errors.OutOfMemory as exc:
        raise WarehouseQueryOutOfMemory(target, first_line(exc)) from exc
    except (psycopg2.OperationalError, psycopg2.InterfaceError) as exc:
        raise WarehouseUnavailable(target, first_line(exc)) from exc
    except psycopg2.Error as exc:
        if ROW_TOO_LARGE in str(exc):
            raise WarehouseQueryTooLarge(target, max_bytes) from exc
        raise WarehouseQueryFailed(target, first_line(exc)) from exc


def connect(dsn: str, params: dict[str, str], target: str = "postgres") -> Any:
    """A new psycopg2 connection (``psycopg2.connect(dsn, **params)``); raises
    :class:`~warehouse.exceptions.WarehouseUnavailable` when the server cannot be reached, and
    :class:`~streamdi.errors.ConfigurationError` when the DSN or its options do not parse (a bad
    setting is not an outage: retrying would never heal it)."""
    try:
        return psycopg2.connect(dsn, **params)
    except psycopg2.ProgrammingError as exc:
        raise ConfigurationError(
            [
                (
                    "POSTGRES__DSN or API__POSTGRES_READER_DSN",
                    f"a libpq connection string ({first_line(exc)})",
                )
            ]
        ) from exc
    except psycopg2.Error as exc:
        raise WarehouseUnavailable(target, first_line(exc)) from exc


def begin_fenced(
    con: Any, timeout_s: float, first_sql: str, params: list[Any], target: str = "postgres"
) -> tuple[Any, tuple[Any, ...]]:
    """Open a ``REPEATABLE READ READ ONLY`` transaction on ``con`` whose statements each stop
    after ``timeout_s`` (``SET LOCAL statement_timeout``), in UTC, and run its first statement
    ``first_sql`` (``%s`` parameters ``params``); the cursor and that statement's first row.
    Raises :class:`~warehouse.exceptions.WarehouseUnavailable` on any driver error (drop the
    connection)."""
    try:
        con.set_session(
            isolation_level=psycopg2.extensions.ISOLATION_LEVEL_REPEATABLE_READ,
            readonly=True,
        )
        cur = con.cursor()
        ms = max(1, int(timeout_s * 1000))
        cur.execute(f"SET LOCAL statement_timeout = {ms}")
        cur.execute("SET LOCAL TimeZone = 'UTC'")
        cur.execute(first_sql, params)
        row = cur.fetchone()
    except psycopg2.Error as exc:
        raise WarehouseUnavailable(target, first_line(exc)) from exc
    return cur, tuple(row)


def close_quietly(con: Any) -> None:
    """Close ``con``, ignoring driver errors (it is being dropped)."""
    with suppress(psycopg2.Error):
        con.close()


def end_fenced(con: Any) -> bool:
    """End a fenced read's transaction and reset the session (nothing a query set outlives it);
    whether ``con`` may serve another read."""
    try:
        if con.closed:
            return False
        con.rollback()
        con.autocommit = True
        with con.cursor() as reset:
            reset.execute("DISCARD ALL")
        con.autocommit = False
    except psycopg2.Error:
        return False
    return True


def result_shape(
    con: Any, cursor: Any, sql: str, timeout_s: float, cap: int, target: str
) -> tuple[list[str], list[pa.DataType], list[int]]:
    """The names, Arrow types and type OIDs of ``sql``'s columns (planning only, no rows)."""
    with statement(timeout_s, con.cancel), postgres_errors(target, timeout_s, cap):
        cursor.execute(f"SELECT * FROM ({sql}) AS _shape LIMIT 0")
        description = list(cursor.description or [])
    names = [str(d[0]) for d in description]
    types = [PG_TYPES.get(int(d[1]), pa.string()) for d in description]
    oids = [int(d[1]) for d in description]
    return names, types, oids


def copy_out(
    con: Any,
    cursor: Any,
    sql: str,
    names: list[str],
    types: list[pa.DataType],
    *,
    max_bytes: int,
    timeout_s: float,
    target: str,
) -> pa.Table:
    """The rows of ``sql`` as an Arrow table with columns ``names`` of ``types``, through
    ``COPY ... TO STDOUT`` under the deadline (``timeout_s``, the statement cancelled past it)
    and the byte cap. Raises :class:`~warehouse.exceptions.WarehouseQueryTooLarge`,
    :class:`~warehouse.exceptions.WarehouseQueryTimeout` or
    :class:`~warehouse.exceptions.WarehouseUnavailable` with the connection left mid-statement
    (drop it), or :class:`~warehouse.exceptions.WarehouseQueryFailed`."""
    sink = _CappedSink(max_bytes, con.cancel, target)
    with statement(timeout_s, con.cancel), postgres_errors(target, timeout_s, max_bytes):
        writer = sink.writer()
        cursor.copy_expert(f"COPY ({sql}) TO STDOUT WITH (FORMAT csv)", writer)
        writer.flush()
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
