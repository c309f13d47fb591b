"""PostgreSQL as a migration target, through :class:`warehouse.postgres.PostgresDriver`.

The driver connects (SQLAlchemy owns the connection and emits the DDL from the layout's metadata)
and moves the rows with ``COPY ... FROM STDIN (csv)``. The stream lock is a transaction-scoped
advisory lock, so two migrators of one stream (a pipeline and a command, two hosts) never
interleave a load or a merge.

A merge rewrites the rows it updates, and PostgreSQL keeps the old versions until a vacuum: a
table merged every few seconds swells, and every merge reads more. So:

* the full tables of state tables leave room on each page (``POSTGRES__FILLFACTOR``, set at
  every connect, so it also reaches tables made before): a row updated on the page it lives on
  is a *HOT* update, which needs no new index entry and whose old version the page prunes
  itself;
* after each merge, the delta tables it emptied are vacuumed (their rows were all deleted: a
  scan of a delta table would otherwise read every dead row since the last autovacuum).

Measured on TPC-DI's daily feed at SF 3 (docs/benchmarks.md): the merge of a day went from
~0.25 s on the first days to 0.7-1.2 s after 150 days without these, autovacuum bringing it back
down only for a while.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import sqlalchemy as sa

from migration.schema import LEDGER_SCHEMA, WarehouseLayout, create_statements
from migration.targets.base import BaseTarget
from streamdi.settings import PostgresSettings
from warehouse.postgres import PostgresDriver

if TYPE_CHECKING:
    from migration.reader import ReaderOptions, WarehouseReader

logger = logging.getLogger(__name__)

#: ``POSTGRES__FILLFACTOR``'s default: the share of each page of a state table's full table that
#: inserts fill (the rest is room for updates on the same page).
DEFAULT_FILLFACTOR: int = PostgresSettings.model_fields["fillfactor"].default


class PostgresTarget(BaseTarget):
    """See the module docstring. ``dsn`` is a libpq URL or key=value string; ``connect_args``
    are extra libpq parameters (TLS: ``sslmode``, ``sslrootcert``...)."""

    name = "postgres"

    def __init__(
        self,
        layout: WarehouseLayout,
        dsn: str,
        connect_args: dict[str, str] | None = None,
        *,
        fillfactor: int = DEFAULT_FILLFACTOR,
    ) -> None:
        self._driver = PostgresDriver(dsn, connect_args)
        self.fillfactor = fillfactor
        super().__init__(layout, self._driver)

    def twin(self) -> PostgresTarget:
        """Another target on the same database (a connection of its own)."""
        return PostgresTarget(self.layout, self.dsn, self.connect_args, fillfactor=self.fillfactor)

    @property
    def dsn(self) -> str:
        """The libpq DSN this target connects with (readers of the same warehouse reuse it)."""
        return self._driver.dsn

    @property
    def connect_args(self) -> dict[str, str]:
        return self._driver.connect_args

    def _connect(self) -> None:
        layout = self.layout
        self._driver.create_all(layout.metadata, layout.schemas, LEDGER_SCHEMA)
        self._driver.connect()
        self._leave_room()

    def _leave_room(self) -> None:
        """Set the fill factor on the full tables of state tables that do not have it yet (see
        the module docstring; sinks are only appended to and stay full)."""
        layout = self.layout
        wanted = f"fillfactor={self.fillfactor}"
        states = sorted(n for n, t in layout.tables.items() if t.kind == "state")
        if not states:
            return
        rows = self.fetch(
            "SELECT c.relname, c.reloptions FROM pg_class c JOIN pg_namespace n "
            "ON n.oid = c.relnamespace WHERE n.nspname = ? AND c.relkind = 'r'",
            [layout.schema],
        )
        options = {str(name): list(opts or []) for name, opts in rows}
        behind = [n for n in states if n in options and wanted not in options[n]]
        if not behind:
            return
        self.driver.begin()
        try:
            for name in behind:
                self.execute(f"ALTER TABLE {layout.full_name(name)} SET ({wanted})")
            self.driver.commit()
        except BaseException:
            self.driver.rollback()
            raise
        logger.info("fill factor set target=postgres fillfactor=%s tables=%s", wanted, behind)

    def _after_merge(self, emptied: set[str]) -> None:
        """Vacuum the delta tables the merge emptied (see the module docstring). Housekeeping:
        a vacuum refused (a lock, a permission) is logged, and the next merge's vacuum or
        autovacuum does it; a connection lost raises, as any statement's would."""
        if not emptied:
            return
        layout = self.layout
        started = time.perf_counter()
        with self.guard():
            try:
                self._driver.reclaim([layout.delta_name(n) for n in sorted(emptied)])
            except self._driver.driver_errors as exc:
                if not self._driver.connected:
                    raise  # a connection lost is the guard's to report
                logger.warning("vacuum of delta tables failed target=postgres: %s", exc)
                return
        logger.debug(
            "vacuumed delta tables target=postgres tables=%s ms=%.1f",
            len(emptied),
            (time.perf_counter() - started) * 1000,
        )

    def sql_dialect(self) -> sa.engine.Dialect:
        from sqlalchemy.dialects.postgresql import psycopg2 as pg_dialect

        dialect: sa.engine.Dialect = pg_dialect.dialect()  # type: ignore[no-untyped-call]
        return dialect

    def create_missing_tables(self) -> None:
        for statement in create_statements(
            self.layout.metadata, self.sql_dialect(), self.layout.schemas
        ):
            self.execute(statement)

    def _lock_stream(self) -> None:
        self.driver.execute(
            "SELECT pg_advisory_xact_lock(hashtext(?))", [f"streamdi:{self.layout.stream}"]
        )

    def busy(self) -> bool:
        with self.guard():
            return self._driver.others_active()

    def reader(
        self, ensure_layout: Callable[[], object], options: ReaderOptions
    ) -> WarehouseReader:
        from migration.postgres_reader import PostgresReader

        return PostgresReader(
            self.layout,
            ensure_layout,
            self.dsn,
            self.connect_args,
            login=options.login,
            pool_size=options.pool_size,
        )
