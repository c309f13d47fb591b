"""A consistent read of staging at a batch watermark, for the query service.

``with open_snapshot(store) as snap:`` opens a DuckDB read transaction on its own connection: every
read inside sees the staging file exactly as of one committed batch, ``snap.watermark``, while the
pipeline goes on committing. A union query that reads a warehouse up to batch ``W`` reads
:meth:`StagingSnapshot.changes` with ``after=W`` from staging, so every row is seen once, in its
newest version.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import pyarrow as pa

from staging.layout import DELTA, OUTPUTS, STATE, SYSTEM, q, qualified
from staging.store import arrow_of

if TYPE_CHECKING:
    import duckdb

    from staging.store import StagingStore


class StagingSnapshot:
    """Reads of one staging snapshot; valid only inside :func:`open_snapshot`."""

    def __init__(self, store: StagingStore, con: duckdb.DuckDBPyConnection) -> None:
        self._store = store
        self._con = con
        rows = con.execute(
            f"SELECT coalesce(max(batch_id), 0) FROM {qualified(SYSTEM, 'batches')}"
        ).fetchall()
        self.watermark: int = int(rows[0][0]) if rows else 0

    def _table_name(self, name: str) -> str:
        if name not in self._store.flow.tables:
            raise KeyError(
                f"no state table {name!r}; the dataflow has {sorted(self._store.flow.tables)}"
            )
        return name

    def table(self, name: str) -> pa.Table:
        """State table ``name`` at the watermark (all versions of a history table)."""
        table = self._store.flow.tables[self._table_name(name)]
        order = ", ".join(q(c) for c in table.row_id())
        return arrow_of(self._con.sql(f"SELECT * FROM {qualified(STATE, name)} ORDER BY {order}"))

    def changes(self, name: str, *, after: int = 0) -> pa.Table:
        """The newest change of each row of ``name`` in batches ``(after, watermark]``: the
        row's image and ``op`` (``upsert`` or ``delete``) with the ``batch_id`` that made it."""
        table = self._store.flow.tables[self._table_name(name)]
        ids = ", ".join(q(c) for c in table.row_id())
        sql = (
            f"SELECT * EXCLUDE (_rn) FROM (SELECT *, row_number() OVER (PARTITION BY {ids} "
            f"ORDER BY batch_id DESC) AS _rn FROM {qualified(DELTA, name)} "
            f"WHERE batch_id > {int(after)} AND batch_id <= {self.watermark}) "
            f"WHERE _rn = 1 ORDER BY {ids}"
        )
        return arrow_of(self._con.sql(sql))

    def outputs(self, sink: str, *, after: int = 0) -> pa.Table:
        """Output rows of ``sink`` from batches ``(after, watermark]`` in batch order."""
        if sink not in self._store.flow.sinks:
            raise KeyError(f"no sink {sink!r}; the dataflow has {list(self._store.flow.sinks)}")
        return arrow_of(
            self._con.sql(
                f"SELECT * FROM {qualified(OUTPUTS, sink)} WHERE batch_id > {int(after)} AND "
                f"batch_id <= {self.watermark} ORDER BY batch_id, _pos"
            )
        )

    def batches(self) -> pa.Table:
        """The batch ledger up to the watermark."""
        return arrow_of(
            self._con.sql(f"SELECT * FROM {qualified(SYSTEM, 'batches')} ORDER BY batch_id")
        )


@contextmanager
def open_snapshot(store: StagingStore) -> Iterator[StagingSnapshot]:
    """A :class:`StagingSnapshot` of ``store`` in its own read transaction."""
    con = store.cursor()
    try:
        con.execute("BEGIN TRANSACTION")
        yield StagingSnapshot(store, con)
    finally:
        try:
            con.execute("ROLLBACK")
        finally:
            con.close()
