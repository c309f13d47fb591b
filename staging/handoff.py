"""The staging side of migration: staged deltas by batch range, acknowledgements, release.

:class:`StagedDeltas` is how the migration layer reads and releases what staging holds; it works
on an open :class:`~staging.store.StagingStore` (the pipeline's, or one the ``streamdi migrate``
command opened) so it never opens the file a second time:

* :meth:`StagedDeltas.read` returns the changes of batches ``(after, upto]``: per state table the
  delta-log rows (``batch_id``, ``op``, image columns), per sink the output rows, and the
  batches' *rejects*: their dead letters and aborts, and the replays (``id``, ``replayed_in``) of
  dead letters a batch of the range re-offered. Committed batches never change (but for a dead
  letter's ``replayed_in``, set once by a later batch; a read shows it only when that batch is in
  the range or before it), so a range read needs no coordination with the committer.
* :meth:`StagedDeltas.acknowledge` records, per warehouse target, the last batch the target has
  committed (``streamdi.migration_acks``). An acknowledgement only moves forward, but for
  :meth:`StagedDeltas.retract` (a target replaced by an empty one, which is being bootstrapped).
* :meth:`StagedDeltas.release` deletes the delta-log and output rows of batches every configured
  target has acknowledged and that are older than the retention, in one transaction, and records
  ``released_through`` in ``streamdi.meta``. A release never goes past the lowest acknowledgement,
  so a row leaves staging only once every target holds it.

Writes take the store's ``write_lock`` so they never interleave with a batch commit.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import duckdb
import pyarrow as pa

from etl_dataflows.batch import ABORT_SCHEMA
from staging.layout import DEAD_LETTER_TABLE_SCHEMA, DELTA, OUTPUTS, SYSTEM, arrow_of, q, qualified
from staging.retractions import RETRACTION_SCHEMA, read_retractions
from staging.store import StagingStore

logger = logging.getLogger(__name__)

RELEASED_THROUGH = "released_through"

STAGED_DEAD_LETTER_SCHEMA = pa.schema(
    [
        *[f for f in DEAD_LETTER_TABLE_SCHEMA if f.name not in ("encoding", "payload_bytes")],
        pa.field("replayed_in", pa.int64()),
        DEAD_LETTER_TABLE_SCHEMA.field("encoding"),
        DEAD_LETTER_TABLE_SCHEMA.field("payload_bytes"),
    ]
)
"""A dead letter as :meth:`StagedDeltas.read` returns it: ``streamdi.dead_letters``' columns in
the table's order, ``replayed_in`` (the batch that re-offered it) included."""

STAGED_ABORT_SCHEMA = pa.schema([pa.field("batch_id", pa.int64()), *ABORT_SCHEMA])
"""An aborted transaction as :meth:`StagedDeltas.read` returns it (``streamdi.aborts``)."""

REPLAY_SCHEMA = pa.schema([("id", pa.int64()), ("replayed_in", pa.int64())])
"""A replay: dead letter ``id`` was re-offered in batch ``replayed_in``."""


@dataclass(frozen=True)
class StagedChanges:
    """The staged changes of batches ``(after, upto]``.

    ``tables`` maps each state table to its delta-log rows and ``outputs`` each sink to its output
    rows, every row with its ``batch_id``; ``rows`` counts them all (the data rows: not the
    rejects). The rejects: ``dead_letters`` (:data:`STAGED_DEAD_LETTER_SCHEMA`) and ``aborts``
    (:data:`STAGED_ABORT_SCHEMA`) of the range's batches, and ``replays``
    (:data:`REPLAY_SCHEMA`): the dead letters, of any batch, that a batch of the range replayed.
    A dead letter's ``replayed_in`` is null unless its replay is in the range or before it.
    """

    after: int
    upto: int
    tables: dict[str, pa.Table]
    outputs: dict[str, pa.Table]
    dead_letters: pa.Table = field(default_factory=STAGED_DEAD_LETTER_SCHEMA.empty_table)
    aborts: pa.Table = field(default_factory=STAGED_ABORT_SCHEMA.empty_table)
    replays: pa.Table = field(default_factory=REPLAY_SCHEMA.empty_table)
    retractions: pa.Table = field(default_factory=RETRACTION_SCHEMA.empty_table)
    """The sink retractions of the range's batches (:mod:`staging.retractions`)."""

    @property
    def rows(self) -> int:
        return int(
            sum(t.num_rows for t in self.tables.values())
            + sum(t.num_rows for t in self.outputs.values())
        )

    def rows_per_batch(self) -> dict[int, int]:
        """Rows per batch id for every batch of the range (0 for batches without changes)."""
        counts = dict.fromkeys(range(self.after + 1, self.upto + 1), 0)
        for table in [*self.tables.values(), *self.outputs.values()]:
            if table.num_rows == 0:
                continue
            grouped = table.group_by("batch_id").aggregate([("batch_id", "count")])
            for batch_id, n in zip(
                grouped.column("batch_id").to_pylist(),
                grouped.column("batch_id_count").to_pylist(),
                strict=True,
            ):
                counts[int(batch_id)] = counts.get(int(batch_id), 0) + int(n)
        return counts

    @property
    def rejects(self) -> int:
        """Dead letters and aborts of the range (replays not counted: they change rows)."""
        return int(self.dead_letters.num_rows + self.aborts.num_rows)


class StagedDeltas:
    """See the module docstring."""

    def __init__(self, store: StagingStore, *, vacuum_rows: int = 1_000_000) -> None:
        self.store = store
        self.vacuum_rows = vacuum_rows
        self._released_rows = 0

    @property
    def flow_name(self) -> str:
        return self.store.flow.name

    def watermark(self) -> int:
        """The last committed batch."""
        return self.store.watermark

    def _rows(self, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
        cursor = self.store.cursor()
        try:
            return [tuple(r) for r in cursor.execute(sql, params or []).fetchall()]
        finally:
            cursor.close()

    # -- reading -----------------------------------------------------------------------------------

    def read(self, after: int, upto: int) -> StagedChanges:
        """The delta-log and output rows and the rejects of batches ``(after, upto]``, read in one
        transaction (the delta-log and output rows are served from the store's cache of recent
        commits, :mod:`staging.recent`, when it holds the whole range; the rejects, few and kept
        in plain tables, are always read from the file).

        Raises ``ValueError`` when part of the range was already released (those rows are gone).
        """
        released = self.released_through()
        if after < released and upto > after:
            raise ValueError(
                f"batches {after + 1}..{released} were released from staging; they cannot be "
                "read again"
            )
        flow = self.store.flow
        cached = self.store.recent.changes(after, upto, list(flow.tables), list(flow.sinks))
        if cached is not None:
            return StagedChanges(after, upto, cached[0], cached[1], *self.read_rejects(after, upto))
        cursor = self.store.cursor()
        try:
            cursor.execute("BEGIN TRANSACTION")
            where = f"WHERE batch_id > {int(after)} AND batch_id <= {int(upto)}"
            tables = {
                name: arrow_of(cursor.sql(f"SELECT * FROM {qualified(DELTA, name)} {where}"))
                for name in flow.tables
            }
            outputs = {
                sink: arrow_of(
                    cursor.sql(
                        f"SELECT * FROM {qualified(OUTPUTS, sink)} {where} ORDER BY batch_id"
                    )
                )
                for sink in flow.sinks
            }
            rejects = _rejects(cursor, after, upto)
            cursor.execute("ROLLBACK")
        finally:
            cursor.close()
        return StagedChanges(after, upto, tables, outputs, *rejects)

    def read_rejects(self, after: int, upto: int) -> tuple[pa.Table, pa.Table, pa.Table, pa.Table]:
        """The rejects of batches ``(after, upto]``, read in one transaction: their dead letters,
        their aborts, the replays they made and their sink retractions (see
        :class:`StagedChanges`). None of these is ever released, so any range of committed
        batches can be read."""
        cursor = self.store.cursor()
        try:
            cursor.execute("BEGIN TRANSACTION")
            rejects = _rejects(cursor, after, upto)
            cursor.execute("ROLLBACK")
        finally:
            cursor.close()
        return rejects

    def pending_rows(self, after: int) -> int:
        """Rows staged in batches after ``after`` (delta log and outputs)."""
        flow = self.store.flow
        parts = [f"SELECT count(*) AS n FROM {qualified(DELTA, n)}" for n in flow.tables]
        parts += [f"SELECT count(*) AS n FROM {qualified(OUTPUTS, s)}" for s in flow.sinks]
        if not parts:
            return 0
        sql = " UNION ALL ".join(p + f" WHERE batch_id > {int(after)}" for p in parts)
        return int(self._rows(f"SELECT coalesce(sum(n), 0) FROM ({sql})")[0][0])

    # -- acknowledgements --------------------------------------------------------------------------

    def acks(self) -> dict[str, int]:
        """The last acknowledged batch per target."""
        try:
            rows = self._rows(f"SELECT target, batch_id FROM {qualified(SYSTEM, 'migration_acks')}")
        except duckdb.CatalogException:  # a file opened read-only before the table existed
            return {}
        return {str(t): int(b) for t, b in rows}

    def acknowledge(self, target: str, batch_id: int) -> None:
        """Record that ``target`` has committed every batch up to ``batch_id`` (never backwards)."""
        now = datetime.now(UTC).replace(tzinfo=None)
        with self.store.write_lock:
            cursor = self.store.cursor()
            try:
                cursor.execute(
                    f"INSERT INTO {qualified(SYSTEM, 'migration_acks')} VALUES (?, ?, ?) "
                    "ON CONFLICT (target) DO UPDATE SET "
                    "batch_id = greatest(batch_id, excluded.batch_id), "
                    "acked_at = excluded.acked_at",
                    [target, int(batch_id), now],
                )
            finally:
                cursor.close()

    def retract(self, target: str, batch_id: int = 0) -> None:
        """Set ``target``'s acknowledgement back to ``batch_id`` (the one write that moves it
        backwards): a target that holds less than staging last heard (an empty warehouse put in
        place of one that was acknowledged, about to be bootstrapped) must hold back the release
        again, from now on."""
        with self.store.write_lock:
            cursor = self.store.cursor()
            try:
                cursor.execute(
                    f"UPDATE {qualified(SYSTEM, 'migration_acks')} SET batch_id = ? "
                    "WHERE target = ? AND batch_id > ?",
                    [int(batch_id), target, int(batch_id)],
                )
            finally:
                cursor.close()

    # -- release -----------------------------------------------------------------------------------

    def released_through(self) -> int:
        """The last batch released from staging (read once, then kept on the store: only this
        process writes it)."""
        if self.store.released_through is None:
            rows = self._rows(
                f"SELECT value FROM {qualified(SYSTEM, 'meta')} WHERE key = ?", [RELEASED_THROUGH]
            )
            self.store.released_through = int(rows[0][0]) if rows else 0
        return self.store.released_through

    def releasable(self, targets: Iterable[str], retention_s: float) -> int:
        """The highest batch that may be released: acknowledged by every one of ``targets`` and
        committed more than ``retention_s`` ago (0 when no target is given)."""
        names = list(targets)
        if not names:
            return self.released_through()
        acks = self.acks()
        lowest = min(acks.get(t, 0) for t in names)
        if retention_s <= 0 or lowest == 0:
            return lowest
        cutoff = datetime.now(UTC).replace(tzinfo=None) - timedelta(seconds=retention_s)
        rows = self._rows(
            f"SELECT coalesce(max(batch_id), 0) FROM {qualified(SYSTEM, 'batches')} "
            "WHERE batch_id <= ? AND committed_at <= ?",
            [lowest, cutoff],
        )
        return int(rows[0][0])

    def release(self, targets: Iterable[str], retention_s: float) -> int:
        """Delete the staged deltas and outputs every target acknowledged (past the retention).

        The protocol, in this order:

        1. Compute ``X`` = :meth:`releasable` (never above the lowest acknowledgement).
        2. If ``X`` is not above ``released_through`` and no segment waits to be unregistered
           (a delta log's, kept until its batches were folded), stop.
        3. Under the store's write lock, BEGIN.
        4. Unregister the segments of batches at or below ``X``, a delta log's only once every
           batch of it is folded (:meth:`~staging.store.StagingStore.release_segments`).
        5. Set ``released_through = X`` in ``streamdi.meta`` (the ``delta_log`` and ``outputs``
           views hide the batches at or below it).
        6. COMMIT; once ``vacuum_rows`` rows were released, CHECKPOINT so DuckDB reuses the freed
           blocks (skipped while a reader holds a transaction; DuckDB also checkpoints by itself
           when its WAL grows).

        A crash before 6 leaves everything staged (the release simply happens again). Returns the
        released watermark.
        """
        # 1.
        through = self.releasable(targets, retention_s)
        released = self.released_through()
        # 2.
        if through <= released:
            if not self.store.releasable_segments(released):
                return released
            through = released
        deleted = 0
        with self.store.write_lock:
            cursor = self.store.cursor()
            try:
                # 3.
                cursor.execute("BEGIN TRANSACTION")
                try:
                    # 4.
                    changes, gone = self.store.release_segments(cursor, through)
                    deleted = sum(s.rows for s in gone)
                    # 5.
                    cursor.execute(
                        f"INSERT OR REPLACE INTO {qualified(SYSTEM, 'meta')} VALUES (?, ?)",
                        [RELEASED_THROUGH, str(through)],
                    )
                    # 6. (a reader's snapshots of the staging and the state file must not
                    # straddle it: staging.state_file)
                    with self.store.snapshot_lock:
                        cursor.execute("COMMIT")
                except BaseException:
                    cursor.execute("ROLLBACK")
                    raise
                self.store.segments_released(changes, gone)
                self.store.released_through = through
                self.store.recent.forget_through(through)
                self._released_rows += deleted
                if self._released_rows >= self.vacuum_rows:
                    try:
                        cursor.execute("CHECKPOINT")
                        self._released_rows = 0
                    except duckdb.Error as exc:
                        logger.debug("checkpoint after release skipped: %s", exc)
            finally:
                cursor.close()
        logger.info("released staged deltas through=%s rows=%s", through, deleted)
        return through


def _rejects(
    cursor: duckdb.DuckDBPyConnection, after: int, upto: int
) -> tuple[pa.Table, pa.Table, pa.Table, pa.Table]:
    """The dead letters and aborts of batches ``(after, upto]`` and the replays made by them, in
    the transaction open on ``cursor`` (bulk Arrow reads; see :class:`StagedChanges`)."""
    after, upto = int(after), int(upto)
    in_range = f"batch_id > {after} AND batch_id <= {upto}"
    columns = ", ".join(
        f"CASE WHEN replayed_in <= {upto} THEN replayed_in END AS replayed_in"
        if f.name == "replayed_in"
        else q(f.name)
        for f in STAGED_DEAD_LETTER_SCHEMA
    )
    dead = arrow_of(
        cursor.sql(
            f"SELECT {columns} FROM {qualified(SYSTEM, 'dead_letters')} WHERE {in_range} "
            "ORDER BY id"
        )
    )
    aborts = arrow_of(
        cursor.sql(
            f"SELECT {', '.join(q(f.name) for f in STAGED_ABORT_SCHEMA)} "
            f"FROM {qualified(SYSTEM, 'aborts')} WHERE {in_range} ORDER BY batch_id"
        )
    )
    replays = arrow_of(
        cursor.sql(
            f"SELECT id, replayed_in FROM {qualified(SYSTEM, 'dead_letters')} "
            f"WHERE replayed_in > {after} AND replayed_in <= {upto} ORDER BY id"
        )
    )
    return (
        dead.cast(STAGED_DEAD_LETTER_SCHEMA),
        aborts.cast(STAGED_ABORT_SCHEMA),
        replays.cast(REPLAY_SCHEMA),
        read_retractions(cursor, after=after, upto=upto),
    )
