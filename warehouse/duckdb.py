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

One file, many connections: every connection of the process to a file joins one instance, and
some work needs the file as a whole. :func:`writer_lock` is the file's writer lock in the process
(the migration target holds it through each write transaction, twins included);
:meth:`DuckDBDriver.copy_file` copies the file under it, checkpointed, so the copy is every
committed transaction and nothing half written; :func:`replace_file` puts another file in its
place while no connection of the process holds it (new connections are refused meanwhile:
:class:`~warehouse.exceptions.WarehouseUnavailable`).

Fenced reads: :meth:`DuckDBDriver.read_connection` opens a connection of its own to the instance
(a cursor of the writer's would make closing either wait for the other), fenced again if the
instance is new; :func:`read_fenced` runs a query on it under a deadline (interrupted past it:
:class:`~warehouse.exceptions.WarehouseQueryTimeout`) and a byte cap (the answer streams through
:func:`warehouse.bounded.read_bounded`), errors mapped by :func:`duckdb_errors`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import duckdb
import pyarrow as pa
import sqlalchemy as sa

from streamdi.files import fsync_path
from streamdi.watchdog import statement
from warehouse.base import BaseWarehouseDriver, Dialect, Hook, Params, quote_identifier
from warehouse.bounded import read_bounded
from warehouse.exceptions import (
    WarehouseFileBusy,
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

#: Bytes per step of :meth:`DuckDBDriver.copy_file` (its hook runs after the first).
COPY_CHUNK = 16 << 20

#: The table :meth:`DuckDBDriver.checkpoint_once` creates and drops at once.
SCRATCH_TABLE = "main.streamdi_checkpoint_scratch"


@dataclass
class _FileHolds:
    """What the process knows of one DuckDB file: its writer lock, and whether it is being
    replaced (:func:`replace_file`; ``gate`` guards the flag and the connects that read it)."""

    writer: threading.RLock = field(default_factory=threading.RLock)
    gate: threading.Lock = field(default_factory=threading.Lock)
    replacing: bool = False


_FILES: dict[str, _FileHolds] = {}
_FILES_LOCK = threading.Lock()


def _holds(path: Path) -> _FileHolds:
    key = os.path.realpath(path)
    with _FILES_LOCK:
        return _FILES.setdefault(key, _FileHolds())


def writer_lock(path: Path | str) -> threading.RLock:
    """The writer lock of DuckDB file ``path`` in this process (one per file, whichever path
    names it): the migration target holds it through every write transaction (its twins share
    it) and :meth:`DuckDBDriver.copy_file` through a copy, which therefore sees the file still.
    DuckDB itself lets one process write the file; this orders the writers inside it."""
    return _holds(Path(path)).writer


def _connect_file(location: str, path: Path) -> duckdb.DuckDBPyConnection:
    """``duckdb.connect``, refused while :func:`replace_file` replaces ``path``."""
    holds = _holds(path)
    with holds.gate:
        if holds.replacing:
            raise WarehouseUnavailable(
                "duckdb", f"{path} is being replaced (a copy of another warehouse moves in)"
            )
        return duckdb.connect(location)


def _copy_range(src: BinaryIO, out: BinaryIO, offset: int, size: int) -> int:
    """Copy ``size`` bytes of ``src`` from ``offset`` to the end of ``out`` (in the kernel where
    it can); the bytes copied (0 at the end of ``src``)."""
    try:
        return os.sendfile(out.fileno(), src.fileno(), offset, size)
    except OSError:  # a platform without sendfile to files: through a buffer
        src.seek(offset)
        data = src.read(size)
        out.write(data)
        return len(data)


def wal_path(path: Path) -> Path:
    """The write-ahead log DuckDB keeps beside file ``path``."""
    return path.with_name(path.name + ".wal")


def replace_file(path: Path, source: Path, target: str = "duckdb") -> None:
    """Put DuckDB file ``source`` (closed: no write-ahead log beside it) in the place of ``path``,
    on the same file system. In order:

    1. Under ``path``'s writer lock, refuse new connections to ``path`` in this process.
    2. Check that no DuckDB instance of ``path`` lives in the process: a connection with another
       configuration (read-only) is refused while one does; it is closed again at once. (One
       that lived on would serve the old file to every connection that joins it.)
    3. Remove ``path``'s write-ahead log and sync the directory: ``path`` is its last checkpoint
       meanwhile (a state it was in), and the log can never be replayed onto ``source``'s pages.
    4. Rename ``source`` to ``path`` (atomic) and sync the directory.
    5. Let connections in again.

    Raises :class:`~warehouse.exceptions.WarehouseFileBusy` (nothing changed) when ``source``
    has a log or an instance of ``path`` still lives."""
    if wal_path(source).exists():
        raise WarehouseFileBusy(target, str(source), "it has a write-ahead log: not closed")
    holds = _holds(path)
    # 1.
    with holds.writer:
        with holds.gate:
            holds.replacing = True
        try:
            # 2.
            if path.exists():
                try:
                    probe = duckdb.connect(str(path), config={"access_mode": "READ_ONLY"})
                except duckdb.Error as exc:
                    raise WarehouseFileBusy(
                        target, str(path), f"it is held open: {first_line(exc)}"
                    ) from exc
                probe.close()
            # 3.
            wal = wal_path(path)
            if wal.exists():
                wal.unlink()
                fsync_path(path.parent)
            # 4.
            try:
                os.replace(source, path)
            except OSError as exc:
                raise WarehouseFileBusy(target, str(path), f"rename failed: {exc}") from exc
            fsync_path(path.parent)
        finally:
            # 5.
            with holds.gate:
                holds.replacing = False


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
                con = _connect_file(self._location, self.path)
            else:
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

    def checkpoint_once(self) -> float:
        """Make this connection's database instance take a real checkpoint, and return its
        seconds: a scratch table created and dropped, in two transactions (a ``CHECKPOINT``
        with nothing to write is skipped), then ``CHECKPOINT``. The connection's progress bar
        stays off afterwards (DuckDB prints one for a statement over 2 s). Used on a file just
        bulk-loaded, opened in a new instance: that instance's first checkpoint rewrites every
        table's metadata (seconds on a warehouse of gigabytes), better paid at once than in the
        first merge."""
        con = self.connection
        with self.guard():
            con.execute("SET enable_progress_bar = false")
            con.execute(f"CREATE TABLE {SCRATCH_TABLE} (marker INTEGER)")
            con.execute(f"DROP TABLE {SCRATCH_TABLE}")
            started = time.perf_counter()
            con.execute("CHECKPOINT")
            return time.perf_counter() - started

    def reclaim(self, qualified: Sequence[str]) -> None:
        """``CHECKPOINT``; skipped (errors ignored) while another transaction is open."""
        if self._con is not None:
            with suppress(duckdb.Error):
                self._con.execute("CHECKPOINT")

    def copy_file(self, dest: Path, hook: Hook | None = None) -> None:
        """Copy the file to ``dest`` as of its last commit, synced: under its writer lock (no
        write transaction or checkpoint of it in this process meanwhile, :func:`writer_lock`),
        ``CHECKPOINT`` (the write-ahead log folded into the file: the file alone then holds every
        committed transaction; DuckDB lets reads go on), the bytes, ``fsync``. ``hook('copy')``
        runs after the first :data:`COPY_CHUNK` bytes (crash tests). Raises
        :class:`~warehouse.exceptions.WarehouseFileBusy` when the file did not hold still (a log
        left after the checkpoint; its size or time changed during the copy): ``dest`` is then
        removed."""
        if self.path is None:
            raise WarehouseFileBusy(self.name, self._location, "not a file")
        path, con = self.path, self.connection
        with writer_lock(path):
            with self.guard():
                con.execute("CHECKPOINT")
            wal = wal_path(path)
            if wal.exists() and wal.stat().st_size > 0:
                raise WarehouseFileBusy(self.name, str(path), "a write-ahead log after CHECKPOINT")
            try:
                with self.guard():
                    before = os.stat(path)
                    with open(path, "rb") as src, open(dest, "wb") as out:
                        offset = 0
                        while offset < before.st_size:
                            step = min(COPY_CHUNK, before.st_size - offset)
                            sent = _copy_range(src, out, offset, step)
                            if sent == 0:
                                break
                            offset += sent
                            if hook is not None and offset == sent:
                                hook("copy")
                        out.flush()
                        os.fsync(out.fileno())
                    after = os.stat(path)
                if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
                    raise WarehouseFileBusy(self.name, str(path), "it changed during the copy")
                if offset != before.st_size:
                    raise WarehouseFileBusy(self.name, str(path), "it was cut short")
            except BaseException:
                dest.unlink(missing_ok=True)
                raise

    def full_match(self, expression: str, pattern: str) -> str:
        return f"regexp_full_match({expression}, {self.quote_literal(pattern)})"

    # -- fenced reads ------------------------------------------------------------------------------

    def read_connection(self) -> duckdb.DuckDBPyConnection:
        """A new connection to the file's instance for one reader, fenced (:meth:`fence`) if
        external access is on (a new instance: the writer reconnected meanwhile). Raises
        :class:`~warehouse.exceptions.WarehouseUnavailable` when the file cannot be opened."""
        with duckdb_errors(self.name, 0.0):
            con = (
                _connect_file(self._location, self.path)
                if self.path is not None
                else duckdb.connect(self._location)
            )
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
