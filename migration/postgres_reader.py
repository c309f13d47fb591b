"""The PostgreSQL warehouse reader: snapshots on connections of the reader login, answers through a
byte-capped ``COPY``; see :mod:`migration.reader` for the contract, :mod:`warehouse.postgres_login`
for the login and :mod:`warehouse.postgres_reads` for the fenced, bounded reads themselves."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa

from migration.reader import DEFAULT_MAX_BYTES, WarehouseReader, WarehouseSnapshot
from migration.schema import LEDGER_SCHEMA, WarehouseLayout
from warehouse import postgres_reads
from warehouse.exceptions import (
    WarehouseQueryTimeout,
    WarehouseQueryTooLarge,
    WarehouseUnavailable,
)
from warehouse.postgres_login import LoginPlan, ReaderGrants, ReaderLogin, open_login


def reader_grants(layout: WarehouseLayout) -> ReaderGrants:
    """What the reader login of ``layout``'s warehouse may read: ``USAGE`` on its schemas,
    ``SELECT`` in its data schemas (full and delta tables) and on the ledger's ``ledger`` and
    ``merges`` tables; every table a reader reads is checked at start."""
    tables: list[tuple[str, str]] = []
    for name in layout.tables:
        tables += [(layout.schema, name), (layout.delta_schema, name)]
    tables += [(LEDGER_SCHEMA, "ledger"), (LEDGER_SCHEMA, "merges")]
    return ReaderGrants(
        schemas=layout.schemas,
        data_schemas=(layout.schema, layout.delta_schema),
        tables=tuple(tables),
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
        try:
            return postgres_reads.copy_out(
                self._con,
                self._cursor,
                sql,
                names,
                types,
                max_bytes=max_bytes,
                timeout_s=self.timeout_s,
                target=self.target,
            )
        except (WarehouseQueryTooLarge, WarehouseQueryTimeout, WarehouseUnavailable):
            self.broken = True  # the COPY was cut short: drop the connection, never drain it
            raise

    def fetch(
        self, sql: str, types: dict[str, pa.DataType], *, max_bytes: int | None = None
    ) -> pa.Table:
        return self._copy(sql, list(types), list(types.values()), max_bytes or self.max_bytes)

    def query(self, sql: str, *, max_bytes: int | None = None) -> pa.Table:
        cap = max_bytes or self.max_bytes
        # the result's shape first (planning only), then the rows through COPY
        names, types, oids = postgres_reads.result_shape(
            self._con, self._cursor, sql, self.timeout_s, cap, self.target
        )
        return self._copy(postgres_reads.row_guard(sql, cap, oids), names, types, cap)


class PostgresReader(WarehouseReader):
    """Snapshots of a PostgreSQL warehouse from a small pool of connections of the reader login
    (``login``: the operator's DSN or a role streamdi manages; see :mod:`warehouse.postgres_login`).
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
        :mod:`warehouse.postgres_login`). Raises
        :class:`~warehouse.exceptions.ReaderLoginRefused` (fix the configuration) or
        :class:`~warehouse.exceptions.WarehouseUnavailable` (tried again on the next snapshot)."""
        if self._login is not None:
            return
        with self._prepare_lock:
            if self._login is not None:
                return
            self._ensure_layout()
            self._login = open_login(self._plan, self._dsn, self._args, reader_grants(self.layout))

    def _connect(self) -> Any:
        login = self._login
        assert login is not None
        return postgres_reads.connect(login.dsn, login.params, self.name)

    @contextmanager
    def snapshot(
        self, *, timeout_s: float, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> Iterator[WarehouseSnapshot]:
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
            layout = self.layout
            try:
                cur, (watermark, merged) = postgres_reads.begin_fenced(
                    con,
                    timeout_s,
                    f"SELECT (SELECT coalesce(max(batch_id), 0) FROM {layout.ledger_name} "
                    f"WHERE stream = %s), (SELECT coalesce(max(through_batch), 0) FROM "
                    f"{layout.merges_name} WHERE stream = %s)",
                    [layout.stream, layout.stream],
                    self.name,
                )
            except WarehouseUnavailable:
                broken = True
                raise
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
            except WarehouseUnavailable:
                broken = True
                raise
        finally:
            if snap is not None and snap.broken:
                broken = True
            if con is not None:
                # nothing a query set for the session outlives its snapshot
                if not broken and postgres_reads.end_fenced(con):
                    with self._lock:
                        self._idle.append(con)
                else:
                    postgres_reads.close_quietly(con)
            self._slots.release()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for con in idle:
            postgres_reads.close_quietly(con)
