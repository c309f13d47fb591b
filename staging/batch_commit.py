"""One batch's commit as staging receives it, and the rows it becomes.

:class:`BatchCommit` is what the pipeline hands :meth:`staging.store.StagingStore.commit`: an
engine batch's result with what it consumed (offsets, per-stream and per-partition progress).
The builders below turn a group of them into the Arrow tables the commit writes (the delta-log
rows of a table, the dead letters with their ids, the aborts, the batch ledger); the readers
read the progress back on any connection to the staging file (a snapshot's cursor too).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

import duckdb
import pyarrow as pa

from etl_dataflows.batch import ABORT_SCHEMA, BatchResult, TableDelta
from etl_dataflows.dataflow import CompiledDataflow
from etl_dataflows.state import image_schema
from staging.layout import (
    DEAD_LETTER_INPUT_SCHEMA,
    DEAD_LETTER_TABLE_SCHEMA,
    SYSTEM,
    qualified,
)
from staging.retractions import SinkRetraction


@dataclass(frozen=True)
class StreamProgress:
    """How far a stream has been applied: the last collector batch id, the event-time high mark
    (for lateness checks), the events applied so far and the last source position applied."""

    last_batch: int = 0
    max_ts: int | None = None
    events: int = 0
    last_pos: int = -1


@dataclass(frozen=True)
class PartitionProgress:
    """How far one partition of a stream merged over several partitions has been read: the last
    collector batch id completed in it, its event-time watermark (the newest ``_ts`` read from it)
    and the events read from it that the merge still holds back (an Arrow IPC stream, None when
    it holds none). Staging keeps the bytes as they are; :mod:`ingest.merging` writes and reads
    them."""

    last_batch: int = 0
    max_ts: int | None = None
    held: bytes | None = None


#: ``(stream, topic, partition)``: the key of a :class:`PartitionProgress`.
StreamPartition = tuple[str, str, int]


@dataclass
class BatchCommit:
    """Everything one engine batch produced plus what it consumed; committed atomically.

    ``dead_letters`` has :data:`~staging.layout.DEAD_LETTER_INPUT_SCHEMA` (ingest rejects and the
    engine's dead letters, with the Kafka record each came in). ``offsets`` maps
    ``(topic, partition)`` to the next offset to consume; ``streams`` the progress per stream after
    this batch; ``replayed`` the dead-letter ids this batch re-offered; ``partitions`` the merge
    state after this batch of every partition of the streams read from several partitions (empty
    for streams of one partition).
    """

    batch_id: int
    result: BatchResult
    dead_letters: pa.Table
    offsets: Mapping[tuple[str, int], int]
    streams: Mapping[str, StreamProgress]
    events: int
    records: int
    arrived_at: float
    executed_ms: float
    replayed: list[int] = field(default_factory=list)
    partitions: Mapping[StreamPartition, PartitionProgress] = field(default_factory=dict)
    retractions: list[SinkRetraction] = field(default_factory=list)
    """Sink rows of earlier batches this batch replaces (:mod:`staging.retractions`)."""

    @classmethod
    def without_events(
        cls,
        batch_id: int,
        *,
        deltas: Mapping[str, TableDelta] | None = None,
        sequences: Mapping[str, int] | None = None,
        outputs: Mapping[str, pa.Table] | None = None,
        retractions: Iterable[SinkRetraction] = (),
        offsets: Mapping[tuple[str, int], int] | None = None,
        streams: Mapping[str, StreamProgress] | None = None,
        partitions: Mapping[StreamPartition, PartitionProgress] | None = None,
    ) -> BatchCommit:
        """A batch that consumed no events but changes state (``deltas``, ``sequences``),
        delivers ``outputs`` with ``retractions``, or sets the input's progress (``offsets``,
        ``streams``, ``partitions``): a reprocess's cut-over, a shadow's start at a checkpoint."""
        result = BatchResult(
            batch_id=batch_id,
            outputs=dict(outputs or {}),
            dead_letters=pa.table({}),
            aborts=ABORT_SCHEMA.empty_table(),
            deltas=dict(deltas or {}),
            sequences=dict(sequences or {}),
        )
        return cls(
            batch_id=batch_id,
            result=result,
            dead_letters=DEAD_LETTER_INPUT_SCHEMA.empty_table(),
            offsets=dict(offsets or {}),
            streams=dict(streams or {}),
            events=0,
            records=0,
            arrived_at=time.time(),
            executed_ms=0.0,
            partitions=dict(partitions or {}),
            retractions=list(retractions),
        )


# -- progress, read on any connection to the file (a snapshot's cursor too) ----------------------


def read_offsets(con: duckdb.DuckDBPyConnection) -> dict[tuple[str, int], int]:
    """``streamdi.offsets``: the next offset to consume per ``(topic, partition)``."""
    rows = con.execute(f"SELECT topic, partition, next_offset FROM {_sys('offsets')}").fetchall()
    return {(str(t), int(p)): int(o) for t, p, o in rows}


def read_streams(con: duckdb.DuckDBPyConnection) -> dict[str, StreamProgress]:
    """``streamdi.streams``: how far each stream has been applied."""
    rows = con.execute(
        f"SELECT stream, last_batch, max_ts, events, last_pos FROM {_sys('streams')}"
    ).fetchall()
    return {
        str(s): StreamProgress(int(b), None if m is None else int(m), int(e), int(p))
        for s, b, m, e, p in rows
    }


def read_partitions(con: duckdb.DuckDBPyConnection) -> dict[StreamPartition, PartitionProgress]:
    """``streamdi.partitions``: the merge state per ``(stream, topic, partition)`` (empty for a
    file of a layout before 3, which has none)."""
    try:
        rows = con.execute(
            f"SELECT stream, topic, partition, last_batch, max_ts, held FROM {_sys('partitions')}"
        ).fetchall()
    except duckdb.CatalogException:
        return {}
    return {
        (str(s), str(t), int(p)): PartitionProgress(
            int(b), None if m is None else int(m), None if h is None else bytes(h)
        )
        for s, t, p, b, m, h in rows
    }


def read_sequences(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """``streamdi.sequences``: each sequence's value."""
    return {
        str(n): int(v)
        for n, v in con.execute(f"SELECT name, value FROM {_sys('sequences')}").fetchall()
    }


def _sys(name: str) -> str:
    return qualified(SYSTEM, name)


def delta_rows(flow: CompiledDataflow, name: str, commits: list[BatchCommit]) -> pa.Table:
    """The delta log rows of one table over ``commits``: ``batch_id``, ``op``, image columns."""
    table = flow.tables[name]
    schema = image_schema(table)
    out_schema = pa.schema([("batch_id", pa.int64()), ("op", pa.string()), *schema])
    parts = []
    for c in commits:
        delta: TableDelta | None = c.result.deltas.get(name)
        if delta is None or delta.empty:
            continue
        if delta.upserts.num_rows:
            up = delta.upserts.select(schema.names).cast(schema)
            parts.append(_with_op(up, c.batch_id, "upsert", out_schema))
        if delta.deletes.num_rows:
            n = delta.deletes.num_rows
            arrays = [
                delta.deletes.column(f.name).cast(f.type)
                if f.name in delta.deletes.column_names
                else pa.nulls(n, f.type)
                for f in schema
            ]
            parts.append(
                _with_op(
                    pa.Table.from_arrays(arrays, schema=schema), c.batch_id, "delete", out_schema
                )
            )
    if not parts:
        return out_schema.empty_table()
    return pa.concat_tables(parts)


def _with_op(data: pa.Table, batch_id: int, op: str, schema: pa.Schema) -> pa.Table:
    n = data.num_rows
    arrays = [
        pa.repeat(pa.scalar(batch_id, pa.int64()), n),
        pa.repeat(pa.scalar(op, pa.string()), n),
    ]
    return pa.Table.from_arrays(arrays + list(data.columns), schema=schema)


def dead_letter_rows(commits: list[BatchCommit], first_id: int) -> tuple[pa.Table, int]:
    parts = [c.dead_letters for c in commits if c.dead_letters.num_rows]
    if not parts:
        return DEAD_LETTER_TABLE_SCHEMA.empty_table(), first_id
    rows = pa.concat_tables([_dead_letter_input(p) for p in parts])
    ids = pa.array(range(first_id, first_id + rows.num_rows), pa.int64())
    return rows.add_column(0, "id", ids), first_id + rows.num_rows


def _dead_letter_input(part: pa.Table) -> pa.Table:
    """A handed-in dead-letter table in :data:`DEAD_LETTER_INPUT_SCHEMA`; ``encoding`` and
    ``payload_bytes``, when absent, are null (the payload's form is then not known)."""
    optional = ("encoding", "payload_bytes")
    missing = [
        f.name
        for f in DEAD_LETTER_INPUT_SCHEMA
        if f.name not in part.column_names and f.name not in optional
    ]
    if missing:
        raise KeyError(f"dead letters lack the columns {missing}")
    columns = [
        part.column(f.name).cast(f.type)
        if f.name in part.column_names
        else pa.nulls(part.num_rows, f.type)
        for f in DEAD_LETTER_INPUT_SCHEMA
    ]
    return pa.Table.from_arrays(columns, schema=DEAD_LETTER_INPUT_SCHEMA)


def abort_rows(commits: list[BatchCommit]) -> pa.Table:
    parts = []
    for c in commits:
        aborts = c.result.aborts
        if aborts.num_rows:
            ids = pa.array([c.batch_id] * aborts.num_rows, pa.int64())
            parts.append(aborts.add_column(0, "batch_id", ids))
    if not parts:
        return pa.table({"batch_id": pa.array([], pa.int64())})
    return pa.concat_tables(parts)


def ledger_rows(commits: list[BatchCommit], version: int) -> pa.Table:
    now = datetime.now(UTC).replace(tzinfo=None)

    def ts(epoch: float) -> datetime:
        return datetime.fromtimestamp(epoch, UTC).replace(tzinfo=None)

    return pa.table(
        {
            "batch_id": pa.array([c.batch_id for c in commits], pa.int64()),
            "status": pa.array(["committed"] * len(commits), pa.string()),
            "events": pa.array([c.events for c in commits], pa.int64()),
            "records": pa.array([c.records for c in commits], pa.int64()),
            "committed_txns": pa.array([c.result.committed for c in commits], pa.int64()),
            "aborted_txns": pa.array([c.result.aborted for c in commits], pa.int64()),
            "dead_letters": pa.array([c.dead_letters.num_rows for c in commits], pa.int64()),
            "output_rows": pa.array(
                [sum(t.num_rows for t in c.result.outputs.values()) for c in commits], pa.int64()
            ),
            "arrived_at": pa.array([ts(c.arrived_at) for c in commits], pa.timestamp("us")),
            "executed_ms": pa.array([c.executed_ms for c in commits], pa.float64()),
            "committed_at": pa.array([now] * len(commits), pa.timestamp("us")),
            "streams": pa.array(
                [
                    json.dumps({s: p.last_batch for s, p in sorted(c.streams.items())})
                    for c in commits
                ],
                pa.string(),
            ),
            "version": pa.array([version] * len(commits), pa.int32()),
        }
    )
