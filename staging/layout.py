"""Where each thing lives in the staging DuckDB file, and the DDL that creates it.

=========================  ========================================================================
``state.<table>``          a state table in its image form (all versions of a history table): a
                           view of the folded rows, which live in the state file beside this one
                           (:mod:`staging.state_file`), and the deltas since
``delta_log.<table>``      per-batch net changes: ``batch_id``, ``op`` (upsert/delete), the image
                           (a view over Parquet segment files, :mod:`staging.segments`)
``outputs.<sink>``         output rows of a sink, with ``batch_id`` (a view over segment files)
``streamdi.segments``      the segment files the views read: relation, name, file, batch range,
                           rows and merge level
``streamdi.batches``       the batch ledger: one row per committed batch (counts and times)
``streamdi.offsets``       next Kafka offset to consume per (topic, partition)
``streamdi.streams``       per stream: last collector batch id applied, event-time high mark
``streamdi.partitions``    per (stream, topic, partition) of a stream merged over several
                           partitions: its last batch id, its event-time watermark and the events
                           it holds back (Arrow IPC) until the merge releases them
``streamdi.sequences``     surrogate-key and entry-id counters of the engine
``streamdi.dead_letters``  rejected records and events with topic, partition, offset and reason
``streamdi.aborts``        aborted transactions with their reason
``streamdi.meta``          the dataflow's name and fingerprint (a file serves one dataflow),
                           ``released_through``: deltas of batches up to it were released, and
                           ``state_tables``: where each state table's folded rows are in the
                           state file
``streamdi.layouts``       the layout history: one row per version of the dataflow (its
                           fingerprint, digest and shape, when and after which batch it took over)
``streamdi.migration_acks``  per warehouse target, the last batch it acknowledged (migration)
``streamdi.retractions``   per batch that replaced a sink's rows of earlier batches: the sink and
                           the batch range (a reprocess of the sink)
=========================  ========================================================================

The system tables' layout has a version, ``layout_version`` in ``streamdi.meta``
(:data:`LAYOUT_VERSION`). Opening a file for writing brings an older layout up to date in one
transaction (:func:`upgrade_statements`); a read-only opening reads an older layout as it is (the
columns it lacks read as null).

* 1: the first layout (no ``layout_version`` row).
* 2: dead letters keep the original in full: ``encoding`` (``json``, ``utf8``, ``base64``; null
  for rows of layout 1, whose payload is a Python repr or text that may be cut) and
  ``payload_bytes`` (the original's size in bytes).
* 3: ``streamdi.partitions``, the merge state of streams read from several partitions (a new
  table: a file of layout 2 gains it empty).
* 4: the delta logs and outputs are views over Parquet segment files registered in
  ``streamdi.segments`` (a file of an earlier layout has each such table's rows moved into one
  segment, and the table replaced by its view).
* 5: the state tables are views (:mod:`staging.folding`): the rows folded every few batches live
  in ``state_base``, the deltas since are read from the delta log (a file of an earlier layout has
  each state table's rows moved into ``state_base``, folded through its last batch).
* 6: the dataflow's layout history, ``streamdi.layouts`` (:mod:`staging.history`), and the
  version that produced each batch (``streamdi.batches.version``; null for batches committed
  before). A file of an earlier layout records the dataflow it was opened with as version 1.
* 7: ``streamdi.retractions``, the sink rows of earlier batches a batch replaces
  (:mod:`staging.retractions`; a new table: a file of layout 6 gains it empty). An older streamdi
  would read retracted rows as live, so it refuses the file.
* 8: the folded state tables live in a DuckDB file of their own, ``<file>.state``
  (:mod:`staging.state_file`), so that their checkpoints never hold back a batch's commit; a
  file of an earlier layout has its ``state_base`` rows (or, before layout 5, its state tables'
  rows) copied there and dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import duckdb
import pyarrow as pa

from etl_dataflows.batch import ABORT_SCHEMA
from etl_dataflows.dataflow import CompiledDataflow
from etl_dataflows.evolution.shape import describe_flow, sink_output_columns
from etl_dataflows.state import image_schema
from etl_dataflows.types import META_COLUMNS, ColumnType, arrow_type

STATE, DELTA, OUTPUTS, SYSTEM = "state", "delta_log", "outputs", "streamdi"
#: The folded state tables behind the ``state`` views (:mod:`staging.folding`).
STATE_BASE = "state_base"

_DUCK: dict[ColumnType, str] = {
    "int64": "BIGINT",
    "float64": "DOUBLE",
    "bool": "BOOLEAN",
    "string": "VARCHAR",
    "timestamp": "TIMESTAMP",
    "date": "DATE",
}

DEAD_LETTER_TABLE_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("batch_id", pa.int64()),
        ("stream", pa.string()),
        ("step", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("pos", pa.int64()),
        ("ts", pa.int64()),
        ("reason", pa.string()),
        ("payload", pa.string()),
        ("encoding", pa.string()),
        ("payload_bytes", pa.int64()),
    ]
)
"""One staged dead letter. ``step`` is ``ingest`` for records rejected before the engine (parse
errors, corrupt payloads, late or out-of-range events); ``offset`` is the Kafka record that carried
it. ``payload`` is the original event or record in ``encoding``: ``json`` (the event as a JSON
document), ``utf8`` (the original text), ``base64`` (the original bytes); ``payload_bytes`` is the
original's size (larger than what the payload holds only when a reason says it was cut)."""

#: The version of the system tables' layout this code writes (see the module docstring).
LAYOUT_VERSION = 8

PAYLOAD_ENCODINGS = ("json", "utf8", "base64")

DEAD_LETTER_INPUT_SCHEMA = pa.schema([f for f in DEAD_LETTER_TABLE_SCHEMA if f.name != "id"])
"""What a commit hands in: the dead-letter row without its id (staging assigns ids)."""


def arrow_of(relation: Any) -> pa.Table:
    """The Arrow table of a DuckDB relation (duckdb 1.x ``arrow()``, 2.x ``to_arrow_table()``)."""
    to_table = getattr(relation, "to_arrow_table", None)
    table: pa.Table = to_table() if to_table is not None else relation.arrow()
    return table


def q(name: str) -> str:
    """A quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def qualified(schema: str, name: str) -> str:
    return f"{q(schema)}.{q(name)}"


def literal(text: str) -> str:
    """A quoted SQL string literal (for DDL, which takes no parameters)."""
    return "'" + text.replace("'", "''") + "'"


def insert_values(con: duckdb.DuckDBPyConnection, target: str, rows: list[tuple[Any, ...]]) -> None:
    """``INSERT INTO target VALUES`` of a few rows (progress rows, segment registrations), as one
    statement with parameters: registering an Arrow table for them cost more than the
    statement. Bulk rows go as Arrow, never through here."""
    if not rows:
        return
    one = "(" + ", ".join(["?"] * len(rows[0])) + ")"
    con.execute(
        f"INSERT INTO {target} VALUES {', '.join([one] * len(rows))}",
        [v for row in rows for v in row],
    )


def duck_type(kind: ColumnType | None) -> str:
    return _DUCK[kind] if kind is not None else "VARCHAR"


def output_columns(flow: CompiledDataflow, sink: str) -> dict[str, ColumnType | None]:
    """The columns of a sink's output table (without ``batch_id``), meta columns included
    (:func:`~etl_dataflows.evolution.shape.sink_output_columns`)."""
    return sink_output_columns(flow, sink)


def sink_columns(flow: CompiledDataflow, sink: str) -> dict[str, ColumnType | None]:
    """The data columns a sink delivers (its output columns without the meta columns)."""
    return {n: t for n, t in output_columns(flow, sink).items() if n not in META_COLUMNS}


def fingerprint(flow: CompiledDataflow) -> str:
    """A digest of everything the file's layout depends on (tables, sources, sinks):
    :meth:`~etl_dataflows.evolution.shape.DataflowShape.fingerprint`."""
    return describe_flow(flow).fingerprint()


def _columns_sql(columns: Mapping[str, ColumnType | None]) -> str:
    return ", ".join(f"{q(n)} {duck_type(t)}" for n, t in columns.items())


def delta_schema(flow: CompiledDataflow, name: str) -> pa.Schema:
    """The Arrow schema of state table ``name``'s delta log: ``batch_id``, ``op``, the image."""
    return pa.schema(
        [("batch_id", pa.int64()), ("op", pa.string()), *image_schema(flow.tables[name])]
    )


def outputs_schema(flow: CompiledDataflow, sink: str) -> pa.Schema:
    """The Arrow schema of a sink's staged outputs: ``batch_id`` and the output columns (a
    column of unknown type is text)."""
    columns = output_columns(flow, sink)
    return pa.schema(
        [("batch_id", pa.int64())]
        + [(n, arrow_type(t) if t is not None else pa.string()) for n, t in columns.items()]
    )


def segment_schemas(flow: CompiledDataflow) -> dict[tuple[str, str], pa.Schema]:
    """Every relation kept as segment files, ``(DELTA or OUTPUTS, name)``, with its schema."""
    schemas = {(DELTA, name): delta_schema(flow, name) for name in flow.tables}
    schemas.update({(OUTPUTS, sink): outputs_schema(flow, sink) for sink in flow.sinks})
    return schemas


def create_statements(flow: CompiledDataflow) -> list[str]:
    """``CREATE ... IF NOT EXISTS`` statements for the whole layout of ``flow`` in the staging
    file but the views (over segment files, and the state views:
    :class:`~staging.store.StagingStore` defines those); the folded state tables are the state
    file's (:func:`state_base_ddl`)."""
    statements = [f"CREATE SCHEMA IF NOT EXISTS {q(s)}" for s in (STATE, DELTA, OUTPUTS, SYSTEM)]
    system = {
        "batches": "batch_id BIGINT PRIMARY KEY, status VARCHAR NOT NULL, events BIGINT, "
        "records BIGINT, committed_txns BIGINT, aborted_txns BIGINT, dead_letters BIGINT, "
        "output_rows BIGINT, arrived_at TIMESTAMP, executed_ms DOUBLE, committed_at TIMESTAMP, "
        "streams VARCHAR, version INTEGER",
        "offsets": "topic VARCHAR NOT NULL, partition INTEGER NOT NULL, next_offset BIGINT NOT "
        "NULL, batch_id BIGINT NOT NULL",
        "streams": "stream VARCHAR NOT NULL, last_batch BIGINT NOT NULL, max_ts BIGINT, "
        "events BIGINT NOT NULL, last_pos BIGINT NOT NULL, batch_id BIGINT NOT NULL",
        "partitions": "stream VARCHAR NOT NULL, topic VARCHAR NOT NULL, partition INTEGER NOT "
        "NULL, last_batch BIGINT NOT NULL, max_ts BIGINT, held BLOB, batch_id BIGINT NOT NULL",
        "sequences": "name VARCHAR NOT NULL, value BIGINT NOT NULL",
        "dead_letters": "id BIGINT NOT NULL, batch_id BIGINT NOT NULL, stream VARCHAR, "
        'step VARCHAR, topic VARCHAR, partition INTEGER, "offset" BIGINT, pos BIGINT, ts BIGINT, '
        "reason VARCHAR, payload VARCHAR, replayed_in BIGINT, encoding VARCHAR, "
        "payload_bytes BIGINT",
        "aborts": "batch_id BIGINT NOT NULL, "
        + ", ".join(
            f"{q(f.name)} {'BIGINT' if f.type == pa.int64() else 'VARCHAR'}" for f in ABORT_SCHEMA
        ),
        "meta": "key VARCHAR PRIMARY KEY, value VARCHAR NOT NULL",
        "migration_acks": "target VARCHAR PRIMARY KEY, batch_id BIGINT NOT NULL, "
        "acked_at TIMESTAMP NOT NULL",
        "segments": "relation VARCHAR NOT NULL, name VARCHAR NOT NULL, file VARCHAR NOT NULL, "
        "first_batch BIGINT NOT NULL, last_batch BIGINT NOT NULL, rows BIGINT NOT NULL, "
        "level INTEGER NOT NULL",
        "retractions": "sink VARCHAR NOT NULL, first_batch BIGINT NOT NULL, "
        "last_batch BIGINT NOT NULL, batch_id BIGINT NOT NULL, shadow VARCHAR",
        "layouts": "version INTEGER PRIMARY KEY, fingerprint VARCHAR NOT NULL, "
        "digest VARCHAR NOT NULL, shape VARCHAR NOT NULL, applied_at TIMESTAMP NOT NULL, "
        "watermark BIGINT NOT NULL",
    }
    for name, columns in system.items():
        statements.append(f"CREATE TABLE IF NOT EXISTS {qualified(SYSTEM, name)} ({columns})")
    return statements


def state_base_ddl(flow: CompiledDataflow, name: str, target: str) -> str:
    """``CREATE TABLE IF NOT EXISTS <target>`` (a qualified table: the state file's, for state
    table ``name``) in the image columns of ``flow``'s table."""
    image = flow.tables[name].image_columns()
    return f"CREATE TABLE IF NOT EXISTS {target} ({_columns_sql(image)})"


def upgrade_statements() -> list[str]:
    """Statements that bring the system tables of any earlier layout to :data:`LAYOUT_VERSION`
    (idempotent: they change nothing on a file already there). Run them in the transaction that
    creates the layout, then record the version."""
    dead = qualified(SYSTEM, "dead_letters")
    return [
        f"ALTER TABLE {dead} ADD COLUMN IF NOT EXISTS encoding VARCHAR",
        f"ALTER TABLE {dead} ADD COLUMN IF NOT EXISTS payload_bytes BIGINT",
        f"ALTER TABLE {qualified(SYSTEM, 'batches')} ADD COLUMN IF NOT EXISTS version INTEGER",
    ]


def state_schema(flow: CompiledDataflow, table: str) -> pa.Schema:
    return image_schema(flow.tables[table])
