"""The TPC-DI warehouse in one schema of each target: a DuckDB file, PostgreSQL, or both.

Layout (schema ``tpcdi`` unless told otherwise):

* the engine tables of the incremental dataflow are the migration layer's full tables
  (:class:`migration.schema.WarehouseLayout`), created from its metadata, so that the deltas the
  migration merges land in exactly the rows the historical load wrote;
* the static tables (:data:`tpcdi.warehouse.tables.STATIC_TABLES`) come from the same column
  lists as SQLAlchemy Core tables; both are emitted as DDL by each target's dialect.

:meth:`Warehouse.reset` drops what an earlier run left (clause 3.4.9.1: the DW tables must not
exist when a run starts) and creates the tables empty. Bulk rows go in as Arrow (DuckDB) or COPY
(PostgreSQL), never row by row, through the warehouse drivers (:mod:`warehouse.duckdb`,
:mod:`warehouse.postgres`), which also map driver errors. Connections set the DW schema as the
default, so the official queries run unqualified.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

import duckdb
import pyarrow as pa
import sqlalchemy as sa

from migration.schema import LEDGER_SCHEMA, WarehouseLayout, create_statements
from staging.layout import arrow_of, q
from tpcdi.warehouse.tables import STATIC_TABLES, TABLES, WarehouseType
from warehouse.base import BaseWarehouseDriver
from warehouse.duckdb import DuckDBDriver
from warehouse.exceptions import WarehouseUnavailable, first_line
from warehouse.postgres import PostgresDriver

logger = logging.getLogger(__name__)

Target = Literal["duckdb", "postgres"]
TARGETS: tuple[Target, ...] = ("duckdb", "postgres")


def _sql_type(kind: WarehouseType) -> sa.types.TypeEngine[Any]:
    types: dict[WarehouseType, sa.types.TypeEngine[Any]] = {
        "int64": sa.BigInteger(),
        "float64": sa.Double(),
        "bool": sa.Boolean(),
        "string": sa.Text(),
        "timestamp": sa.TIMESTAMP(timezone=False),
        "date": sa.Date(),
        "time": sa.Time(),
    }
    return types[kind]


def static_metadata(schema: str) -> sa.MetaData:
    """SQLAlchemy tables of the static DW tables in ``schema``."""
    metadata = sa.MetaData()
    for name in STATIC_TABLES:
        sa.Table(
            name,
            metadata,
            *[sa.Column(c, _sql_type(t), quote=True) for c, t in TABLES[name].columns],
            schema=schema,
            quote=True,
            quote_schema=True,
        )
    return metadata


class Warehouse:
    """The DW of one run in ``targets``; see the module docstring.

    ``postgres_dsn`` is required when ``postgres`` is a target; ``duckdb_path`` when ``duckdb``
    is. ``memory_limit`` caps the DuckDB instance (DuckDB's default is 80% of RAM).
    """

    def __init__(
        self,
        layout: WarehouseLayout,
        targets: Sequence[Target],
        *,
        duckdb_path: Path | None = None,
        postgres_dsn: str | None = None,
        memory_limit: str = "2GB",
        threads: int = 2,
    ) -> None:
        unknown = [t for t in targets if t not in TARGETS]
        if unknown or not targets:
            raise ValueError(f"warehouse targets {list(targets)}: expected duckdb and/or postgres")
        if "duckdb" in targets and duckdb_path is None:
            raise ValueError("a duckdb warehouse needs duckdb_path")
        if "postgres" in targets and postgres_dsn is None:
            raise ValueError("a postgres warehouse needs postgres_dsn")
        self.layout = layout
        self.schema = layout.schema
        self.targets: tuple[Target, ...] = tuple(targets)
        self.duckdb_path = duckdb_path
        self.postgres_dsn = postgres_dsn
        self.memory_limit = memory_limit
        self.threads = threads
        self._duck = DuckDBDriver(
            duckdb_path or ":memory:", memory_limit=memory_limit, threads=threads
        )
        self._pg = PostgresDriver(postgres_dsn or "")

    # -- connections ---------------------------------------------------------------------------

    def driver(self, target: Target) -> BaseWarehouseDriver:
        """The driver of ``target``, connected."""
        if target == "duckdb":
            self.duckdb()
            return self._duck
        self.postgres()
        return self._pg

    def duckdb(self) -> duckdb.DuckDBPyConnection:
        """This process's connection to the DuckDB warehouse, the DW schema the default.

        The migration target opens the same file in the same process; DuckDB shares one database
        instance between them, so the memory limit set here applies to both."""
        if not self._duck.connected:
            assert self.duckdb_path is not None
            self._duck.connect()
            self._duck.execute("SET preserve_insertion_order = false")
        return self._duck.connection

    def postgres(self) -> Any:
        """This process's psycopg2 connection to PostgreSQL (autocommit off, DW schema first on the
        search path)."""
        if not self._pg.connected:
            assert self.postgres_dsn is not None
            self._pg.close()
            self._pg.connect()
        return self._pg.raw

    def close(self) -> None:
        self._duck.close()
        self._pg.close()

    def settle(self) -> float | None:
        """After a bulk load of the DuckDB file: reopen it in a new database instance and take
        one real checkpoint there (:meth:`warehouse.duckdb.DuckDBDriver.checkpoint_once`); its
        seconds (``None`` without a DuckDB target).

        The first checkpoint a later instance takes of a file this run bulk-loaded rewrites
        every table's metadata, whatever it has to write (measured on TPC-DI's warehouse:
        4.6 s at SF 100, 0.6 s at SF 10; the checkpoints after it, ~0.01 s, in that instance
        and in every later one; one taken in the loading instance did not spare it). Without
        this, that checkpoint is the first incremental update's: the merge after its first
        load. The instance is new only if no other connection of this process holds the file
        (none does after the historical load)."""
        if "duckdb" not in self.targets:
            return None
        self._duck.close()
        self.duckdb()
        return self._duck.checkpoint_once()

    def __enter__(self) -> Warehouse:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- schema --------------------------------------------------------------------------------

    def reset(self) -> None:
        """Drop the DW schema, its delta schema and the stream's migration ledger rows in every
        target, then create every table empty."""
        for target in self.targets:
            self._reset(target)

    def _reset(self, target: Target) -> None:
        layout = self.layout
        drops = [
            f"DROP SCHEMA IF EXISTS {q(schema)} CASCADE"
            for schema in (layout.schema, layout.delta_schema)
        ]
        ledger = [
            f"DELETE FROM {q(LEDGER_SCHEMA)}.{q(t.name)} WHERE stream = ?"
            for t in (layout.ledger, layout.merges, layout.streams)
        ]
        if target == "duckdb":
            from duckdb_engine import Dialect

            # the full tables without their keys, as the DuckDB migration target makes them
            creates = create_statements(layout.metadata, Dialect(), layout.schemas, row_keys=False)
            creates += create_statements(static_metadata(layout.schema), Dialect(), [])
            statements = drops + creates
        else:
            from sqlalchemy.dialects.postgresql import psycopg2 as pg_dialect

            dialect = pg_dialect.dialect()  # type: ignore[no-untyped-call]
            creates = create_statements(layout.metadata, dialect, layout.schemas)
            creates += create_statements(static_metadata(layout.schema), dialect, [])
            statements = [*drops, *creates]
        driver = self.driver(target)
        driver.begin()
        try:
            if target == "postgres":
                # one DDL writer at a time per database (as the migration targets do)
                driver.execute("SELECT pg_advisory_xact_lock(hashtext(?))", [LEDGER_SCHEMA])
            for statement in statements:
                driver.execute(statement)
            for statement in ledger:
                driver.execute(statement, [layout.stream])
            driver.commit()
        except driver.driver_errors as exc:
            driver.rollback()
            raise WarehouseUnavailable(target, first_line(exc)) from exc
        logger.info("warehouse reset target=%s schema=%s", target, layout.schema)

    # -- rows ----------------------------------------------------------------------------------

    def qualified(self, table: str) -> str:
        return f"{q(self.schema)}.{q(table)}"

    def load(self, table: str, rows: pa.Table, targets: Iterable[Target] | None = None) -> None:
        """Append ``rows`` (columns named as the table's) to DW table ``table`` in each target,
        one transaction per target (the driver's bulk path)."""
        if rows.num_rows == 0:
            return
        for target in targets or self.targets:
            driver = self.driver(target)
            if target == "postgres":
                driver.begin()
            try:
                driver.bulk_insert(self.qualified(table), rows)
                if target == "postgres":
                    driver.commit()
            except driver.driver_errors as exc:
                driver.rollback()
                raise WarehouseUnavailable(target, f"loading {table}: {exc}") from exc

    def query(self, sql: str, target: Target | None = None) -> pa.Table:
        """Rows of a read query on ``target`` (default: the first target), as Arrow; the DW
        schema is the default schema of the query."""
        chosen = target or self.targets[0]
        if chosen == "duckdb":
            cursor = self.duckdb().cursor()
            try:
                cursor.execute(f"SET search_path = '{self.schema}'")
                return arrow_of(cursor.sql(sql))
            finally:
                cursor.close()
        driver = self.driver("postgres")
        try:
            driver.execute(f"SET search_path TO {q(self.schema)}, public")
            table = driver.fetch_arrow(sql)
        except driver.driver_errors as exc:
            driver.rollback()
            raise WarehouseUnavailable("postgres", first_line(exc)) from exc
        driver.rollback()
        return table

    def execute(self, sql: str, params: Sequence[Any] = (), target: Target | None = None) -> None:
        """Run one writing statement in its own transaction on ``target`` (default: every
        target); parameters are ``?`` placeholders."""
        for chosen in [target] if target else self.targets:
            if chosen == "duckdb":
                cursor = self.duckdb().cursor()
                try:
                    cursor.execute(f"SET search_path = '{self.schema}'")
                    cursor.execute(sql, list(params))
                finally:
                    cursor.close()
            else:
                driver = self.driver("postgres")
                try:
                    driver.execute(f"SET search_path TO {q(self.schema)}, public")
                    driver.execute(sql, list(params))
                    driver.commit()
                except driver.driver_errors as exc:
                    driver.rollback()
                    raise WarehouseUnavailable("postgres", first_line(exc)) from exc

    def count(self, table: str, target: Target | None = None) -> int:
        return int(self.query(f"SELECT count(*) AS n FROM {q(table)}", target)["n"][0].as_py())
