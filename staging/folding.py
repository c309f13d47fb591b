"""State tables folded every few batches: ``state.<table>`` is a view of the folded rows plus the
delta log since.

A batch's commit used to rewrite every state row it changed (a DELETE and an INSERT per table);
for a dataflow whose batches touch the same rows again and again that was most of the commit's
cost. Now a commit only writes the batch's delta log (segment files, :mod:`staging.segments`,
which the commit writes anyway) and every :data:`FOLD_BATCHES` batches (or once
:data:`FOLD_ROWS` delta rows wait) the deltas since the last fold are applied to the folded
tables ``state_base.<table>``, so a row changed in many batches is written once. A fold of up
to :data:`FOLD_INLINE_ROWS` rows runs in the transaction of the commit that makes it due (the
cheapest place for small batches, measured); a larger one, in a store with a housekeeping
thread, runs there in a transaction of its own beside the commits (:meth:`StateFolder.fold`),
so a batch of hundreds of thousands of changed rows never holds the next commits back for the
seconds its fold takes (at SF 100, 500,000 prospects change every day).

What a reader sees does not change: ``state.<table>`` is a view that takes the folded rows, drops
those whose row id a later delta names, and adds the newest upsert of each such row id (the
deltas of batches above ``state_folded_through`` in ``streamdi.meta``). The fold and
``state_folded_through`` move in one transaction, so the view is exact at every commit. The view
reads the deltas from the registered delta-log segments, not from ``delta_log.<table>``: a
release (:mod:`staging.handoff`) hides the batches every warehouse holds from that view, but it
unregisters a delta segment only once the fold holds all of its batches, so a release never
waits for a fold (it used to fold first, under the write lock, for seconds at SF 100).

A fold through batch ``B``, in this order (:meth:`StateFolder.stage_fold`, then the caller):

1. Per state table, take the deltas waiting up to ``B`` (and the committing batches'), oldest
   first, and keep the last row of each row id (:func:`newest_per_row`).
2. Delete from ``state_base.<table>`` every row whose row id they name; insert their upserts.
3. Set ``state_folded_through`` to ``B``.
4. The caller's COMMIT makes 2 and 3 visible together; only then are the folded deltas dropped
   from memory (:meth:`StateFolder.folded`). A failure before leaves both as they were.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from contextlib import suppress

import duckdb
import numpy as np
import pyarrow as pa

from etl_dataflows.dataflow import CompiledDataflow
from staging.layout import STATE, STATE_BASE, arrow_of, delta_schema, q, qualified

#: A commit folds once this many batches wait (their rows are written once, not once per batch)
FOLD_BATCHES = 8
#: ... or once this many delta rows wait (they are held in memory until the fold).
FOLD_ROWS = 2_000_000
#: A fold of more delta rows than this runs in the store's housekeeping thread, off the commit
#: path, when the store has one (a smaller one is cheapest inside the commit that makes it due).
FOLD_INLINE_ROWS = 250_000
#: The ``streamdi.meta`` key of the last batch whose deltas the folded tables hold.
FOLDED_THROUGH = "state_folded_through"


def view_sql(flow: CompiledDataflow, name: str, meta: str, deltas: str) -> str:
    """``CREATE OR REPLACE VIEW state.<name>``: the folded rows without those a later delta
    names, plus the newest upsert of each row id a later delta names. ``deltas`` is a query of
    the table's registered delta rows, released or not
    (:meth:`~staging.segments.SegmentCatalog.registered_sql`)."""
    table = flow.tables[name]
    columns = ", ".join(q(c) for c in table.image_columns())
    ids = [q(c) for c in table.row_id()]
    match = " AND ".join(f"b.{c} = n.{c}" for c in ids)
    since = (
        f"SELECT * FROM ({deltas}) WHERE batch_id > "
        f"(SELECT CAST(value AS BIGINT) FROM {meta} WHERE key = '{FOLDED_THROUGH}')"
    )
    newest = (
        f"SELECT * FROM ({since}) QUALIFY row_number() OVER "
        f"(PARTITION BY {', '.join(ids)} ORDER BY batch_id DESC) = 1"
    )
    return (
        f"CREATE OR REPLACE VIEW {qualified(STATE, name)} AS "
        f"WITH n AS ({newest}) "
        f"SELECT {', '.join('b.' + q(c) for c in table.image_columns())} "
        f"FROM {qualified(STATE_BASE, name)} b ANTI JOIN n ON {match} "
        f"UNION ALL SELECT {columns} FROM n WHERE op = 'upsert'"
    )


def apply_deltas(
    con: duckdb.DuckDBPyConnection, flow: CompiledDataflow, name: str, view: str
) -> None:
    """In the caller's transaction: apply the delta rows registered as ``view`` (``batch_id``,
    ``op``, image columns; one row per row id: :func:`newest_per_row`) to the folded table:
    delete every row whose row id they name, insert their upserts."""
    table = flow.tables[name]
    target = qualified(STATE_BASE, name)
    columns = ", ".join(q(c) for c in table.image_columns())
    match = " AND ".join(f"{target}.{q(c)} = x.{q(c)}" for c in table.row_id())
    con.execute(f"DELETE FROM {target} USING {view} x WHERE {match}")
    con.execute(f"INSERT INTO {target} SELECT {columns} FROM {view} WHERE op = 'upsert'")


def newest_per_row(deltas: pa.Table, row_id: tuple[str, ...]) -> pa.Table:
    """The last row of each row id in ``deltas`` (oldest batch first): what a run of batches
    leaves of each row, ready to apply as one batch's delta."""
    if deltas.num_rows == 0:
        return deltas
    position = "__position"
    last = (
        deltas.select(list(row_id))
        .append_column(position, pa.array(np.arange(deltas.num_rows, dtype=np.int64)))
        .group_by(list(row_id), use_threads=False)
        .aggregate([(position, "max")])
        .column(f"{position}_max")
    )
    return deltas.take(last)


class StateFolder:
    """The deltas committed since the last fold (in memory, oldest first) and the fold itself;
    see the module docstring. One fold runs at a time (:attr:`fold_lock`: a commit folds only
    when it takes it without waiting); a fold in a transaction of its own (:meth:`fold`) may run
    beside commits, which add their deltas meanwhile."""

    def __init__(self, flow: CompiledDataflow, meta: str, deltas: Callable[[str], str]) -> None:
        self.flow = flow
        self.meta = meta
        #: A query of table ``name``'s registered delta rows, released batches included.
        self.deltas = deltas
        #: Held by the fold that runs (in a commit, or in a transaction of its own).
        self.fold_lock = threading.Lock()
        self._lock = threading.Lock()  # the waiting deltas and folded_through
        #: The last batch the folded tables hold.
        self.folded_through = 0
        #: (last batch id, delta rows per table) of each commit not folded yet, oldest first.
        self._pending: list[tuple[int, dict[str, pa.Table]]] = []

    def define_views(self, con: duckdb.DuckDBPyConnection) -> None:
        for name in self.flow.tables:
            con.execute(view_sql(self.flow, name, self.meta, self.deltas(name)))

    def load(self, con: duckdb.DuckDBPyConnection, watermark: int) -> None:
        """Read ``state_folded_through`` and the deltas after it, up to ``watermark`` (at open)."""
        rows = con.execute(
            f"SELECT value FROM {self.meta} WHERE key = ?", [FOLDED_THROUGH]
        ).fetchall()
        self.folded_through = int(rows[0][0]) if rows else 0
        deltas: dict[str, pa.Table] = {}
        for name in self.flow.tables:
            found = arrow_of(
                con.sql(
                    f"SELECT * FROM ({self.deltas(name)}) WHERE batch_id > "
                    f"{self.folded_through} ORDER BY batch_id"
                )
            )
            schema = delta_schema(self.flow, name)
            deltas[name] = found.select(schema.names).cast(schema)
        self._pending = [(watermark, deltas)] if watermark > self.folded_through else []

    @property
    def waiting_rows(self) -> int:
        return sum(t.num_rows for _, d in self._pending for t in d.values())

    @property
    def waiting_batches(self) -> int:
        """Batches committed and not folded yet."""
        return self._pending[-1][0] - self.folded_through if self._pending else 0

    @property
    def waiting(self) -> bool:
        """Some committed batch is not folded yet."""
        return bool(self._pending)

    def _rows_with(self, deltas: Mapping[str, pa.Table]) -> int:
        return int(self.waiting_rows + sum(t.num_rows for t in deltas.values()))

    def due(self, watermark: int, deltas: Mapping[str, pa.Table]) -> bool:
        """Whether a fold is due once the commit that ends at batch ``watermark`` with
        ``deltas`` is in: :data:`FOLD_BATCHES` batches or :data:`FOLD_ROWS` rows wait."""
        rows = self._rows_with(deltas)
        return watermark - self.folded_through >= FOLD_BATCHES or rows >= FOLD_ROWS

    def small(self, deltas: Mapping[str, pa.Table]) -> bool:
        """Whether a fold of what waits and ``deltas`` stays within :data:`FOLD_INLINE_ROWS`
        rows (cheap enough for a commit to make)."""
        return self._rows_with(deltas) <= FOLD_INLINE_ROWS

    def due_now(self) -> bool:
        """Whether a fold is due for what waits (a commit left a large one to :meth:`fold`)."""
        with self._lock:
            return bool(self._pending) and self.due(self._pending[-1][0], {})

    def stage_fold(
        self,
        con: duckdb.DuckDBPyConnection,
        through: int,
        deltas: Mapping[str, pa.Table] | None = None,
    ) -> None:
        """In the caller's transaction: apply the deltas waiting up to
        ``through`` (and ``deltas``, the committing batches') to the folded tables and set
        ``state_folded_through`` to ``through``. The caller calls :meth:`folded` once the
        transaction committed."""
        with self._lock:
            waiting = [d for last, d in self._pending if last <= through]
        for name in self.flow.tables:
            parts = [d[name] for d in waiting if name in d and d[name].num_rows]
            extra = (deltas or {}).get(name)
            if extra is not None and extra.num_rows:
                parts.append(extra)
            if not parts:
                continue
            view = f"_fold_{name}"
            rows = newest_per_row(pa.concat_tables(parts), self.flow.tables[name].row_id())
            con.register(view, rows)
            try:
                apply_deltas(con, self.flow, name, view)
            finally:
                con.unregister(view)
        con.execute(
            f"INSERT OR REPLACE INTO {self.meta} VALUES (?, ?)", [FOLDED_THROUGH, str(through)]
        )

    def folded(self, through: int) -> None:
        """After the fold's transaction committed: the deltas up to ``through`` are folded."""
        with self._lock:
            self.folded_through = through
            self._pending = [(last, d) for last, d in self._pending if last > through]

    def committed(self, through: int, deltas: Mapping[str, pa.Table]) -> None:
        """After a commit (ending at batch ``through``) that did not fold: its deltas wait."""
        with self._lock:
            self._pending.append((through, dict(deltas)))

    def fold(self, cursor: duckdb.DuckDBPyConnection, *, least: int = 1) -> bool:
        """Fold what waits in a transaction of ``cursor`` of its own, when at least ``least``
        batches wait; True when it folded. It needs no write lock: commits running beside it
        only add segments and progress rows, the fold changes only ``state_base`` and
        ``state_folded_through`` (DuckDB keeps the two apart; every reader sees the state view
        whole on either side of the fold's COMMIT)."""
        with self.fold_lock:
            with self._lock:
                if not self._pending or self.waiting_batches < least:
                    return False
                through = self._pending[-1][0]
            cursor.execute("BEGIN TRANSACTION")
            try:
                self.stage_fold(cursor, through)
                cursor.execute("COMMIT")
            except BaseException:
                with suppress(duckdb.Error):
                    cursor.execute("ROLLBACK")
                raise
            self.folded(through)
        return True
