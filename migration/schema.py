"""The warehouse layout of one dataflow, as one SQLAlchemy Core metadata for every target.

For a dataflow ``flow`` migrated into schema ``S`` (``MIGRATION__SCHEMA_NAME``, default the
dataflow's name):

==============================  ===================================================================
``S.<table>``                   a state table in its image form with its row id as primary key (all
                                versions of a history table, keyed by surrogate key)
``S.<sink>``                    a sink's output rows (append-only facts) with their ``batch_id``
``S_delta.<table>``             index-free delta: ``batch_id``, ``op`` (upsert/delete), the image
``S_delta.<sink>``              index-free delta of a sink: ``batch_id`` and the output columns
``S.dead_letters``              the dead letters of the loaded batches, as staged
                                (``streamdi.dead_letters``: ``id``, ``batch_id``, where from, why,
                                the payload), keyed by ``id``; ``replayed_in`` is set when the
                                batch that replayed one is loaded
``S.aborts``                    the aborted transactions of the loaded batches, with ``batch_id``
``streamdi_migration.ledger``   one row per (stream, batch) loaded, written in the same target
                                transaction as the batch's rows; ``stream`` is the dataflow name
``streamdi_migration.merges``   one row per merge of the deltas into the full tables
``streamdi_migration.streams``  the dataflow's layout fingerprint (a schema serves one layout)
``streamdi_migration.layouts``  the layout history: per stream, each dataflow version the target
                                switched to and after which batch (:mod:`migration.evolution`)
==============================  ===================================================================

The *rejects* tables (``S.dead_letters``, ``S.aborts``) are appended by every load in the same
transaction as its batches' rows (:mod:`migration.targets.base`), so analysts query rejects
beside the data. They are the same for every dataflow, so they are not part of the layout's
fingerprint: a target created before they existed gets them, empty, when it opens (``CREATE ...
IF NOT EXISTS``), and batches it loaded before keep their rejects in staging only. Their names are
reserved: a dataflow with a state table or sink named ``dead_letters`` or ``aborts`` is refused
(:class:`~migration.exceptions.WarehouseLayoutError`) rather than given other names, so the
rejects are always where analysts (and staging's ``streamdi.dead_letters``) say they are.

A target added after staging released batches is bootstrapped (:mod:`migration.bootstrap`):
``streamdi_migration.bootstraps`` holds its bootstrap's state, snapshot watermark and peer, and
``streamdi_migration.bootstrap_tables`` one row per relation the bootstrap copied (its resume
marker).

A *plain* sink (:func:`declare_plain_sinks`) keeps only its output columns in ``S.<sink>`` — no
``batch_id`` and no ``_ts``/``_pos``/``_src`` — for a warehouse table whose columns are fixed by
someone else (TPC-DI's DImessages, which the official validation query fills with a positional
``INSERT``); its delta table keeps every column.

DDL is emitted from the metadata by each target's SQLAlchemy dialect (psycopg2 for PostgreSQL,
duckdb-engine for DuckDB). Integer primary keys carry ``autoincrement=False``: streamdi assigns
every key itself, and duckdb-engine would otherwise emit SERIAL types DuckDB lacks.

A DuckDB warehouse's full tables of state tables are created without their primary key
(``create_statements(..., row_keys=False)``): the merge, which deduplicates by row id itself,
rewrites most rows of a busy table, and maintaining DuckDB's ART index for that made its COMMIT
and the checkpoint after it ten times longer (100k rows: 6 ms against 80-130 ms). DuckDB holds its
transaction lock through a commit and a checkpoint, so every read of the file that starts or ends
meanwhile waits: a keyed full table stalled the query service's reads for up to 0.7 s per merge
under load. PostgreSQL keeps the keys (its merge is ``INSERT ... ON CONFLICT``). The dead letters
go without their key in DuckDB too (an index every load maintains, on a table analysts scan);
PostgreSQL keeps it: it serves the replays' ``UPDATE`` and refuses a dead letter loaded twice.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa
import sqlalchemy as sa

from etl_dataflows.dataflow import CompiledDataflow
from etl_dataflows.evolution.shape import describe_flow
from etl_dataflows.types import ColumnType
from migration.exceptions import WarehouseLayoutError
from staging.handoff import STAGED_ABORT_SCHEMA, STAGED_DEAD_LETTER_SCHEMA
from staging.history import LayoutVersion, version_of
from staging.layout import output_columns, q, sink_columns

LEDGER_SCHEMA = "streamdi_migration"
Kind = Literal["state", "output"]
#: The rejects tables every layout has in its schema (the names are reserved, see above).
REJECTS = ("dead_letters", "aborts")

_PLAIN_SINKS: dict[str, frozenset[str]] = {}


def declare_plain_sinks(flow_name: str, sinks: Iterable[str]) -> None:
    """Declare that the warehouse tables of ``sinks`` of dataflow ``flow_name`` hold only the
    sinks' output columns (see the module docstring). The module that defines the dataflow
    declares it when imported, so every layout of the dataflow (the pipeline's migration worker,
    ``streamdi migrate``) agrees; a target created with another layout fails its fingerprint
    check."""
    _PLAIN_SINKS[flow_name] = frozenset(sinks)


def plain_sinks(flow_name: str) -> frozenset[str]:
    """The sinks declared plain for ``flow_name`` (none by default)."""
    return _PLAIN_SINKS.get(flow_name, frozenset())


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
    delta_columns: tuple[str, ...] = ()
    """The columns of the delta table after ``batch_id`` and ``op`` (state tables) or of the whole
    delta table (sinks: ``batch_id`` first); equal to ``columns`` but for a plain sink."""


class WarehouseLayout:
    """See the module docstring. ``tables`` lists state tables first, then sinks."""

    def __init__(
        self,
        flow: CompiledDataflow,
        schema: str | None = None,
        *,
        plain: Iterable[str] | None = None,
        history: Sequence[LayoutVersion] = (),
    ) -> None:
        self.flow = flow
        #: Staging's layout history (:mod:`staging.history`): how a target recorded with an
        #: earlier version's fingerprint is switched to this one (:mod:`migration.evolution`).
        self.history: tuple[LayoutVersion, ...] = tuple(history)
        self.shape = describe_flow(flow)
        self.stream = flow.name
        self.schema = schema or _identifier(flow.name)
        self.delta_schema = f"{self.schema}_delta"
        self.plain = frozenset(plain) if plain is not None else plain_sinks(flow.name)
        unknown = sorted(self.plain - set(flow.sinks))
        if unknown:
            raise WarehouseLayoutError(
                f"plain sinks {unknown} are not sinks of dataflow {flow.name!r}"
            )
        self.fingerprint = self.shape.fingerprint()
        if self.plain:
            digest = hashlib.sha256(",".join(sorted(self.plain)).encode()).hexdigest()[:8]
            self.fingerprint = f"{self.fingerprint}-plain-{digest}"
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
        reserved = sorted((set(flow.tables) | set(flow.sinks)) & set(REJECTS))
        if reserved:
            raise WarehouseLayoutError(
                f"dataflow {flow.name!r} has state tables or sinks named {reserved}: in the "
                f"warehouse, {self.schema}.dead_letters and {self.schema}.aborts hold the "
                "dataflow's rejects (dead letters and aborted transactions); rename them"
            )
        for name, table in flow.tables.items():
            image = table.image_columns()
            row_id = table.row_id()
            self.tables[name] = WarehouseTable(
                name,
                "state",
                tuple(image),
                tuple(row_id),
                history=table.kind == "history",
                delta_columns=tuple(image),
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
                info={_ROW_KEYED: True},
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
            every = ("batch_id", *columns)
            if sink in self.plain:
                kept = sink_columns(flow, sink)
                self.tables[sink] = WarehouseTable(
                    sink, "output", tuple(kept), (), delta_columns=every
                )
                self.full[sink] = _table(
                    sink,
                    self.metadata,
                    *[_column(c, sql_type(t)) for c, t in kept.items()],
                    schema=self.schema,
                )
            else:
                self.tables[sink] = WarehouseTable(sink, "output", every, (), delta_columns=every)
                self.full[sink] = _table(
                    sink,
                    self.metadata,
                    _column("batch_id", sa.BigInteger(), nullable=False),
                    *[_column(c, sql_type(t)) for c, t in columns.items()],
                    schema=self.schema,
                )
            self.delta[sink] = _table(
                sink,
                self.metadata,
                _column("batch_id", sa.BigInteger(), nullable=False),
                *[_column(c, sql_type(t)) for c, t in columns.items()],
                schema=self.delta_schema,
            )
        self.dead_letters = _table(
            "dead_letters",
            self.metadata,
            *[
                _column(
                    f.name,
                    _arrow_sql_type(f.type),
                    primary_key=f.name == "id",
                    autoincrement=False,
                    nullable=f.name not in ("id", "batch_id"),
                )
                for f in STAGED_DEAD_LETTER_SCHEMA
            ],
            schema=self.schema,
            info={_ROW_KEYED: True},
        )
        self.aborts = _table(
            "aborts",
            self.metadata,
            *[
                _column(f.name, _arrow_sql_type(f.type), nullable=f.name != "batch_id")
                for f in STAGED_ABORT_SCHEMA
            ],
            schema=self.schema,
        )
        self.ledger = _table(
            "ledger",
            self.metadata,
            _column("stream", sa.Text(), primary_key=True),
            _column("batch_id", sa.BigInteger(), primary_key=True, autoincrement=False),
            _column("rows", sa.BigInteger(), nullable=False),
            _column("via", sa.Text(), nullable=False),
            _column("loaded_at", sa.TIMESTAMP(timezone=False), nullable=False),
            _column("version", sa.Integer()),
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
        self.layouts = _table(
            "layouts",
            self.metadata,
            _column("stream", sa.Text(), primary_key=True),
            _column("version", sa.BigInteger(), primary_key=True, autoincrement=False),
            _column("fingerprint", sa.Text(), nullable=False),
            _column("digest", sa.Text(), nullable=False),
            _column("applied_at", sa.TIMESTAMP(timezone=False), nullable=False),
            _column("watermark", sa.BigInteger(), nullable=False),
            schema=LEDGER_SCHEMA,
        )
        # a target added after staging released batches (migration.bootstrap)
        self.bootstraps = _table(
            "bootstraps",
            self.metadata,
            _column("stream", sa.Text(), primary_key=True),
            _column("state", sa.Text(), nullable=False),
            _column("through_batch", sa.BigInteger()),
            _column("peer", sa.Text()),
            _column("peer_watermark", sa.BigInteger()),
            _column("sinks_from", sa.BigInteger(), nullable=False),
            _column("rows", sa.BigInteger(), nullable=False),
            _column("started_at", sa.TIMESTAMP(timezone=False), nullable=False),
            _column("loaded_at", sa.TIMESTAMP(timezone=False)),
            _column("caught_up_at", sa.TIMESTAMP(timezone=False)),
            schema=LEDGER_SCHEMA,
        )
        self.bootstrap_tables = _table(
            "bootstrap_tables",
            self.metadata,
            _column("stream", sa.Text(), primary_key=True),
            _column("relation", sa.Text(), primary_key=True),
            _column("through_batch", sa.BigInteger(), nullable=False),
            _column("first_batch", sa.BigInteger(), nullable=False),
            _column("rows", sa.BigInteger(), nullable=False),
            _column("peer", sa.Text()),
            _column("peer_watermark", sa.BigInteger()),
            _column("ms", sa.Double(), nullable=False),
            _column("note", sa.Text()),
            _column("copied_at", sa.TIMESTAMP(timezone=False), nullable=False),
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
    def dead_letters_name(self) -> str:
        return self.full_name("dead_letters")

    @property
    def aborts_name(self) -> str:
        return self.full_name("aborts")

    @property
    def ledger_name(self) -> str:
        return f"{q(LEDGER_SCHEMA)}.{q('ledger')}"

    @property
    def merges_name(self) -> str:
        return f"{q(LEDGER_SCHEMA)}.{q('merges')}"

    @property
    def layouts_name(self) -> str:
        return f"{q(LEDGER_SCHEMA)}.{q('layouts')}"

    @property
    def version(self) -> int:
        """The dataflow version of this layout (0 without a history)."""
        return self.history[-1].version if self.history else 0

    def version_of(self, batch_id: int) -> int | None:
        """The version that produced batch ``batch_id`` (:func:`staging.history.version_of`)."""
        return version_of(self.history, batch_id)

    @property
    def streams_name(self) -> str:
        return f"{q(LEDGER_SCHEMA)}.{q('streams')}"

    @property
    def bootstraps_name(self) -> str:
        return f"{q(LEDGER_SCHEMA)}.{q('bootstraps')}"

    @property
    def bootstrap_tables_name(self) -> str:
        return f"{q(LEDGER_SCHEMA)}.{q('bootstrap_tables')}"

    def current_sql(self, name: str) -> str:
        """A SELECT of state table ``name`` as of the last loaded batch: the full table's rows
        overlaid with the newest unmerged delta of each row id (the two-space read)."""
        table = self.tables[name]
        if table.kind != "state":
            listed = ", ".join(q(c) for c in table.columns)
            return (
                f"SELECT {listed} FROM {self.full_name(name)} UNION ALL "
                f"SELECT {listed} FROM {self.delta_name(name)}"
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


def create_statements(
    metadata: sa.MetaData,
    dialect: sa.engine.Dialect,
    schemas: Iterable[str],
    *,
    row_keys: bool = True,
) -> list[str]:
    """``CREATE SCHEMA``/``CREATE TABLE ... IF NOT EXISTS`` statements for ``metadata``, compiled
    by ``dialect`` without a connection (a DuckDB file is then created through the one plain
    connection its process holds: DuckDB refuses a second connection to a file with another
    configuration, which duckdb-engine's own connections have). ``row_keys=False`` leaves out
    the primary keys of the state tables' full tables (DuckDB; see the module docstring); their
    row id columns stay ``NOT NULL``. A table that exists already is left as it is (the rejects
    tables of a layout that had none are created). ``row_keys=False`` drops the dead letters'
    key too."""
    from sqlalchemy.schema import CreateTable

    statements = [f"CREATE SCHEMA IF NOT EXISTS {q(schema)}" for schema in schemas]
    for table in metadata.sorted_tables:
        if not row_keys and table.info.get(_ROW_KEYED):
            table = _without_primary_key(table)
        statements.append(str(CreateTable(table, if_not_exists=True).compile(dialect=dialect)))
    return statements


#: ``Table.info`` flag of a state table's full table (keyed by its row id) and of the dead letters
#: (keyed by id).
_ROW_KEYED = "streamdi_row_keyed"


def _without_primary_key(table: sa.Table) -> sa.Table:
    """A copy of ``table`` (in a metadata of its own) whose columns form no primary key."""
    columns = [
        _column(c.name, c.type, autoincrement=False, nullable=bool(c.nullable))
        for c in table.columns
    ]
    return _table(table.name, sa.MetaData(), *columns, schema=table.schema)


def _arrow_sql_type(kind: pa.DataType) -> sa.types.TypeEngine[Any]:
    """The SQLAlchemy type of a rejects column (the staging tables' int32, int64 and text)."""
    if pa.types.is_int32(kind):
        return sa.Integer()
    if pa.types.is_int64(kind):
        return sa.BigInteger()
    if pa.types.is_string(kind):
        return sa.Text()
    raise TypeError(f"no warehouse type for {kind}")


def _column(name: str, *args: Any, **kwargs: Any) -> sa.Column[Any]:
    # every name quoted: a column named like a keyword of one dialect (DuckDB's AT, ...) still works
    return sa.Column(name, *args, quote=True, **kwargs)


def _table(name: str, metadata: sa.MetaData, *args: Any, **kwargs: Any) -> sa.Table:
    return sa.Table(name, metadata, *args, quote=True, quote_schema=True, **kwargs)


def _identifier(name: str) -> str:
    text = "".join(ch if ch.isalnum() else "_" for ch in name.lower())
    return text if text and not text[0].isdigit() else f"s_{text}"
