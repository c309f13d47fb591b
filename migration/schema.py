"""The warehouse layout of one dataflow, as one SQLAlchemy Core metadata for every target.

For a dataflow ``flow`` migrated into schema ``S`` (``MIGRATION__SCHEMA_NAME``, default the
dataflow's name):

==============================  ===================================================================
``S.<table>``                   a state table in its image form with its row id as primary key (all
                                versions of a history table, keyed by surrogate key)
``S.<sink>``                    a sink's output rows (append-only facts) with their ``batch_id``
``S_delta.<table>``             index-free delta: ``batch_id``, ``op`` (upsert/delete), the image
``S_delta.<sink>``              index-free delta of a sink: ``batch_id`` and the output columns
``streamdi_migration.ledger``   one row per (stream, batch) loaded, written in the same target
                                transaction as the batch's rows; ``stream`` is the dataflow name
``streamdi_migration.merges``   one row per merge of the deltas into the full tables
``streamdi_migration.streams``  the dataflow's layout fingerprint (a schema serves one layout)
==============================  ===================================================================

DDL is emitted from the metadata by each target's SQLAlchemy dialect (psycopg2 for PostgreSQL,
duckdb-engine for DuckDB). Integer primary keys carry ``autoincrement=False``: streamdi assigns
every key itself, and duckdb-engine would otherwise emit SERIAL types DuckDB lacks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import sqlalchemy as sa

from etl_dataflows.dataflow import CompiledDataflow
from etl_dataflows.types import ColumnType
from migration.exceptions import WarehouseLayoutError
from staging.layout import fingerprint, output_columns, q

LEDGER_SCHEMA = "streamdi_migration"
Kind = Literal["state", "output"]


def sql_type(kind: ColumnType | None) -> sa.types.TypeEngine[Any]:
    """The SQLAlchemy type storing an engine column type (unknown types as text)."""
    types: dict[ColumnType, sa.types.TypeEngine[Any]] = {
        "int64": sa.BigInteger(),
        "float64": sa.Double(),
        "bool": sa.Boolean(),
        "string": sa.Text(),
        "timestamp": sa.TIMESTAMP(timezone=False),
        "date": sa.Date(),
    }
    return types[kind] if kind is not None else sa.Text()


@dataclass(frozen=True)
class WarehouseTable:
    """One migrated relation: a state table (merged by row id) or a sink (appended)."""

    name: str
    kind: Kind
    columns: tuple[str, ...]
    """The columns of the full table, in order (``batch_id`` first for sinks)."""
    row_id: tuple[str, ...]
    """Primary key of the full table (empty for sinks)."""
    history: bool = False


class WarehouseLayout:
    """See the module docstring. ``tables`` lists state tables first, then sinks."""

    def __init__(self, flow: CompiledDataflow, schema: str | None = None) -> None:
        self.flow = flow
        self.stream = flow.name
        self.schema = schema or _identifier(flow.name)
        self.delta_schema = f"{self.schema}_delta"
        self.fingerprint = fingerprint(flow)
        self.metadata = sa.MetaData()
        self.tables: dict[str, WarehouseTable] = {}
        self.full: dict[str, sa.Table] = {}
        self.delta: dict[str, sa.Table] = {}
        clash = set(flow.tables) & set(flow.sinks)
        if clash:
            raise WarehouseLayoutError(
                f"dataflow {flow.name!r} has state tables and sinks named alike ({sorted(clash)}); "
                "they would share a warehouse table name"
            )
        for name, table in flow.tables.items():
            image = table.image_columns()
            row_id = table.row_id()
            self.tables[name] = WarehouseTable(
                name, "state", tuple(image), tuple(row_id), history=table.kind == "history"
            )
            self.full[name] = _table(
                name,
                self.metadata,
                *[
                    _column(
                        c,
                        sql_type(t),
                        primary_key=c in row_id,
                        autoincrement=False,
                        nullable=c not in row_id,
                    )
                    for c, t in image.items()
                ],
                schema=self.schema,
            )
            self.delta[name] = _table(
                name,
                self.metadata,
                _column("batch_id", sa.BigInteger(), nullable=False),
                _column("op", sa.Text(), nullable=False),
                *[_column(c, sql_type(t)) for c, t in image.items()],
                schema=self.delta_schema,
            )
        for sink in flow.sinks:
            columns = output_columns(flow, sink)
            self.tables[sink] = WarehouseTable(sink, "output", ("batch_id", *columns), ())
            for target, schema in ((self.full, self.schema), (self.delta, self.delta_schema)):
                target[sink] = _table(
                    sink,
                    self.metadata,
                    _column("batch_id", sa.BigInteger(), nullable=False),
                    *[_column(c, sql_type(t)) for c, t in columns.items()],
                    schema=schema,
                )
        self.ledger = _table(
            "ledger",
            self.metadata,
            _column("stream", sa.Text(), primary_key=True),
            _column("batch_id", sa.BigInteger(), primary_key=True, autoincrement=False),
            _column("rows", sa.BigInteger(), nullable=False),
            _column("via", sa.Text(), nullable=False),
            _column("loaded_at", sa.TIMESTAMP(timezone=False), nullable=False),
            schema=LEDGER_SCHEMA,
        )
        self.merges = _table(
            "merges",
            self.metadata,
            _column("stream", sa.Text(), primary_key=True),
            _column("merge_id", sa.BigInteger(), primary_key=True, autoincrement=False),
            _column("through_batch", sa.BigInteger(), nullable=False),
            _column("rows", sa.BigInteger(), nullable=False),
            _column("merged_at", sa.TIMESTAMP(timezone=False), nullable=False),
            _column("ms", sa.Double(), nullable=False),
            schema=LEDGER_SCHEMA,
        )
        self.streams = _table(
            "streams",
            self.metadata,
            _column("stream", sa.Text(), primary_key=True),
            _column("schema_name", sa.Text(), nullable=False),
            _column("fingerprint", sa.Text(), nullable=False),
            schema=LEDGER_SCHEMA,
        )

    @property
    def schemas(self) -> tuple[str, ...]:
        return (self.schema, self.delta_schema, LEDGER_SCHEMA)

    def full_name(self, name: str) -> str:
        return f"{q(self.schema)}.{q(name)}"

    def delta_name(self, name: str) -> str:
        return f"{q(self.delta_schema)}.{q(name)}"

    @property
    def ledger_name(self) -> str:
        return f"{q(LEDGER_SCHEMA)}.{q('ledger')}"

    @property
    def merges_name(self) -> str:
        return f"{q(LEDGER_SCHEMA)}.{q('merges')}"

    @property
    def streams_name(self) -> str:
        return f"{q(LEDGER_SCHEMA)}.{q('streams')}"

    def current_sql(self, name: str) -> str:
        """A SELECT of state table ``name`` as of the last loaded batch: the full table's rows
        overlaid with the newest unmerged delta of each row id (the two-space read)."""
        table = self.tables[name]
        if table.kind != "state":
            return (
                f"SELECT * FROM {self.full_name(name)} UNION ALL "
                f"SELECT * FROM {self.delta_name(name)}"
            )
        cols = ", ".join(q(c) for c in table.columns)
        ids = ", ".join(q(c) for c in table.row_id)
        match = " AND ".join(f"d.{q(c)} = f.{q(c)}" for c in table.row_id)
        newest = (
            f"SELECT *, row_number() OVER (PARTITION BY {ids} ORDER BY batch_id DESC) AS _rn "
            f"FROM {self.delta_name(name)}"
        )
        return (
            f"SELECT {cols} FROM {self.full_name(name)} f WHERE NOT EXISTS "
            f"(SELECT 1 FROM {self.delta_name(name)} d WHERE {match}) "
            f"UNION ALL SELECT {cols} FROM ({newest}) n WHERE _rn = 1 AND op = 'upsert'"
        )


def _column(name: str, *args: Any, **kwargs: Any) -> sa.Column[Any]:
    # every name quoted: a column named like a keyword of one dialect (DuckDB's AT, ...) still works
    return sa.Column(name, *args, quote=True, **kwargs)


def _table(name: str, metadata: sa.MetaData, *args: Any, **kwargs: Any) -> sa.Table:
    return sa.Table(name, metadata, *args, quote=True, quote_schema=True, **kwargs)


def _identifier(name: str) -> str:
    text = "".join(ch if ch.isalnum() else "_" for ch in name.lower())
    return text if text and not text[0].isdigit() else f"s_{text}"
