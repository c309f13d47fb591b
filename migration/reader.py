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
:class:`~warehouse.exceptions.WarehouseQueryTooLarge` is raised), both run each statement under
its deadline and inside the current query's scope (:func:`streamdi.watchdog.statement`: the
service may interrupt it), and both run fenced in, because service SQL may carry a user's
predicate:

* **PostgreSQL**: connections whose *session* user is the reader login of
  :mod:`warehouse.postgres_login` (not a superuser, a member of no role, ``SELECT`` on the
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
  (:meth:`warehouse.duckdb.DuckDBDriver.fence`, checked on every snapshot).
  Results stream in bounded pieces (:mod:`warehouse.bounded`).

The PostgreSQL reader lives in :mod:`migration.postgres_reader`.
"""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from etl_dataflows.types import ColumnType, arrow_type
from migration.schema import WarehouseLayout
from staging.layout import q
from staging.retractions import retracted_filter
from warehouse.duckdb import DuckDBDriver, duckdb_errors, read_fenced
from warehouse.postgres_login import LoginPlan

logger = logging.getLogger(__name__)

#: Default byte cap of one read (``API__MAX_ANSWER_MB`` sets the service's).
DEFAULT_MAX_BYTES = 64 << 20


@dataclass(frozen=True)
class ReaderOptions:
    """How the query service's readers connect: the PostgreSQL reader login (see
    :mod:`warehouse.postgres_login`) and its pool size (a DuckDB reader needs neither)."""

    login: LoginPlan
    pool_size: int = 8


def relation_sql(
    layout: WarehouseLayout,
    name: str,
    upto: int,
    columns: Sequence[str],
    retracted: Sequence[tuple[int, int]] = (),
) -> str:
    """SELECT ``columns`` of table or sink ``name`` as of batch ``upto`` (see the module
    docstring); valid while ``upto`` is at least the last merged batch. ``retracted``: batch
    ranges of a sink whose rows staging retracted in batches the warehouse has not loaded yet
    (:mod:`staging.retractions`), left out."""
    table = layout.tables[name]
    cols = ", ".join(q(c) for c in columns)
    full, delta = layout.full_name(name), layout.delta_name(name)
    upto = int(upto)
    if table.kind == "output":
        keep = retracted_filter(retracted)
        return (
            f"SELECT {cols} FROM {full} WHERE batch_id <= {upto} AND {keep} UNION ALL "
            f"SELECT {cols} FROM {delta} WHERE batch_id <= {upto} AND {keep}"
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

    def relation_sql(
        self,
        name: str,
        upto: int,
        columns: Sequence[str] | None = None,
        retracted: Sequence[tuple[int, int]] = (),
    ) -> str:
        chosen = list(columns) if columns is not None else list(self.layout.tables[name].columns)
        return relation_sql(self.layout, name, upto, chosen, retracted)

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
        snapshot does it otherwise). Raises :class:`~warehouse.exceptions.ReaderLoginRefused`
        on a configuration that is not safe."""

    @abstractmethod
    def snapshot(
        self, *, timeout_s: float, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> AbstractContextManager[WarehouseSnapshot]:
        """A context manager yielding a snapshot whose statements each stop after
        ``timeout_s`` seconds and whose reads stop at ``max_bytes``."""

    def close(self) -> None:  # noqa: B027 - readers without resources keep the default
        """Release connections."""


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
        return read_fenced(
            self._con,
            sql,
            timeout_s=self.timeout_s,
            max_bytes=max_bytes or self.max_bytes,
            target=self.target,
        )

    def fetch(
        self, sql: str, types: dict[str, pa.DataType], *, max_bytes: int | None = None
    ) -> pa.Table:
        table = self._run(sql, max_bytes)
        return table.rename_columns(list(types)).cast(pa.schema(list(types.items())))

    def query(self, sql: str, *, max_bytes: int | None = None) -> pa.Table:
        return self._run(sql, max_bytes)


#: Idle connections a DuckDB reader keeps for its next snapshots.
_DUCKDB_IDLE = 4


class DuckDBReader(WarehouseReader):
    """Snapshots of the DuckDB warehouse file of ``driver`` (the migration target's), each on a
    connection of its own to the database instance the target opened (``ensure_layout`` opens
    it first; :meth:`~warehouse.duckdb.DuckDBDriver.read_connection` joins it and fences it again
    whenever a snapshot finds external access on: a new instance). ``mark_busy`` tells the
    target a reader is at work (its idle pull waits)."""

    name = "duckdb"
    dialect = "duckdb"

    def __init__(
        self,
        layout: WarehouseLayout,
        ensure_layout: Callable[[], object],
        driver: DuckDBDriver,
        mark_busy: Callable[[float], None] | None = None,
    ) -> None:
        super().__init__(layout, ensure_layout)
        self._driver = driver
        self._mark_busy = mark_busy
        self._idle: list[Any] = []  # connections of finished snapshots (a fresh one is colder)
        self._lock = threading.Lock()

    @contextmanager
    def snapshot(
        self, *, timeout_s: float, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> Iterator[WarehouseSnapshot]:
        self._ensure_layout()
        if self._mark_busy is not None:
            self._mark_busy(timeout_s)
        with self._lock:
            con = self._idle.pop() if self._idle else None
        if con is None:
            con = self._driver.read_connection()
        reusable = False
        try:
            with duckdb_errors(self.name, timeout_s):
                self._driver.ensure_fenced(con)
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
            reusable = True
        finally:
            try:
                con.execute("ROLLBACK")
            except Exception:
                reusable = False
            if reusable:
                with self._lock:
                    if len(self._idle) < _DUCKDB_IDLE:
                        self._idle.append(con)
                        con = None
            if con is not None:
                with suppress(Exception):
                    con.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for con in idle:
            with suppress(Exception):
                con.close()
