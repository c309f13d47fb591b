"""What every warehouse target does: the load and merge protocols, in SQL both dialects share.

A target keeps, for each dataflow, full tables (indexed by row id), index-free delta tables, the
rejects (dead letters and aborts) and a ledger (see :mod:`migration.schema`). It talks to its
warehouse only through a driver (:class:`warehouse.base.BaseWarehouseDriver`: the connection, the
statements, the bulk path, the errors); subclasses supply the layout's DDL and a stream lock;
:class:`BaseTarget` runs the protocols:

:meth:`BaseTarget.load` moves staged changes into the delta tables, exactly once:

1. BEGIN; take the stream's lock (no other migrator of this stream runs a load or merge now).
2. Read the target's watermark ``w`` from its ledger. If ``w`` is not the ``after`` the changes
   were read for, ROLLBACK and return ``w`` (someone else loaded; the caller reads again).
3. Bulk-load each table's rows into its delta table (COPY for PostgreSQL, Arrow for DuckDB).
   Then the range's sink retractions (:mod:`staging.retractions`): delete the retracted batches'
   rows of the sink from its full and delta tables (rows this load just added included).
4. The rejects: bulk-append the range's dead letters and aborts to ``S.dead_letters`` and
   ``S.aborts`` (the same bulk path), then mark the dead letters the range replayed with one
   ``UPDATE ... SET replayed_in`` of those still unmarked (idempotent: a mark is never moved).
5. Bulk-insert one ledger row per batch of the range, with its row count (the rows of step 3: the
   rejects are not counted, each carries its ``batch_id`` in its own table) and how it came
   (``push``/``pull``). The ledger's primary key (stream, batch_id) rejects a batch loaded twice.
6. COMMIT: the rows, the rejects and the ledger rows become durable together, or not at all.

A crash before 6 rolls everything back (the batches are still staged and are sent again, rejects
included); a crash after 6 leaves the ledger saying so, and the next load starts after it: step 2
is what keeps a batch's rejects from arriving twice, as it does for its rows.

:meth:`BaseTarget.merge` folds the delta tables into the full tables:

1. BEGIN; take the stream's lock; find the delta tables that hold rows (one query): steps 2-4
   skip the others (a merge after a small load touches a few of a layout's many tables).
2. Per state table, from the newest delta of each row id (highest ``batch_id``): delete the full
   rows whose newest delta is a delete; upsert (``INSERT ... ON CONFLICT (row id) DO UPDATE``) the
   rows whose newest delta is an upsert. For a history table the row id is the surrogate key, so
   this closes the replaced current version (its end date and flag arrive as an upsert of the old
   surrogate key) and inserts the new version: SCD type 2; a same-day change is an upsert of the
   same surrogate key. A delta of upserts only, one per row id (one query counts), is its own
   newest: no window over it (PostgreSQL updates the rows it replaces and inserts the others).
3. Per sink: append the delta rows to the full table.
4. Empty the delta tables (those that held rows).
5. Insert a ``merges`` row (through which batch, how many rows, how long).
6. COMMIT. A crash before it leaves the deltas unmerged; the merge simply runs again.
7. Housekeeping outside the transaction (:meth:`BaseTarget._after_merge`): DuckDB checkpoints
   once its log is large; PostgreSQL vacuums the delta tables step 4 emptied.

:meth:`BaseTarget.load_and_merge` does both in **one** transaction when the merge would see only
this load's rows: load steps 1-5; then, if the ``merges`` table says every batch the ledger held
before this load was merged already, merge steps 2-5 over the relations this load filled (the
``merges`` row says ``through`` = the load's last batch); one COMMIT; merge step 7. Otherwise (an
earlier load waits unmerged) it is a plain load, and the caller merges as before. A crash before
the COMMIT leaves nothing of the load or the merge; after it, both. The delta rows are still
written and deleted, but inside the transaction: DuckDB keeps them in the transaction's memory
and never writes them to its log or file (TPC-DI's paced daily feed at SF 3: DuckDB's load and
merge of a day 0.29-0.31 s -> 0.22 s; docs/benchmarks.md).
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import sqlalchemy as sa

from etl_dataflows.types import ColumnType
from migration.exceptions import TargetMismatch
from migration.schema import LEDGER_SCHEMA, WarehouseLayout, sql_type
from staging.handoff import StagedChanges
from staging.layout import q
from staging.retractions import ranges, retracted_filter
from warehouse.base import BaseWarehouseDriver, Dialect, Params

if TYPE_CHECKING:
    from migration.reader import ReaderOptions, WarehouseReader

logger = logging.getLogger(__name__)

#: ``hook(phase)`` is called at fault-injection points: ``copy`` (a bulk load in progress),
#: ``loaded`` (rows loaded, transaction open), ``rejects`` (rejects appended, transaction open),
#: ``committed`` (after a load's COMMIT), ``merge`` (a merge's first statement done, transaction
#: open), ``merged`` (after a merge's COMMIT). A load merged in its own transaction calls
#: ``merge`` before its COMMIT, then ``committed`` and ``merged``.
Hook = Callable[[str], None]


@dataclass(frozen=True)
class MergeResult:
    """One merge: the batches it covered (through ``through``), rows folded in, its duration."""

    merge_id: int
    through: int
    rows: int
    ms: float


class BaseWarehouseFile(ABC):
    """A warehouse that is one file (a DuckDB file), as a bootstrap copies one whole
    (:mod:`migration.bootstrap.file_copy`): :meth:`BaseTarget.whole_file` gives it."""

    path: Path

    @abstractmethod
    def copy_to(self, dest: Path, hook: Hook | None = None) -> None:
        """Copy the file, as of its last commit, to ``dest`` (synced); the target is open.
        ``hook('copy')`` runs part way. Raises
        :class:`~warehouse.exceptions.WarehouseFileBusy` when the file could not be held still
        (``dest`` is then removed)."""

    @abstractmethod
    def target_on(self, path: Path) -> BaseTarget:
        """A new, unopened target of the same layout and settings on file ``path``."""

    @abstractmethod
    def foreign_relations(self) -> list[str]:
        """The schemas, tables, views, sequences, macros and types in the file that the layout
        does not have (another dataflow's, TPC-DI's static tables...), by qualified name."""

    @abstractmethod
    def drop_foreign_relations(self) -> list[str]:
        """Drop :meth:`foreign_relations` in the open transaction; what was dropped."""

    @abstractmethod
    def replace_with(self, source: Path) -> None:
        """Make file ``source`` (closed, on the same file system) the target's file, atomically;
        the target is closed first and stays closed. Raises
        :class:`~warehouse.exceptions.WarehouseFileBusy` (nothing changed) while another
        connection of the process holds the file; new ones are refused meanwhile."""


class BaseTarget(ABC):
    """One warehouse (``name`` is its dialect, ``postgres`` or ``duckdb``) for one dataflow's
    layout, through ``driver``. Callers outside the migration (the benchmarks, the query
    service) use the public methods below; a transaction is :meth:`begin` (which takes the
    stream's lock), statements, then :meth:`commit` or :meth:`rollback`."""

    name: str = "target"

    def __init__(self, layout: WarehouseLayout, driver: BaseWarehouseDriver) -> None:
        self.layout = layout
        self.driver = driver
        self._opened = False
        #: Called at the dangerous point of a layout switch at open (kill -9 tests).
        self.upgrade_hook: Callable[[str], None] | None = None

    @property
    def dialect(self) -> Dialect:
        """The warehouse's dialect (what the driver speaks)."""
        return self.driver.dialect

    @property
    def opened(self) -> bool:
        """Whether :meth:`open` succeeded and the connection is still up."""
        return self._opened and self.driver.connected

    # -- what a subclass provides ------------------------------------------------------------------

    @abstractmethod
    def _connect(self) -> None:
        """Connect the driver and create the layout if missing (DDL from the metadata)."""

    @abstractmethod
    def _lock_stream(self) -> None:
        """Take the stream's lock inside the transaction :meth:`begin` just opened."""

    @abstractmethod
    def busy(self) -> bool:
        """Whether another client is running a query on the target right now."""

    @abstractmethod
    def twin(self) -> BaseTarget:
        """A new, unopened target on the same warehouse and layout with a connection of its own
        (a bootstrap reads a peer through one beside the migrator's rounds)."""

    @abstractmethod
    def reader(
        self, ensure_layout: Callable[[], object], options: ReaderOptions
    ) -> WarehouseReader:
        """A reader of this warehouse for the query service (user SQL fenced in, see
        :mod:`migration.reader`), sharing the target's database; ``ensure_layout`` opens the
        target before the first read."""

    def whole_file(self) -> BaseWarehouseFile | None:
        """The warehouse as one file a bootstrap may copy whole (a DuckDB file); None when it is
        not one (PostgreSQL)."""
        return None

    # -- the driver, as the protocols and the benchmarks use it ------------------------------------

    def close(self) -> None:
        """Close the connection; the next :meth:`open` connects again."""
        self.driver.close()
        self._opened = False

    def guard(self) -> AbstractContextManager[None]:
        """A context manager mapping driver errors to
        :class:`~warehouse.exceptions.WarehouseUnavailable` (and closing a broken connection)."""
        return self.driver.guard()

    def begin(self) -> None:
        """BEGIN and take the stream's lock (no other migrator of the stream loads or merges until
        :meth:`commit` or :meth:`rollback`)."""
        self.driver.begin()
        self._lock_stream()

    def commit(self) -> None:
        """COMMIT the transaction :meth:`begin` opened."""
        self.driver.commit()

    def rollback(self) -> None:
        """Roll the transaction :meth:`begin` opened back (never raises)."""
        self.driver.rollback()

    def execute(self, sql: str, params: Params = None) -> int:
        """Run a statement (``?`` placeholders) inside the open transaction; the affected row
        count."""
        return self.driver.execute(sql, params)

    def fetch(self, sql: str, params: Params = None) -> list[tuple[Any, ...]]:
        """Rows of a query (in its own short transaction when none is open)."""
        return self.driver.fetch(sql, params)

    def bulk_insert(self, qualified: str, rows: pa.Table, hook: Hook | None = None) -> None:
        """Append ``rows`` (columns named as the table's) to ``qualified`` in the open
        transaction through the driver's bulk path (COPY, Arrow); never row by row."""
        self.driver.bulk_insert(qualified, rows, hook)

    # -- opening -----------------------------------------------------------------------------------

    def open(self) -> None:
        """Connect, create the layout if missing and check the stream's fingerprint; idempotent.

        A target recorded with the fingerprint of an earlier version in the layout's history is
        switched to this version first (:func:`migration.evolution.upgrade_target`); a new
        target records this version in its layout history.

        Raises :class:`~warehouse.exceptions.WarehouseUnavailable` when the target cannot be reached
        and :class:`~migration.exceptions.TargetMismatch` when it holds another layout.
        """
        if self.opened:
            return
        from migration.evolution import record_target_version, stored_version, upgrade_target

        with self.guard():
            self._connect()
            layout = self.layout
            # targets created before the ledger said which version produced each batch
            self.driver.execute(
                f"ALTER TABLE {layout.ledger_name} ADD COLUMN IF NOT EXISTS version INTEGER"
            )
            rows = self.fetch(
                f"SELECT schema_name, fingerprint FROM {layout.streams_name} WHERE stream = ?",
                [layout.stream],
            )
            if not rows:
                self.begin()
                self.bulk_insert(
                    layout.streams_name,
                    pa.table(
                        {
                            "stream": [layout.stream],
                            "schema_name": [layout.schema],
                            "fingerprint": [layout.fingerprint],
                        }
                    ),
                    None,
                )
                if layout.version:
                    record_target_version(self, layout.version, 0)
                self.commit()
            elif rows[0][0] != layout.schema:
                self.close()
                raise TargetMismatch(
                    self.name,
                    f"dataflow {layout.stream!r} was migrated here into schema {rows[0][0]!r}, "
                    f"not {layout.schema!r}; use that MIGRATION__SCHEMA_NAME or a new database",
                )
            elif rows[0][1] != layout.fingerprint:
                stored = stored_version(layout.history, str(rows[0][1]))
                if stored is None:
                    self.close()
                    raise TargetMismatch(
                        self.name,
                        f"dataflow {layout.stream!r} was migrated here with a layout (fingerprint "
                        f"{rows[0][1]}) that staging's layout history does not know, so it "
                        "cannot be upgraded; use a new MIGRATION__SCHEMA_NAME or database",
                    )
                upgrade_target(self, stored, self.upgrade_hook)
            elif layout.version:
                # same layout; a newer version (step logic, defaults) is only recorded
                self.begin()
                watermark = int(
                    self.fetch(
                        f"SELECT coalesce(max(batch_id), 0) FROM {layout.ledger_name} "
                        "WHERE stream = ?",
                        [layout.stream],
                    )[0][0]
                )
                record_target_version(self, layout.version, watermark)
                self.commit()
        self._opened = True

    def recorded(self) -> tuple[str | None, int | None, int]:
        """What the warehouse holds of the stream, read without changing anything (an upgrade
        plan shows it): its layout fingerprint and version (None, None when it holds nothing of
        the stream) and its watermark. Raises
        :class:`~warehouse.exceptions.WarehouseUnavailable` when it cannot be reached."""
        layout = self.layout
        with self.guard():
            if not self.driver.connected:
                self.driver.connect()
            tables = {
                str(r[0])
                for r in self.fetch(
                    "SELECT table_name FROM information_schema.tables WHERE table_schema = ?",
                    [LEDGER_SCHEMA],
                )
            }
            if "streams" not in tables:
                return None, None, 0
            rows = self.fetch(
                f"SELECT fingerprint FROM {layout.streams_name} WHERE stream = ?", [layout.stream]
            )
            if not rows:
                return None, None, 0
            version = None
            if "layouts" in tables:
                found = self.fetch(
                    f"SELECT max(version) FROM {layout.layouts_name} WHERE stream = ?",
                    [layout.stream],
                )
                version = None if found[0][0] is None else int(found[0][0])
            watermark = self.fetch(
                f"SELECT coalesce(max(batch_id), 0) FROM {layout.ledger_name} WHERE stream = ?",
                [layout.stream],
            )
        return str(rows[0][0]), version, int(watermark[0][0])

    def sql_type(self, kind: ColumnType | None) -> str:
        """The column type storing engine type ``kind`` in this warehouse's SQL."""
        return str(sql_type(kind).compile(dialect=self.sql_dialect()))

    @abstractmethod
    def sql_dialect(self) -> sa.engine.Dialect:
        """The SQLAlchemy dialect compiling this warehouse's DDL."""

    @abstractmethod
    def create_missing_tables(self) -> None:
        """Create the layout's tables that do not exist, inside the open transaction."""

    # -- reading -----------------------------------------------------------------------------------

    def watermark(self) -> int:
        """The last batch the target's ledger holds for the stream (0 before the first)."""
        with self.guard():
            rows = self.fetch(
                f"SELECT coalesce(max(batch_id), 0) FROM {self.layout.ledger_name} "
                "WHERE stream = ?",
                [self.layout.stream],
            )
        return int(rows[0][0])

    def merged_through(self) -> tuple[int, datetime | None]:
        """The last batch merged into the full tables, and when."""
        with self.guard():
            rows = self.fetch(
                f"SELECT through_batch, merged_at FROM {self.layout.merges_name} WHERE stream = ? "
                "ORDER BY merge_id DESC LIMIT 1",
                [self.layout.stream],
            )
        return (int(rows[0][0]), rows[0][1]) if rows else (0, None)

    def delta_rows(self) -> int:
        """Rows waiting in the delta tables."""
        parts = " UNION ALL ".join(
            f"SELECT count(*) AS n FROM {self.layout.delta_name(n)}" for n in self.layout.tables
        )
        if not parts:
            return 0
        with self.guard():
            return int(self.fetch(f"SELECT coalesce(sum(n), 0) FROM ({parts}) c")[0][0])

    # -- the load protocol -------------------------------------------------------------------------

    def load(self, changes: StagedChanges, via: str, hook: Hook | None = None) -> int:
        """Load ``changes`` (batches ``(after, upto]``) per the module docstring; returns the
        target's watermark afterwards (``changes.upto`` unless someone else loaded first)."""
        return self._load(changes, via, hook, merge=False)[0]

    def load_and_merge(
        self, changes: StagedChanges, via: str, hook: Hook | None = None
    ) -> tuple[int, MergeResult | None]:
        """Load ``changes`` and merge them in the same transaction (the module docstring's
        combined protocol) when no earlier load waits to be merged; else load only, as
        :meth:`load`. Returns the watermark afterwards and the merge (None: not merged)."""
        return self._load(changes, via, hook, merge=True)

    def _load(
        self, changes: StagedChanges, via: str, hook: Hook | None, *, merge: bool
    ) -> tuple[int, MergeResult | None]:
        """The load protocol; with ``merge``, the combined one (see the module docstring)."""
        layout = self.layout
        started = time.perf_counter()
        result: MergeResult | None = None
        loaded: set[str] = set()
        with self.guard():
            # 1.
            self.begin()
            try:
                # 2.
                current = int(
                    self.fetch(
                        f"SELECT coalesce(max(batch_id), 0) FROM {layout.ledger_name} "
                        "WHERE stream = ?",
                        [layout.stream],
                    )[0][0]
                )
                if current != changes.after:
                    self.rollback()
                    logger.info(
                        "target moved target=%s expected=%s found=%s",
                        self.name,
                        changes.after,
                        current,
                    )
                    return current, None
                last_id = 0
                if merge:
                    last_id, merged_through = self._last_merge()
                    # the merge sees this load's rows only: nothing loaded earlier waits
                    merge = merged_through >= current
                # 3.
                first = True
                for name, rows in [*changes.tables.items(), *changes.outputs.items()]:
                    if rows.num_rows == 0:
                        continue
                    self.bulk_insert(layout.delta_name(name), rows, hook if first else None)
                    loaded.add(name)
                    if first and hook is not None:
                        hook("loaded")
                    first = False
                self._retract(changes)
                # 4.
                self._load_rejects(changes)
                if hook is not None:
                    hook("rejects")
                # 5.
                counts = changes.rows_per_batch()
                now = datetime.now(UTC).replace(tzinfo=None)
                ids = sorted(counts)
                ledger = pa.table(
                    {
                        "stream": pa.array([layout.stream] * len(ids), pa.string()),
                        "batch_id": pa.array(ids, pa.int64()),
                        "rows": pa.array([counts[i] for i in ids], pa.int64()),
                        "via": pa.array([via] * len(ids), pa.string()),
                        "loaded_at": pa.array([now] * len(ids), pa.timestamp("us")),
                        "version": pa.array([layout.version_of(i) for i in ids], pa.int32()),
                    }
                )
                self.bulk_insert(layout.ledger_name, ledger, None)
                if merge:
                    merge_started = time.perf_counter()
                    rows_written = self._merge_tables(loaded, hook)
                    ms = (time.perf_counter() - merge_started) * 1000
                    result = MergeResult(last_id + 1, changes.upto, rows_written, ms)
                    self.insert_merge(result.merge_id, result.through, rows_written, ms)
                # 6.
                self.commit()
            except BaseException:
                self.rollback()
                raise
        if hook is not None:
            hook("committed")
        if result is not None:
            if hook is not None:
                hook("merged")
            self._after_merge(loaded)
            logger.debug(
                "loaded and merged target=%s through=%s ms=%.1f",
                self.name,
                changes.upto,
                (time.perf_counter() - started) * 1000,
            )
        return changes.upto, result

    def _retract(self, changes: StagedChanges) -> None:
        """Step 3's retractions."""
        self.retract(changes.retractions)

    def retract(self, retractions: pa.Table) -> None:
        """Delete the sink rows ``retractions`` (:data:`~staging.retractions.RETRACTION_SCHEMA`)
        retract from the full and delta tables, in the open transaction (a load's step 3; a
        bootstrap's catch-up)."""
        layout = self.layout
        for sink in sorted(set(retractions.column("sink").to_pylist())):
            if sink not in layout.tables:
                continue
            keep = retracted_filter(ranges(retractions, sink))
            delta = layout.delta_name(sink)
            self.execute(f"DELETE FROM {delta} WHERE NOT ({keep})")
            if sink in layout.plain:
                continue  # refused by the reprocess: its full table has no batch ids
            self.execute(f"DELETE FROM {layout.full_name(sink)} WHERE NOT ({keep})")

    def _load_rejects(self, changes: StagedChanges) -> None:
        """Step 4 of the load: append the dead letters and aborts, mark the replayed."""
        layout = self.layout
        if changes.dead_letters.num_rows:
            self.bulk_insert(layout.dead_letters_name, changes.dead_letters, None)
        if changes.aborts.num_rows:
            self.bulk_insert(layout.aborts_name, changes.aborts, None)
        if changes.replays.num_rows:
            # one statement for all of them, the pairs as two arrays (both dialects unnest them)
            dead = layout.dead_letters_name
            self.execute(
                f"UPDATE {dead} AS d SET replayed_in = r.replayed_in FROM (SELECT "
                "unnest(CAST(? AS BIGINT[])) AS id, unnest(CAST(? AS BIGINT[])) AS replayed_in) r "
                "WHERE d.id = r.id AND d.replayed_in IS NULL",
                [
                    changes.replays.column("id").to_pylist(),
                    changes.replays.column("replayed_in").to_pylist(),
                ],
            )

    # -- the merge protocol ------------------------------------------------------------------------

    def merge(self, hook: Hook | None = None) -> MergeResult | None:
        """Merge the delta tables into the full tables per the module docstring; ``None`` when
        there was nothing to merge."""
        layout = self.layout
        started = time.perf_counter()
        with self.guard():
            # 1.
            self.begin()
            try:
                through = int(
                    self.fetch(
                        f"SELECT coalesce(max(batch_id), 0) FROM {layout.ledger_name} "
                        "WHERE stream = ?",
                        [layout.stream],
                    )[0][0]
                )
                last_id, merged_through = self._last_merge()
                if merged_through >= through:
                    self.rollback()
                    return None
                filled = self._filled_deltas()
                rows = self._merge_tables(filled, hook)
                # 5.
                ms = (time.perf_counter() - started) * 1000
                merge_id = last_id + 1
                self.insert_merge(merge_id, through, rows, ms)
                # 6.
                self.commit()
            except BaseException:
                self.rollback()
                raise
        if hook is not None:
            hook("merged")
        self._after_merge(filled)
        return MergeResult(merge_id, through, rows, (time.perf_counter() - started) * 1000)

    def _last_merge(self) -> tuple[int, int]:
        """In the open transaction: the stream's last ``merge_id`` and the batch its full tables
        hold every batch through (0 and 0 before any merge)."""
        layout = self.layout
        merge_id, through = self.fetch(
            f"SELECT coalesce(max(merge_id), 0), coalesce(max(through_batch), 0) "
            f"FROM {layout.merges_name} WHERE stream = ?",
            [layout.stream],
        )[0]
        return int(merge_id), int(through)

    def _merge_tables(self, filled: set[str], hook: Hook | None) -> int:
        """The merge protocol's steps 2-4 for the relations ``filled`` (their delta tables hold
        rows), in the open transaction; the rows written."""
        rows = 0
        first = True
        for table in self.layout.tables.values():
            if table.name not in filled:
                continue
            # 2. / 3.
            step = time.perf_counter()
            rows += self._merge_table(table.name)
            logger.debug(
                "merged target=%s table=%s ms=%.1f",
                self.name,
                table.name,
                (time.perf_counter() - step) * 1000,
            )
            if first and hook is not None:
                hook("merge")
            first = False
        # 4.
        self._empty_deltas(filled)
        return rows

    def insert_merge(
        self, merge_id: int, through: int, rows: int, ms: float, at: datetime | None = None
    ) -> None:
        """Insert the ``merges`` row of merge ``merge_id`` (its full tables hold every batch up
        to ``through``; ``rows`` written in ``ms``, at ``at``, default now) in the open
        transaction: the merge protocol's step 5, and a bootstrap's last transaction."""
        layout = self.layout
        stamp = at if at is not None else datetime.now(UTC).replace(tzinfo=None)
        self.bulk_insert(
            layout.merges_name,
            pa.table(
                {
                    "stream": pa.array([layout.stream], pa.string()),
                    "merge_id": pa.array([merge_id], pa.int64()),
                    "through_batch": pa.array([through], pa.int64()),
                    "rows": pa.array([rows], pa.int64()),
                    "merged_at": pa.array([stamp], pa.timestamp("us")),
                    "ms": pa.array([ms], pa.float64()),
                }
            ),
            None,
        )

    def merge_table(self, name: str) -> int:
        """Fold the delta rows of ``name`` into its full table, in the open transaction (steps 2
        and 3 of the merge protocol for one relation; the caller empties its delta table and
        records the merge). The rows written. A bootstrap catching relations up uses it."""
        return self._merge_table(name)

    def _after_merge(self, emptied: set[str]) -> None:  # noqa: B027 - optional hook
        """Housekeeping after a committed merge that emptied the delta tables of ``emptied``
        (the merge protocol's step 7)."""

    def _merge_table(self, name: str) -> int:
        layout = self.layout
        table = layout.tables[name]
        full, delta = layout.full_name(name), layout.delta_name(name)
        cols = ", ".join(q(c) for c in table.columns)
        if table.kind == "output":
            return self.execute(f"INSERT INTO {full} ({cols}) SELECT {cols} FROM {delta}")
        ids = [q(c) for c in table.row_id]
        rows, distinct, deletes = self.fetch(
            f"SELECT count(*), (SELECT count(*) FROM (SELECT 1 FROM {delta} "
            f"GROUP BY {', '.join(ids)}) g), count(*) FILTER (WHERE op = 'delete') FROM {delta}"
        )[0]
        logger.debug("merge table=%s rows=%s distinct=%s deletes=%s", name, rows, distinct, deletes)
        if rows == distinct and not deletes:
            return self._merge_unique(full, delta, table.columns, table.row_id)
        newest = (
            f"SELECT * FROM (SELECT *, row_number() OVER (PARTITION BY {', '.join(ids)} "
            f"ORDER BY batch_id DESC) AS _rn FROM {delta}) n WHERE _rn = 1"
        )
        match = " AND ".join(f"f.{c} = d.{c}" for c in ids)
        deleted = 0
        if deletes:  # else the statement only sorts the delta to find none (~1 s for 400 k rows)
            deleted = self.execute(
                f"DELETE FROM {full} AS f USING ({newest} AND op = 'delete') d WHERE {match}"
            )
        upserted = self._upsert(full, f"({newest} AND op = 'upsert')", table.columns, table.row_id)
        return deleted + upserted

    def _merge_unique(
        self, full: str, delta: str, columns: tuple[str, ...], row_id: tuple[str, ...]
    ) -> int:
        """Step 2 when ``delta`` holds upserts only, one per row id (a merge of one batch, or of
        batches that changed other rows): the delta is its own newest, so no window over it.
        Update the full rows it replaces, insert the others; the number of rows written.
        PostgreSQL's ``ON CONFLICT DO UPDATE`` cost more (TPC-DI's daily Prospect, 15 k rows of
        29 columns, at load ~4: ~250 ms against ~170 ms)."""
        cols = ", ".join(q(c) for c in columns)
        match = " AND ".join(f"f.{q(c)} = u.{q(c)}" for c in row_id)
        values = [q(c) for c in columns if c not in row_id]
        updated = 0
        if values:
            sets = ", ".join(f"{c} = u.{c}" for c in values)
            updated = self.execute(f"UPDATE {full} AS f SET {sets} FROM {delta} u WHERE {match}")
        inserted = self.execute(
            f"INSERT INTO {full} ({cols}) SELECT {cols} FROM {delta} u "
            f"WHERE NOT EXISTS (SELECT 1 FROM {full} f WHERE {match})"
        )
        return updated + inserted

    def _upsert(
        self, full: str, rows: str, columns: tuple[str, ...], row_id: tuple[str, ...]
    ) -> int:
        """Insert ``rows`` (a subquery) into ``full``, replacing the rows with the same row id;
        the number of rows written. ``INSERT ... ON CONFLICT DO UPDATE`` by default."""
        cols = ", ".join(q(c) for c in columns)
        ids = ", ".join(q(c) for c in row_id)
        values = [q(c) for c in columns if c not in row_id]
        action = (
            "DO UPDATE SET " + ", ".join(f"{c} = excluded.{c}" for c in values)
            if values
            else "DO NOTHING"
        )
        return self.execute(
            f"INSERT INTO {full} ({cols}) SELECT {cols} FROM {rows} u ON CONFLICT ({ids}) {action}"
        )

    def filled_deltas(self) -> set[str]:
        """The relations whose delta table holds rows (one query over all of them)."""
        return self._filled_deltas()

    def _filled_deltas(self) -> set[str]:
        """The relations whose delta table holds rows (one query over all of them)."""
        layout = self.layout
        names = list(layout.tables)
        if not names:
            return set()
        probes = " UNION ALL ".join(
            f"SELECT {i} AS n FROM (SELECT 1 FROM {layout.delta_name(name)} LIMIT 1) p{i}"
            for i, name in enumerate(names)
        )
        return {names[int(r[0])] for r in self.fetch(probes)}

    def _empty_deltas(self, names: set[str] | None = None) -> None:
        for name in self.layout.tables:
            if names is None or name in names:
                self.execute(f"DELETE FROM {self.layout.delta_name(name)}")

    # -- reading back (status, tests, the query service) -------------------------------------------

    def table_rows(self, name: str, *, current: bool = False) -> list[tuple[Any, ...]]:
        """Every row of ``name``'s full table (``current``: overlaid with unmerged deltas),
        sorted by all columns."""
        layout = self.layout
        source = f"({layout.current_sql(name)}) c" if current else layout.full_name(name)
        cols = ", ".join(q(c) for c in layout.tables[name].columns)
        order = ", ".join(str(i + 1) for i in range(len(layout.tables[name].columns)))
        with self.guard():
            return self.fetch(f"SELECT {cols} FROM {source} ORDER BY {order}")

    def ledger_rows(self) -> list[tuple[int, int, str]]:
        """``(batch_id, rows, via)`` of every ledger row of the stream, in batch order."""
        with self.guard():
            rows = self.fetch(
                f"SELECT batch_id, rows, via FROM {self.layout.ledger_name} WHERE stream = ? "
                "ORDER BY batch_id",
                [self.layout.stream],
            )
        return [(int(b), int(n), str(v)) for b, n, v in rows]
