"""A consistent read of staging at a batch watermark, for the query service and a bootstrap.

``with open_snapshot(store) as snap:`` opens a DuckDB read transaction on its own connection: every
read inside sees the staging file exactly as of one committed batch, ``snap.watermark``, while the
pipeline goes on committing. A union query that reads a warehouse up to batch ``W`` reads
:meth:`StagingSnapshot.changes` with ``after=W`` from staging, so every row is seen once, in its
newest version. A warehouse added later copies the state tables whole from one snapshot
(:meth:`StagingSnapshot.table_batches`, in bounded pieces; :mod:`migration.bootstrap`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from staging.batch_commit import StreamProgress
from staging.layout import DELTA, OUTPUTS, STATE, SYSTEM, arrow_of, q, qualified
from staging.retractions import ranges, read_retractions, retracted_filter

if TYPE_CHECKING:
    import duckdb

    from staging.store import StagingStore


class StagingSnapshot:
    """Reads of one staging snapshot; valid only inside :func:`open_snapshot`."""

    def __init__(self, store: StagingStore, con: duckdb.DuckDBPyConnection) -> None:
        self._store = store
        self._con = con
        # one statement fixes the snapshot and reads what nearly every reader needs: the
        # watermark, the release point, and the watermark batch's facts (see facts())
        batches = qualified(SYSTEM, "batches")
        rows = con.execute(
            f"WITH top AS (SELECT * FROM {batches} ORDER BY batch_id DESC LIMIT 1) "
            f"SELECT (SELECT coalesce(max(batch_id), 0) FROM top), "
            f"(SELECT value FROM {qualified(SYSTEM, 'meta')} WHERE key = 'released_through'), "
            f"(SELECT committed_at FROM top), (SELECT streams FROM top), "
            f"(SELECT max(max_ts) FROM {qualified(SYSTEM, 'streams')})"
        ).fetchall()
        watermark, released, committed_at, streams, newest = rows[0]
        self.watermark: int = int(watermark)
        self._released = int(released) if released is not None else 0
        self._facts = _facts(committed_at, streams, newest) if self.watermark else None
        self._retractions: pa.Table | None = None

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

    def _range(self, after: int, upto: int | None) -> str:
        top = self.watermark if upto is None else min(int(upto), self.watermark)
        return f"batch_id > {int(after)} AND batch_id <= {top}"

    def changes(
        self,
        name: str,
        *,
        after: int = 0,
        upto: int | None = None,
        columns: Sequence[str] | None = None,
    ) -> pa.Table:
        """The newest change of each row of ``name`` in batches ``(after, upto]`` (``upto``
        defaults to the watermark): ``batch_id``, ``op`` (``upsert`` or ``delete``) and the row's
        image, or only its row id and ``columns`` when given. Batches at or below
        :meth:`released_through` are gone: a caller reads ``after`` at least that."""
        table = self._store.flow.tables[self._table_name(name)]
        row_id = list(table.row_id())
        ids = ", ".join(q(c) for c in row_id)
        if columns is None:
            picked = "* EXCLUDE (_rn)"
        else:
            wanted = ["batch_id", "op", *row_id, *[c for c in columns if c not in row_id]]
            picked = ", ".join(q(c) for c in dict.fromkeys(wanted))
        sql = (
            f"SELECT {picked} FROM (SELECT *, row_number() OVER (PARTITION BY {ids} "
            f"ORDER BY batch_id DESC) AS _rn FROM {qualified(DELTA, name)} "
            f"WHERE {self._range(after, upto)}) WHERE _rn = 1 ORDER BY {ids}"
        )
        return arrow_of(self._con.sql(sql))

    def outputs(
        self,
        sink: str,
        *,
        after: int = 0,
        upto: int | None = None,
        columns: Sequence[str] | None = None,
    ) -> pa.Table:
        """Output rows of ``sink`` from batches ``(after, upto]`` in batch order (``batch_id``
        and every column, or ``batch_id`` and ``columns``), without the rows a batch up to
        ``upto`` retracted (:mod:`staging.retractions`)."""
        if sink not in self._store.flow.sinks:
            raise KeyError(f"no sink {sink!r}; the dataflow has {list(self._store.flow.sinks)}")
        picked = (
            "*"
            if columns is None
            else ", ".join(q(c) for c in dict.fromkeys(["batch_id", *columns]))
        )
        top = self.watermark if upto is None else min(int(upto), self.watermark)
        keep = retracted_filter(ranges(self.retractions(upto=top), sink))
        return arrow_of(
            self._con.sql(
                f"SELECT {picked} FROM {qualified(OUTPUTS, sink)} WHERE "
                f"{self._range(after, upto)} AND {keep} ORDER BY batch_id, _pos"
            )
        )

    def retractions(self, *, after: int = 0, upto: int | None = None) -> pa.Table:
        """The sink retractions of batches ``(after, upto]`` (:mod:`staging.retractions`), read
        once per snapshot (a union reads them for each sink it answers)."""
        if self._retractions is None:
            self._retractions = read_retractions(self._con, upto=self.watermark)
        top = self.watermark if upto is None else min(int(upto), self.watermark)
        batch = self._retractions["batch_id"]
        keep = pc.and_(pc.greater(batch, int(after)), pc.less_equal(batch, top))
        return self._retractions.filter(keep)

    # -- bulk reads in bounded pieces (a warehouse's bootstrap, migration.bootstrap) ------------

    def table_batches(self, name: str, *, batch_rows: int = 1 << 20) -> Iterator[pa.RecordBatch]:
        """State table ``name`` at the watermark, in no particular order, as record batches of
        at most ``batch_rows`` rows: the image columns, as :meth:`table` has them."""
        self._table_name(name)
        return self._batches(f"SELECT * FROM {qualified(STATE, name)}", batch_rows)

    def change_batches(
        self, name: str, *, after: int, upto: int | None = None, batch_rows: int = 1 << 20
    ) -> Iterator[pa.RecordBatch]:
        """Every delta-log row of state table ``name`` in batches ``(after, upto]`` (``batch_id``,
        ``op``, the image; all of them, not only the newest per row) as record batches."""
        self._table_name(name)
        sql = f"SELECT * FROM {qualified(DELTA, name)} WHERE {self._range(after, upto)}"
        return self._batches(sql, batch_rows)

    def output_batches(
        self,
        sink: str,
        *,
        after: int,
        upto: int | None = None,
        columns: Sequence[str] | None = None,
        batch_rows: int = 1 << 20,
    ) -> Iterator[pa.RecordBatch]:
        """Output rows of ``sink`` from batches ``(after, upto]`` (every column, or ``columns``
        in that order) as record batches."""
        if sink not in self._store.flow.sinks:
            raise KeyError(f"no sink {sink!r}; the dataflow has {list(self._store.flow.sinks)}")
        picked = "*" if columns is None else ", ".join(q(c) for c in columns)
        sql = f"SELECT {picked} FROM {qualified(OUTPUTS, sink)} WHERE {self._range(after, upto)}"
        return self._batches(sql, batch_rows)

    def _batches(self, sql: str, batch_rows: int) -> Iterator[pa.RecordBatch]:
        reader = self._con.sql(sql).to_arrow_reader(batch_rows)
        try:
            yield from reader
        finally:
            reader.close()

    def change_count(self, name: str, *, after: int = 0, upto: int | None = None) -> int:
        """Staged rows of state table or sink ``name`` in batches ``(after, upto]`` (delta-log
        rows of a table, output rows of a sink): what a union reads from staging."""
        if name in self._store.flow.tables:
            relation = qualified(DELTA, name)
        elif name in self._store.flow.sinks:
            relation = qualified(OUTPUTS, name)
        else:
            raise KeyError(f"no state table or sink {name!r}")
        rows = self._con.execute(
            f"SELECT count(*) FROM {relation} WHERE {self._range(after, upto)}"
        ).fetchall()
        return int(rows[0][0])

    def row_count(self, name: str) -> int:
        """Rows of state table ``name`` at the watermark (every version of a history table)."""
        rows = self._con.execute(
            f"SELECT count(*) FROM {qualified(STATE, self._table_name(name))}"
        ).fetchall()
        return int(rows[0][0])

    def released_through(self) -> int:
        """The last batch whose deltas and outputs were released (deleted) from staging."""
        return self._released

    def streams(self) -> dict[str, StreamProgress]:
        """Per stream, how far it was applied at the watermark."""
        rows = self._con.execute(
            "SELECT stream, last_batch, max_ts, events, last_pos FROM "
            + qualified(SYSTEM, "streams")
        ).fetchall()
        return {
            str(s): StreamProgress(int(b), None if m is None else int(m), int(e), int(p))
            for s, b, m, e, p in rows
        }

    def batch(self, batch_id: int) -> dict[str, Any] | None:
        """The ledger row of ``batch_id`` (``None`` if it is not committed at the snapshot), with
        ``streams`` decoded: the last collector batch applied per stream at that batch."""
        cursor = self._con.execute(
            f"SELECT * FROM {qualified(SYSTEM, 'batches')} WHERE batch_id = ?", [int(batch_id)]
        )
        names = [d[0] for d in cursor.description or []]
        rows = cursor.fetchall()
        if not rows:
            return None
        row = dict(zip(names, rows[0], strict=True))
        try:
            row["streams"] = {str(k): int(v) for k, v in json.loads(row["streams"] or "{}").items()}
        except (TypeError, ValueError):
            row["streams"] = {}
        return row

    def facts(self, batch_id: int) -> dict[str, Any]:
        """What an answer at watermark ``batch_id`` says about its data, in one statement: when
        the batch committed, the last collector batch per stream at it, and (when it is the
        snapshot's watermark) the newest event time of any stream."""
        if batch_id == self.watermark and self._facts is not None:
            return dict(self._facts)
        rows = self._con.execute(
            f"SELECT committed_at, streams FROM {qualified(SYSTEM, 'batches')} WHERE batch_id = ?",
            [int(batch_id)],
        ).fetchall()
        if not rows:
            return {"committed_at": None, "streams": {}, "newest_event_us": None}
        return _facts(rows[0][0], rows[0][1], None)

    def batches(self, *, after: int = 0, limit: int | None = None) -> pa.Table:
        """The batch ledger up to the watermark (batches after ``after``, at most ``limit``)."""
        sql = (
            f"SELECT * FROM {qualified(SYSTEM, 'batches')} WHERE batch_id > {int(after)} "
            "ORDER BY batch_id"
        )
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return arrow_of(self._con.sql(sql))


def _facts(committed_at: Any, streams: str | None, newest: int | None) -> dict[str, Any]:
    try:
        decoded = {str(k): int(v) for k, v in json.loads(streams or "{}").items()}
    except (TypeError, ValueError):
        decoded = {}
    return {
        "committed_at": committed_at,
        "streams": decoded,
        "newest_event_us": None if newest is None else int(newest),
    }


@contextmanager
def open_snapshot(store: StagingStore) -> Iterator[StagingSnapshot]:
    """A :class:`StagingSnapshot` of ``store`` in its own read transaction."""
    con = store.cursor()
    try:
        store.begin_read(con)
        yield StagingSnapshot(store, con)
    finally:
        try:
            con.execute("ROLLBACK")
        finally:
            con.close()
