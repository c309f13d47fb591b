"""State tables folded every few batches: ``state.<table>`` is a view of the folded rows plus the
delta log since.

A batch's commit used to rewrite every state row it changed (a DELETE and an INSERT per table);
for a dataflow whose batches touch the same rows again and again that was most of the commit's
cost. Now a commit only writes the batch's delta log (segment files, :mod:`staging.segments`,
which the commit writes anyway) and every :data:`FOLD_BATCHES` batches (or once
:data:`FOLD_ROWS` delta rows wait) the deltas since the last fold are applied to the folded
tables, so a row changed in many batches is written once. The folded tables live in a DuckDB
file of their own (:mod:`staging.state_file`): a fold is a transaction on that file, in the
store's housekeeping thread beside the commits (or, in a store without one, right after the
commit that made it due), and neither the fold nor the state file's checkpoints hold a batch's
commit back (at SF 100, 500,000 prospects change every day; in the TPC-DI stream a checkpoint
of the folds' rows held commits for 0.35-0.5 s when they shared the staging file).

What a reader sees does not change: ``state.<table>`` is a view that takes the folded rows, drops
those whose row id a later delta names, and adds the newest upsert of each such row id (the
deltas of batches above ``state_folded_through`` in the state file's ``state_meta``). The fold
and ``state_folded_through`` move in one transaction, so the view is exact at every commit (a
reader's snapshots of the two files agree: :func:`~staging.state_file.begin_read`). The view
reads the deltas from the registered delta-log segments, not from ``delta_log.<table>``: a
release (:mod:`staging.handoff`) hides the batches every warehouse holds from that view, but it
unregisters a delta segment only once the fold holds all of its batches, so a release never
waits for a fold.

A fold through batch ``B`` (:meth:`StateFolder.fold`), in this order:

1. BEGIN on a connection of its own.
2. Per state table, take the deltas waiting up to ``B``, oldest first, and keep the last row of
   each row id (:func:`newest_per_row`).
3. Delete from the table's folded rows every row whose row id they name; insert their upserts.
4. Set ``state_folded_through`` to ``B``.
5. COMMIT under the store's ``snapshot_lock``: 3 and 4 become visible together; only then are
   the folded deltas dropped from memory (:meth:`StateFolder.folded`). A failure before leaves
   both as they were.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from contextlib import suppress

import duckdb
import numpy as np
import pyarrow as pa

from etl_dataflows.dataflow import CompiledDataflow
from staging.layout import STATE, arrow_of, delta_schema, q, qualified

#: A commit folds once this many batches wait (their rows are written once, not once per batch)
FOLD_BATCHES = 8
#: ... or once this many delta rows wait (they are held in memory until the fold).
FOLD_ROWS = 2_000_000
#: The state file's ``state_meta`` key of the last batch whose deltas the folded tables hold.
FOLDED_THROUGH = "state_folded_through"


def view_sql(flow: CompiledDataflow, name: str, meta: str, deltas: str, base: str) -> str:
    """``CREATE OR REPLACE VIEW state.<name>``: the folded rows (table ``base``) without those a
    later delta names, plus the newest upsert of each row id a later delta names. ``deltas`` is
    a query of the table's registered delta rows, released or not
    (:meth:`~staging.segments.SegmentCatalog.registered_sql`); ``meta`` holds
    ``state_folded_through``."""
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
        f"FROM {base} b ANTI JOIN n ON {match} "
        f"UNION ALL SELECT {columns} FROM n WHERE op = 'upsert'"
    )


def apply_deltas(
    con: duckdb.DuckDBPyConnection, flow: CompiledDataflow, name: str, view: str, target: str
) -> None:
    """In the caller's transaction: apply the delta rows registered as ``view`` (``batch_id``,
    ``op``, image columns; one row per row id: :func:`newest_per_row`) to the folded table
    ``target``: delete every row whose row id they name, insert their upserts."""
    table = flow.tables[name]
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
    see the module docstring. One fold runs at a time (:attr:`fold_lock`); it may run beside
    commits, which add their deltas meanwhile.

    ``meta``: the state file's ``state_meta``; ``deltas(name)``: a query of table ``name``'s
    registered delta rows, released batches included; ``tables(name)``: the qualified table of
    its folded rows; ``commit_lock``: held by the fold's COMMIT (the store's ``snapshot_lock``).
    """

    def __init__(
        self,
        flow: CompiledDataflow,
        meta: str,
        deltas: Callable[[str], str],
        tables: Callable[[str], str],
        commit_lock: threading.Lock,
    ) -> None:
        self.flow = flow
        self.meta = meta
        self.deltas = deltas
        self.tables = tables
        self.commit_lock = commit_lock
        #: Held by the fold that runs.
        self.fold_lock = threading.Lock()
        self._lock = threading.Lock()  # the waiting deltas and folded_through
        #: The last batch the folded tables hold.
        self.folded_through = 0
        #: (last batch id, delta rows per table) of each commit not folded yet, oldest first.
        self._pending: list[tuple[int, dict[str, pa.Table]]] = []

    def define_views(self, con: duckdb.DuckDBPyConnection) -> None:
        for name in self.flow.tables:
            con.execute(view_sql(self.flow, name, self.meta, self.deltas(name), self.tables(name)))

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

    def _batches_waiting(self) -> int:
        """(Under ``_lock``) batches committed and not folded yet."""
        return self._pending[-1][0] - self.folded_through if self._pending else 0

    @property
    def waiting_batches(self) -> int:
        """Batches committed and not folded yet."""
        with self._lock:
            return self._batches_waiting()

    @property
    def waiting(self) -> bool:
        """Some committed batch is not folded yet."""
        return bool(self._pending)

    def due_now(self) -> bool:
        """Whether a fold is due for what waits: :data:`FOLD_BATCHES` batches or
        :data:`FOLD_ROWS` rows."""
        with self._lock:
            if not self._pending:
                return False
            rows = sum(t.num_rows for _, d in self._pending for t in d.values())
            return self._batches_waiting() >= FOLD_BATCHES or rows >= FOLD_ROWS

    def stage_fold(self, con: duckdb.DuckDBPyConnection, through: int) -> None:
        """Steps 2 to 4 of a fold, in the caller's transaction on the state file: apply the
        deltas waiting up to ``through`` to the folded tables and set ``state_folded_through``
        to ``through``. The caller calls :meth:`folded` once the transaction committed."""
        with self._lock:
            waiting = [d for last, d in self._pending if last <= through]
        for name in self.flow.tables:
            parts = [d[name] for d in waiting if name in d and d[name].num_rows]
            if not parts:
                continue
            view = f"_fold_{name}"
            rows = newest_per_row(pa.concat_tables(parts), self.flow.tables[name].row_id())
            con.register(view, rows)
            try:
                apply_deltas(con, self.flow, name, view, self.tables(name))
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
        """After a commit (ending at batch ``through``): its deltas wait for a fold."""
        with self._lock:
            self._pending.append((through, dict(deltas)))

    def fold(self, cursor: duckdb.DuckDBPyConnection, *, least: int = 1, wait: bool = True) -> bool:
        """Fold what waits (the module docstring's protocol) in a transaction of ``cursor`` of
        its own, when at least ``least`` batches wait; True when it folded. ``wait``: False
        returns at once (False) while another fold runs. It needs no write lock: commits
        running beside it only write the staging file, the fold only the state file."""
        if not self.fold_lock.acquire(blocking=wait):
            return False
        try:
            with self._lock:
                if not self._pending or self._batches_waiting() < least:
                    return False
                through = self._pending[-1][0]
            # 1.
            cursor.execute("BEGIN TRANSACTION")
            try:
                # 2.-4.
                self.stage_fold(cursor, through)
                # 5.
                with self.commit_lock:
                    cursor.execute("COMMIT")
            except BaseException:
                with suppress(duckdb.Error):
                    cursor.execute("ROLLBACK")
                raise
            self.folded(through)
        finally:
            self.fold_lock.release()
        return True
