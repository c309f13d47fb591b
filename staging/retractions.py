"""Retractions: a batch that replaces the rows a sink delivered for earlier batches.

A sink's rows are append-only facts, each with the batch that delivered it. A reprocess of a sink
(:mod:`runtime.reprocess`) recomputes the rows of batches ``first..last`` and commits them as a
new batch ``b``; the old rows must go in the same step. Batch ``b`` therefore carries a
*retraction*, ``(sink, first, last)``, kept in ``streamdi.retractions`` with ``b`` (and the id of
the shadow that made it, so a rerun of the same reprocess does not cut over twice):

* staging's reads of a sink as of a watermark at or past ``b`` leave the retracted rows out
  (:func:`retracted_filter`, used by :meth:`staging.snapshot.StagingSnapshot.outputs`), while the
  segment files keep them until they are released like any rows;
* a warehouse deletes the retracted rows in the transaction that loads batch ``b``
  (:meth:`migration.targets.base.BaseTarget.load`), after inserting the range's rows, so a
  warehouse that had not loaded the old rows yet loads and deletes them in one go;
* the query service, reading a warehouse up to ``w`` below ``b`` and staging above it, leaves
  the retracted rows out of the warehouse's side too (:mod:`api.union`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa

from staging.layout import SYSTEM, arrow_of, qualified

if TYPE_CHECKING:
    from staging.store import StagingStore

RETRACTIONS = qualified(SYSTEM, "retractions")

#: ``streamdi.retractions`` as Arrow: the sink, the batches whose rows it retracts, the batch that
#: retracted them, the shadow that made it.
RETRACTION_SCHEMA = pa.schema(
    [
        ("sink", pa.string()),
        ("first_batch", pa.int64()),
        ("last_batch", pa.int64()),
        ("batch_id", pa.int64()),
        ("shadow", pa.string()),
    ]
)


@dataclass(frozen=True)
class SinkRetraction:
    """The rows ``sink`` delivered for batches ``first_batch..last_batch``, retracted by the batch
    that carries this (``shadow``: the reprocess's shadow, for its reruns)."""

    sink: str
    first_batch: int
    last_batch: int
    shadow: str | None = None


def retraction_rows(batch_id: int, retractions: Iterable[SinkRetraction]) -> pa.Table:
    """``retractions`` of batch ``batch_id`` as rows of :data:`RETRACTION_SCHEMA`."""
    items = list(retractions)
    return pa.table(
        {
            "sink": [r.sink for r in items],
            "first_batch": [r.first_batch for r in items],
            "last_batch": [r.last_batch for r in items],
            "batch_id": [batch_id] * len(items),
            "shadow": [r.shadow for r in items],
        },
        schema=RETRACTION_SCHEMA,
    )


def read_retractions(
    con: duckdb.DuckDBPyConnection, *, after: int = 0, upto: int | None = None
) -> pa.Table:
    """The retractions of batches ``(after, upto]`` (every one after ``after`` when ``upto`` is
    None), in batch order."""
    where = f"batch_id > {int(after)}" + ("" if upto is None else f" AND batch_id <= {int(upto)}")
    try:
        rows = arrow_of(
            con.sql(f"SELECT * FROM {RETRACTIONS} WHERE {where} ORDER BY batch_id, sink")
        )
    except duckdb.CatalogException:  # a read-only file of an earlier layout
        return RETRACTION_SCHEMA.empty_table()
    return rows.select(RETRACTION_SCHEMA.names).cast(RETRACTION_SCHEMA)


def cut_over_by(store: StagingStore, shadow: str) -> int | None:
    """The batch that carries the retractions of reprocess shadow ``shadow``, if one does."""
    cursor = store.cursor()
    try:
        found = cursor.execute(
            f"SELECT min(batch_id) FROM {RETRACTIONS} WHERE shadow = ?", [shadow]
        ).fetchall()
    finally:
        cursor.close()
    return None if found[0][0] is None else int(found[0][0])


def ranges(retractions: pa.Table, sink: str) -> list[tuple[int, int]]:
    """The batch ranges ``retractions`` retract from ``sink``."""
    return [
        (int(r["first_batch"]), int(r["last_batch"]))
        for r in retractions.to_pylist()
        if r["sink"] == sink
    ]


def retracted_filter(batch_ranges: Sequence[tuple[int, int]], column: str = "batch_id") -> str:
    """A SQL condition true for the rows of ``column`` outside every range (``TRUE`` when there
    are none); both DuckDB and PostgreSQL read it."""
    if not batch_ranges:
        return "TRUE"
    return " AND ".join(
        f"NOT ({column} BETWEEN {int(first)} AND {int(last)})" for first, last in batch_ranges
    )
