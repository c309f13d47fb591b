"""Synthetic staged batches for the benchmarks: one table's upserts (and a sink's rows) as a
:class:`~staging.store.BatchCommit` of one Kafka record on partition ``("bench", 0)``."""

from __future__ import annotations

import time

import pyarrow as pa

from etl_dataflows.batch import ABORT_SCHEMA, BatchResult, TableDelta
from staging.batch_commit import BatchCommit, StreamProgress
from staging.layout import DEAD_LETTER_INPUT_SCHEMA


def upsert_commit(
    batch_id: int,
    table: str,
    upserts: pa.Table,
    key: str,
    *,
    stream: str,
    events: int,
    position: int,
    outputs: dict[str, pa.Table] | None = None,
) -> BatchCommit:
    """Batch ``batch_id``: ``upserts`` into state table ``table`` (row id column ``key``, nothing
    deleted), ``outputs`` into sinks, ``events`` events of ``stream`` read up to ``position``."""
    result = BatchResult(
        batch_id=batch_id,
        outputs=outputs or {},
        dead_letters=pa.table({}),
        aborts=ABORT_SCHEMA.empty_table(),
        deltas={table: TableDelta(upserts, upserts.select([key]).slice(0, 0))},
        sequences={},
    )
    return BatchCommit(
        batch_id=batch_id,
        result=result,
        dead_letters=DEAD_LETTER_INPUT_SCHEMA.empty_table(),
        offsets={("bench", 0): batch_id},
        streams={stream: StreamProgress(batch_id, None, position, -1)},
        events=events,
        records=1,
        arrived_at=time.time(),
        executed_ms=0.0,
    )
