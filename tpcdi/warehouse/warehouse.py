"""The TPC-DI warehouse in one schema of each target: a DuckDB file, PostgreSQL, or both.

Layout (schema ``tpcdi`` unless told otherwise):

* the engine tables of the incremental dataflow are the migration layer's full tables
  (:class:`migration.schema.WarehouseLayout`), created from its metadata, so that the deltas the
  migration merges land in exactly the rows the historical load wrote;
* the static tables (:data:`tpcdi.warehouse.tables.STATIC_TABLES`) come from the same column
  lists as SQLAlchemy Core tables; both are emitted as DDL by each target's dialect.

:meth:`Warehouse.reset` drops what an earlier run left (clause 3.4.9.1: the DW tables must not
exist when a run starts) and creates the tables empty. Bulk rows go in as Arrow (DuckDB) or COPY
(PostgreSQL), never row by row. Connections set the DW schema as the default, so the official
queries run unqualified.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterable, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any, Literal

import duckdb
import psycopg2
import pyarrow as pa
import sqlalchemy as sa

from migration.schema import LEDGER_SCHEMA, WarehouseLayout, create_statements
from migration.targets.postgres import csv_bytes
from staging.layout import q
from staging.store import arrow_of
from tpcdi.warehouse.exceptions import WarehouseUnavailable
from tpcdi.warehouse.tables import STATIC_TABLES, TABLES, WarehouseType

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
        self._duck: duckdb.DuckDBPyConnection | None = None
        self._pg: Any = None

    # -- connections ---------------------------------------------------------------------------

    def duckdb(self) -> duckdb.DuckDBPyConnection:
        """This process's connection to the DuckDB warehouse, the DW schema the default.

        The migration target opens the same file in the same process; DuckDB shares one database
        instance between them, so the memory limit set here applies to both."""
        if self._duck is None:
            assert self.duckdb_path is not None
            self.duckdb_path.parent.mkdir(parents=True, exist_ok=True)
            try:
                con = duckdb.connect(str(self.duckdb_path))
            except duckdb.Error as exc:
                raise WarehouseUnavailable("duckdb", str(exc).splitlines()[0]) from exc
            con.execute(f"SET memory_limit = '{self.memory_limit}'")
            con.execute(f"SET threads = {int(self.threads)}")
            con.execute("SET preserve_insertion_order = false")
            self._duck = con
        return self._duck

    def postgres(self) -> Any:
        """This process's psycopg2 connection to PostgreSQL (autocommit off, DW schema first on the
        search path)."""
        if self._pg is None or self._pg.closed:
            try:
                self._pg = psycopg2.connect(self.postgres_dsn)
            except psycopg2.Error as exc:
                raise WarehouseUnavailable("postgres", str(exc).strip().splitlines()[0]) from exc
        return self._pg

    def close(self) -> None:
        if self._duck is not None:
            with suppress(duckdb.Error):
                self._duck.close()
        self._duck = None
        if self._pg is not None:
            with suppress(psycopg2.Error):
                self._pg.close()
        self._pg = None

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
            con = self.duckdb()
            try:
                con.execute("BEGIN TRANSACTION")
                for statement in drops + creates:
                    con.execute(statement)
                for statement in ledger:
                    con.execute(statement, [layout.stream])
                con.execute("COMMIT")
            except duckdb.Error as exc:
                with suppress(duckdb.Error):
                    con.execute("ROLLBACK")
                raise WarehouseUnavailable(target, str(exc).splitlines()[0]) from exc
        else:
            from sqlalchemy.dialects.postgresql import psycopg2 as pg_dialect

            dialect = pg_dialect.dialect()  # type: ignore[no-untyped-call]
            creates = create_statements(layout.metadata, dialect, layout.schemas)
            creates += create_statements(static_metadata(layout.schema), dialect, [])
            con = self.postgres()
            try:
                with con.cursor() as cur:
                    # one DDL writer at a time per database (as the migration targets do)
                    cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [LEDGER_SCHEMA])
                    for statement in drops + creates:
                        cur.execute(statement)
                    for statement in ledger:
                        cur.execute(statement.replace("?", "%s"), [layout.stream])
                con.commit()
            except psycopg2.Error as exc:
                con.rollback()
                raise WarehouseUnavailable(target, str(exc).strip().splitlines()[0]) from exc
        logger.info("warehouse reset target=%s schema=%s", target, layout.schema)

    # -- rows ----------------------------------------------------------------------------------

    def qualified(self, table: str) -> str:
        return f"{q(self.schema)}.{q(table)}"

    def load(self, table: str, rows: pa.Table, targets: Iterable[Target] | None = None) -> None:
        """Append ``rows`` (columns named as the table's) to DW table ``table`` in each target,
        one transaction per target."""
        if rows.num_rows == 0:
            return
        for target in targets or self.targets:
            if target == "duckdb":
                self._load_duckdb(table, rows)
            else:
                self._load_postgres(table, rows)

    def _load_duckdb(self, table: str, rows: pa.Table) -> None:
        con = self.duckdb()
        cols = ", ".join(q(c) for c in rows.column_names)
        view = f"_load_{table}"
        con.register(view, rows)
        try:
            con.execute(f"INSERT INTO {self.qualified(table)} ({cols}) SELECT {cols} FROM {view}")
        except duckdb.Error as exc:
            raise WarehouseUnavailable("duckdb", f"loading {table}: {exc}") from exc
        finally:
            con.unregister(view)

    def _load_postgres(self, table: str, rows: pa.Table) -> None:
        con = self.postgres()
        cols = ", ".join(q(c) for c in rows.column_names)
        try:
            with con.cursor() as cur:
                cur.copy_expert(
                    f"COPY {self.qualified(table)} ({cols}) FROM STDIN WITH (FORMAT csv)",
                    io.BytesIO(csv_bytes(rows)),
                    size=1 << 20,
                )
            con.commit()
        except psycopg2.Error as exc:
            con.rollback()
            raise WarehouseUnavailable("postgres", f"loading {table}: {exc}") from exc

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
        con = self.postgres()
        try:
            with con.cursor() as cur:
                cur.execute(f"SET search_path TO {q(self.schema)}, public")
                cur.execute(sql)
                names = [d[0] for d in cur.description or []]
                rows = cur.fetchall()
            con.rollback()
        except psycopg2.Error as exc:
            con.rollback()
            raise WarehouseUnavailable("postgres", str(exc).strip().splitlines()[0]) from exc
        return pa.table({n: [r[i] for r in rows] for i, n in enumerate(names)})

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
                con = self.postgres()
                try:
                    with con.cursor() as cur:
                        cur.execute(f"SET search_path TO {q(self.schema)}, public")
                        cur.execute(sql.replace("?", "%s"), list(params))
                    con.commit()
                except psycopg2.Error as exc:
                    con.rollback()
                    raise WarehouseUnavailable(
                        "postgres", str(exc).strip().splitlines()[0]
                    ) from exc

    def count(self, table: str, target: Target | None = None) -> int:
        return int(self.query(f"SELECT count(*) AS n FROM {q(table)}", target)["n"][0].as_py())
