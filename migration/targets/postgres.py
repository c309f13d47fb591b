"""PostgreSQL as a migration target, through :class:`warehouse.postgres.PostgresDriver`.

The driver connects (SQLAlchemy owns the connection and emits the DDL from the layout's metadata)
and moves the rows with ``COPY ... FROM STDIN (csv)``. The stream lock is a transaction-scoped
advisory lock, so two migrators of one stream (a pipeline and a command, two hosts) never
interleave a load or a merge.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import sqlalchemy as sa

from migration.schema import LEDGER_SCHEMA, WarehouseLayout, create_statements
from migration.targets.base import BaseTarget
from warehouse.postgres import PostgresDriver

if TYPE_CHECKING:
    from migration.reader import ReaderOptions, WarehouseReader


class PostgresTarget(BaseTarget):
    """See the module docstring. ``dsn`` is a libpq URL or key=value string; ``connect_args``
    are extra libpq parameters (TLS: ``sslmode``, ``sslrootcert``...)."""

    name = "postgres"

    def __init__(
        self, layout: WarehouseLayout, dsn: str, connect_args: dict[str, str] | None = None
    ) -> None:
        self._driver = PostgresDriver(dsn, connect_args)
        super().__init__(layout, self._driver)

    def twin(self) -> PostgresTarget:
        """Another target on the same database (a connection of its own)."""
        return PostgresTarget(self.layout, self.dsn, self.connect_args)

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
