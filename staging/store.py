"""The staging store: one DuckDB file holding a dataflow's state, changes, outputs and progress.

A :class:`StagingStore` is opened by the one process that runs the dataflow (DuckDB allows one
writing process). :meth:`StagingStore.commit` applies one or more batch results in **one**
transaction: the state changes, the delta log and the outputs (Parquet segment files written just
before and registered by it, :mod:`staging.segments`; the state tables are views that read the
deltas not folded yet, :mod:`staging.folding`; the folded rows live in a file of their own beside
it, :mod:`staging.state_file`), the dead letters, the aborts, the sequences, the
consumed Kafka offsets and the batch ledger rows. After a restart
:meth:`StagingStore.load_state` rebuilds the engine's state and :meth:`StagingStore.offsets` tells
the consumer where to resume, so a batch is applied exactly once across crashes.

Only bulk paths touch the database: every row set travels as one Arrow table per statement; nothing
is inserted row by row.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from etl_dataflows.dataflow import CompiledDataflow, Dataflow
from etl_dataflows.evolution.plan import UpgradePlan, plan_upgrade
from etl_dataflows.evolution.shape import describe_flow
from etl_dataflows.state import StateImage, image_schema
from staging import state_file
from staging.batch_commit import (
    BatchCommit,
    PartitionProgress,
    StreamPartition,
    StreamProgress,
    abort_rows,
    dead_letter_rows,
    delta_rows,
    ledger_rows,
    read_offsets,
    read_partitions,
    read_sequences,
    read_streams,
)
from staging.checkpoints import take_checkpoint
from staging.exceptions import (
    BatchAlreadyCommitted,
    StagingCommitFailed,
    StagingInUse,
    StagingMismatch,
    StagingUpgradeNeeded,
)
from staging.folding import FOLDED_THROUGH, StateFolder
from staging.history import LayoutVersion, read_history, record_version
from staging.layout import (
    DEAD_LETTER_TABLE_SCHEMA,
    DELTA,
    LAYOUT_VERSION,
    OUTPUTS,
    STATE,
    STATE_BASE,
    SYSTEM,
    arrow_of,
    create_statements,
    insert_values,
    output_columns,
    q,
    qualified,
    segment_schemas,
    state_base_ddl,
    upgrade_statements,
)
from staging.recent import RecentCommit, RecentCommits
from staging.retractions import RETRACTIONS, retraction_rows
from staging.segments import (
    Segment,
    SegmentCatalog,
    SegmentFolder,
    SegmentMerger,
    conform,
    merge_candidates,
)

logger = logging.getLogger(__name__)

CommitHook = Callable[[str], None]

#: ``streamdi.meta`` key: the rows :meth:`StagingStore.seed` loaded (absent: never seeded).
SEEDED = "seeded"


#: DuckDB checkpoints the staging file by itself once its WAL reaches this size. DuckDB's default
#: (16 MB) made a checkpoint of the whole file every few commits at a few 100k events/s (COMMIT
#: took ~70 ms per batch on the TPC-DI stream, more than the engine); the release still
#: checkpoints after every ``vacuum_rows`` released rows.
CHECKPOINT_THRESHOLD = "256MB"


def connection_config(
    memory_limit: str | None, *, threads: int | None = None, read_only: bool = False
) -> dict[str, str | bool | int | float | list[str]]:
    """The DuckDB configuration of a connection to a staging file (``threads``: DuckDB's worker
    threads, None for its default). Every connection a process opens to the same file must use
    the same one (DuckDB refuses a second configuration)."""
    config: dict[str, str | bool | int | float | list[str]] = (
        {"memory_limit": memory_limit} if memory_limit else {}
    )
    if threads is not None:
        config["threads"] = threads
    if not read_only:
        config["checkpoint_threshold"] = CHECKPOINT_THRESHOLD
    return config


#: Threads writing segment files (a commit of the ledger dataflow writes three at once).
SEGMENT_WRITERS = 4


class SegmentWrites:
    """The segment files one commit is writing (:meth:`StagingStore._write_segments`)."""

    def __init__(
        self, ids: list[int], folder: SegmentFolder, futures: list[Future[Segment]]
    ) -> None:
        self.ids = ids
        self.folder = folder
        self.futures = futures

    def result(self) -> list[Segment]:
        """Wait for every file, then fsync the folder once. On any error the files written are
        deleted and :class:`~staging.exceptions.StagingCommitFailed` is raised."""
        written: list[Segment] = []
        error: BaseException | None = None
        for future in self.futures:
            try:
                written.append(future.result())
            except Exception as exc:
                error = error or exc
        try:
            if error is None and written:
                self.folder.sync()
        except Exception as exc:
            error = exc
        if error is not None:
            self.folder.discard(written)
            raise StagingCommitFailed(self.ids, f"{type(error).__name__}: {error}") from error
        return written


class PinnedCursor:
    """A DuckDB cursor holding a segment pin (:class:`~staging.segments.SegmentFolder`) until
    it is closed; everything else is the cursor's."""

    def __init__(self, cursor: duckdb.DuckDBPyConnection, folder: SegmentFolder) -> None:
        folder.pin()
        self._pinned = True
        self._folder = folder
        self._cursor = cursor

    def close(self) -> None:
        try:
            self._cursor.close()
        finally:
            self._unpin()

    def _unpin(self) -> None:
        if self._pinned:
            self._pinned = False
            self._folder.unpin()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)

    def __del__(self) -> None:
        self._unpin()


class StagingStore:
    """The staging DuckDB file of one dataflow; see the module docstring.

    Opening creates the layout if the file is new, and checks that an existing file was made for
    the same dataflow shape (:class:`~staging.exceptions.StagingMismatch` otherwise). A file held by
    another process raises :class:`~staging.exceptions.StagingInUse`. ``threads`` are DuckDB's
    worker threads (``STAGING__THREADS``; None: DuckDB's default, one per core);
    ``background_merge``: a writer keeps house in a thread of its own (:meth:`housekeeping`:
    segment merges and large state folds), off the commit path.
    """

    def __init__(
        self,
        path: Path | str,
        flow: Dataflow | CompiledDataflow,
        *,
        memory_limit: str | None = None,
        read_only: bool = False,
        recent_cache_bytes: int = 256 * 2**20,
        threads: int | None = 1,
        background_merge: bool = True,
    ) -> None:
        self.path = Path(path)
        self.flow = flow.build() if isinstance(flow, Dataflow) else flow
        self.read_only = read_only
        # Serializes this process's writers of the file (the committer, the migration's
        # acknowledgements and releases); readers use cursors and need no lock.
        self.write_lock = threading.RLock()
        #: Held while a reader takes its snapshots of the staging and the state file, and by
        #: the COMMIT of a fold or a release (:func:`~staging.state_file.begin_read`).
        self.snapshot_lock = threading.Lock()
        if not read_only:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        config = connection_config(memory_limit, threads=threads, read_only=read_only)
        self._threads = threads
        try:
            self._con = duckdb.connect(str(self.path), read_only=read_only, config=config)
        except duckdb.IOException as exc:
            raise StagingInUse(self.path, str(exc).splitlines()[0]) from exc
        #: Whether the state file is attached (a read-only opening of a file of an earlier
        #: layout has none: its views read its own tables).
        self.state_attached = not read_only or state_file.state_path(self.path).exists()
        try:
            if self.state_attached:
                state_file.attach(self._con, self.path, read_only=read_only)
        except duckdb.Error as exc:
            self._con.close()
            raise StagingInUse(state_file.state_path(self.path), str(exc).splitlines()[0]) from exc
        #: Each state table's table in the state file (``streamdi.meta``'s ``state_tables``).
        self.state_tables: dict[str, str] = {}
        # an earlier layout's state_folded_through (in streamdi.meta), read by _check_dataflow
        self._legacy_folded_through: str | None = None
        # the staging file has no layout yet (_check_dataflow)
        self._new_file = False
        self.shape = describe_flow(self.flow)
        self._fingerprint = self.shape.fingerprint()
        #: The layout history (:mod:`staging.history`); its last entry is this dataflow's.
        self.history: list[LayoutVersion] = []
        #: The Parquet files of the delta logs and outputs (:mod:`staging.segments`).
        self.segment_folder = SegmentFolder(Path(f"{self.path}.segments"))
        self.catalog = SegmentCatalog(
            self.segment_folder, segment_schemas(self.flow), _sys("segments"), _sys("meta")
        )
        #: The deltas not folded into ``state_base`` yet, and the fold (:mod:`staging.folding`).
        self.state_folder = StateFolder(
            self.flow,
            state_file.STATE_META,
            lambda name: self.catalog.registered_sql((DELTA, name)),
            lambda name: state_file.table_ref(self.state_tables[name]),
            self.snapshot_lock,
        )
        self._merger: SegmentMerger | None = None
        # one thread per file a commit writes at once (Parquet encoding and fsync leave the GIL)
        self._segment_writer = ThreadPoolExecutor(
            SEGMENT_WRITERS, thread_name_prefix="segment-writer"
        )
        try:
            to_record = self._check_dataflow()
            if not read_only:
                self._create(to_record)
        except BaseException:
            # a file that does not open is not held: another connection (an upgrade) may open it
            self._segment_writer.shutdown()
            self._con.close()
            raise
        if not read_only and background_merge:
            self._merger = SegmentMerger(self.housekeeping)
        self.history = read_history(self._con)
        self._watermark = int(
            self._scalar(f"SELECT coalesce(max(batch_id), 0) FROM {_sys('batches')}")
        )
        if not read_only:
            begin = state_file.begin_read
            cursor = self._con.cursor()
            try:
                begin(cursor, self.snapshot_lock)
                self.state_folder.load(cursor, self._watermark)
            finally:
                cursor.close()
        self._next_dead_letter = (
            int(self._scalar(f"SELECT coalesce(max(id), 0) FROM {_sys('dead_letters')}")) + 1
        )
        self._read_schemas: dict[tuple[str, str], pa.Schema] = {}
        #: The sequences as this process last committed them (None: not known; step 6 of
        #: :meth:`commit` rewrites them only when they changed).
        self._sequences: dict[str, int] | None = None
        #: The last batch released to the warehouses (staging.handoff), as this process last read
        #: or wrote it; None until first asked.
        self.released_through: int | None = None
        #: What the last commits wrote, for migration to read without the file (staging.recent).
        self.recent = RecentCommits(0 if read_only else recent_cache_bytes, self.read_schema)

    # -- opening -----------------------------------------------------------------------------------

    def _create(self, to_record: UpgradePlan | bool) -> None:
        """Create the layout of a new file, or bring an older file's system tables up to
        :data:`~staging.layout.LAYOUT_VERSION`, in one transaction; record the dataflow's version
        when :meth:`_check_dataflow` said to (``True``: the first version of the file; a plan: a
        change of step logic or defaults, made in place).

        Two transactions, the state file's first (:mod:`staging.state_file`): it creates the
        folded tables (copying an earlier layout's rows, dropping tables no map names); the
        staging file's then drops the earlier layout's tables and records the map. A crash
        between leaves the staging file as it was, and the next opening does both again."""
        legacy = self._adopt_state()
        self._con.execute("BEGIN TRANSACTION")
        for statement in create_statements(self.flow):
            self._con.execute(statement)
        found = self._scalar(f"SELECT value FROM {_sys('meta')} WHERE key = 'layout_version'")
        if found is not None and int(found) > LAYOUT_VERSION:
            self._con.execute("ROLLBACK")
            raise StagingMismatch(
                self.path,
                f"its layout version {found} is newer than this streamdi's ({LAYOUT_VERSION}); "
                "open it with the streamdi that wrote it",
            )
        for statement in upgrade_statements():
            self._con.execute(statement)
        self._con.execute(
            f"INSERT INTO {_sys('meta')} VALUES ('dataflow', ?), ('fingerprint', ?) "
            "ON CONFLICT DO NOTHING",
            [self.flow.name, self._fingerprint],
        )
        self._con.execute(
            f"INSERT OR REPLACE INTO {_sys('meta')} VALUES ('layout_version', ?)",
            [str(LAYOUT_VERSION)],
        )
        self.catalog.load(self._con)
        # files no registration names (a commit or an upgrade that died) go before the views
        # bind: a view reads its relation's folder by glob
        self.segment_folder.remove_orphans(self.catalog.all())
        moved = self._tables_to_segments()
        self.catalog.define_views(self._con)
        for relation in legacy:
            self._con.execute(f"DROP TABLE {relation}")
        if legacy:
            self._con.execute(f"DROP SCHEMA IF EXISTS {q(STATE_BASE)}")
            self._con.execute(f"DELETE FROM {_sys('meta')} WHERE key = ?", [FOLDED_THROUGH])
        state_file.write_map(self._con, _sys("meta"), self.state_tables)
        self.state_folder.define_views(self._con)
        self._record_version(to_record)
        self._con.execute("COMMIT")
        self.catalog.install(moved)
        self.segment_folder.remove_orphans(self.catalog.all())
        missing = self.catalog.missing()
        if missing:
            raise StagingMismatch(
                self.path,
                f"{len(missing)} of its segment files are missing from {self.segment_folder.folder}"
                f" (first: {missing[0]}); restore the folder beside the file",
            )

    def _tables_to_segments(self) -> dict[tuple[str, str], tuple[Segment, ...]]:
        """In :meth:`_create`'s transaction: a file of layout 3 or earlier keeps its delta logs
        and outputs in tables; move each one's rows into one segment file and drop the table
        (its view replaces it)."""
        tables = self._base_tables(DELTA, OUTPUTS)
        added: list[Segment] = []
        for key, schema in self.catalog.schemas.items():
            if key not in tables:
                continue
            relation = qualified(*key)
            rows = arrow_of(self._con.sql(f"SELECT * FROM {relation} ORDER BY batch_id"))
            if rows.num_rows:
                ids = rows.column("batch_id")
                first, last = int(ids[0].as_py()), int(ids[-1].as_py())
                added.append(self.segment_folder.write(*key, conform(rows, schema), first, last))
            self._con.execute(f"DROP TABLE {relation}")
        if added:
            self.segment_folder.sync()
            logger.info("moved %s staged tables into segment files", len(added))
        return self.catalog.stage_add(self._con, added)

    def _adopt_state(self) -> list[str]:
        """The state file's transaction of :meth:`_create`: create each state table's folded
        table (named as ``streamdi.meta`` maps it, else after the table), drop the tables no map
        names (a switch that did not commit), and for a file of an earlier layout copy its
        folded rows there: ``state_base.<table>`` (layouts 5 to 7, folded through its
        ``state_folded_through``) or the ``state.<table>`` tables (layout 4 and before, which
        hold every batch). Returns the staging file's tables the copy read (for the staging
        file's transaction to drop); sets ``state_folded_through`` when it is not set. A new
        staging file empties a state file left beside it (by a staging file deleted without
        it): its rows belong to no batch of this one."""
        tables = self._base_tables(STATE_BASE, STATE)
        self.state_tables = {n: self.state_tables.get(n, n) for n in self.flow.tables}
        sources: dict[str, str] = {}
        for name in self.flow.tables:
            for schema in (STATE_BASE, STATE):
                if (schema, name) in tables:
                    sources[name] = qualified(schema, name)
        con = self._con
        con.execute("BEGIN TRANSACTION")
        try:
            if self._new_file:
                stale = state_file.drop_orphans(con, ())
                con.execute(f"DELETE FROM {state_file.STATE_META}")
                if stale:
                    logger.warning(
                        "emptied the state file left beside a new staging file path=%s",
                        state_file.state_path(self.path),
                    )
            for name, table in self.state_tables.items():
                con.execute(state_base_ddl(self.flow, name, state_file.table_ref(table)))
            dropped = state_file.drop_orphans(con, self.state_tables.values())
            folded = 0
            if sources:
                state_file.adopt_rows(con, self.state_tables, sources)
                folded = (
                    int(self._legacy_folded_through)
                    if self._legacy_folded_through is not None
                    else int(
                        self._scalar(f"SELECT coalesce(max(batch_id), 0) FROM {_sys('batches')}")
                    )
                )
            if sources or state_file.read_meta(con, FOLDED_THROUGH) is None:
                state_file.set_meta(con, FOLDED_THROUGH, str(folded))
            con.execute("COMMIT")
        except BaseException:
            with suppress(duckdb.Error):
                con.execute("ROLLBACK")
            raise
        if dropped:
            logger.info("dropped state tables no version names: %s", ", ".join(dropped))
        if sources:
            logger.info("copied %s state tables into the state file", len(sources))
        return sorted(sources.values())

    def _base_tables(self, *schemas: str) -> set[tuple[str, str]]:
        """``(schema, name)`` of the tables (not views) in ``schemas``: what an older layout
        kept as tables that the current one reads through views."""
        marks = ", ".join(["?"] * len(schemas))
        rows = self._con.execute(
            "SELECT table_schema, table_name FROM information_schema.tables "
            f"WHERE table_type = 'BASE TABLE' AND table_catalog = current_database() "
            f"AND table_schema IN ({marks})",
            list(schemas),
        ).fetchall()
        return {(str(schema), str(name)) for schema, name in rows}

    def _check_dataflow(self) -> UpgradePlan | bool:
        """Before any change to the file: check that it serves this dataflow, as this version.

        A new file passes (its first version is recorded). A file of another dataflow raises
        :class:`~staging.exceptions.StagingMismatch`; one whose recorded version differs from
        this definition in a way that changes the layout raises
        :class:`~staging.exceptions.StagingUpgradeNeeded` with the upgrade plan. A change of
        step logic or defaults only is made in place: the plan is returned, to be recorded as a
        new version. Returns what :meth:`_create` records (False: nothing)."""
        self._seeded = False
        try:
            rows = dict(self._con.execute(f"SELECT key, value FROM {_sys('meta')}").fetchall())
        except duckdb.CatalogException as exc:
            if self.read_only:
                raise StagingMismatch(self.path, "it has no streamdi layout") from exc
            self._new_file = True
            return True
        self._seeded = SEEDED in rows
        self._legacy_folded_through = rows.get(FOLDED_THROUGH)
        self.state_tables = state_file.read_map(rows)
        if self.state_tables and not self.state_attached:
            raise StagingMismatch(
                self.path,
                f"its state file {state_file.state_path(self.path)} is missing; restore it "
                "beside the file",
            )
        if rows.get("dataflow") != self.flow.name:
            raise StagingMismatch(
                self.path, f"it holds dataflow {rows.get('dataflow')!r}, not {self.flow.name!r}"
            )
        history = read_history(self._con)
        if not history:
            if rows.get("fingerprint") != self._fingerprint:
                raise StagingMismatch(
                    self.path,
                    f"dataflow {self.flow.name!r} changed its tables, sources or sinks since the "
                    "file was written, which was before streamdi kept a layout history, so the "
                    "change cannot be planned: open the file once with the dataflow that wrote "
                    "it (that records its shape), then upgrade",
                )
            return True
        latest = history[-1]
        if latest.digest == self.shape.digest():
            return False
        plan = plan_upgrade(latest.shape, self.flow)
        if plan.layout_changed or not plan.applicable:
            raise StagingUpgradeNeeded(self.path, plan)
        return False if self.read_only else plan

    def _record_version(self, to_record: UpgradePlan | bool) -> None:
        """In :meth:`_create`'s transaction: record what :meth:`_check_dataflow` returned."""
        if to_record is False:
            return
        history = read_history(self._con)
        if to_record is True and history:
            return
        watermark = 0
        if isinstance(to_record, UpgradePlan):
            watermark = int(
                self._scalar(f"SELECT coalesce(max(batch_id), 0) FROM {_sys('batches')}")
            )
        version = history[-1].version + 1 if history else 1
        record_version(self._con, version, self.shape, watermark)
        if isinstance(to_record, UpgradePlan) and watermark == 0:
            # no batch was run by the old steps (a seeded file whose dataflow is built again
            # with its reference data, as TPC-DI's run does): nothing to recompute
            logger.info(
                "dataflow %s version=%s recorded before any batch (steps changed: %s)",
                self.flow.name,
                version,
                ", ".join(c.subject for c in to_record.changes),
            )
        elif isinstance(to_record, UpgradePlan):
            logger.info(
                "dataflow changed in place version=%s after_batch=%s\n%s",
                version,
                watermark,
                to_record.render(advice=False),
            )

    @property
    def version(self) -> int:
        """The dataflow version this store commits batches as (the history's last)."""
        return self.history[-1].version if self.history else 0

    def close(self) -> None:
        if self._merger is not None:
            self._merger.stop()
            self._merger = None
        self._segment_writer.shutdown()
        self._con.close()

    def __enter__(self) -> StagingStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading progress and state ----------------------------------------------------------------

    @property
    def watermark(self) -> int:
        """The id of the last committed batch (0 before the first)."""
        return self._watermark

    def _scalar(self, sql: str, params: list[Any] | None = None) -> Any:
        rows = self._con.execute(sql, params or []).fetchall()
        return rows[0][0] if rows else None

    def offsets(self) -> dict[tuple[str, int], int]:
        """The next offset to consume per ``(topic, partition)``, as of the last commit."""
        return read_offsets(self._con)

    def streams(self) -> dict[str, StreamProgress]:
        return read_streams(self._con)

    def partitions(self) -> dict[StreamPartition, PartitionProgress]:
        """The merge state per ``(stream, topic, partition)`` as of the last commit (empty for a
        read-only file of a layout before 3, which has none)."""
        return read_partitions(self._con)

    @property
    def seeded(self) -> bool:
        """Whether :meth:`seed` loaded a starting state into this file (a file seeded by an
        earlier streamdi kept no note of it). Known from the opening on, so any thread may ask."""
        return self._seeded

    def meta(self, key: str) -> str | None:
        """A value of the file's ``streamdi.meta`` table (e.g. ``kafka_log``)."""
        value = self._scalar(f"SELECT value FROM {_sys('meta')} WHERE key = ?", [key])
        return None if value is None else str(value)

    def set_meta(self, key: str, value: str) -> None:
        """Set a ``streamdi.meta`` value in its own transaction."""
        self._con.execute(
            f"INSERT OR REPLACE INTO {_sys('meta')} VALUES (?, ?)", [key, value]
        ).fetchall()

    def load_state(self, *, sorted_rows: bool = True, threads: int | None = None) -> StateImage:
        """The engine's state as of the last commit: every state table (sorted by row id unless
        ``sorted_rows`` is False: an executor resuming from it needs no order, and sorting millions
        of rows is most of a resume's read), plus the sequences.

        ``threads``: DuckDB's worker threads for this read, the file's own setting
        (``STAGING__THREADS``) restored after it; None reads with that setting. A resume reads
        before the pipeline commits anything, so it may take every core: at TPC-DI SF 100 (22 M
        state rows) two threads read in 2.3 s what one read in 3.8 s. The setting is the
        process's DuckDB instance's: a commit running meanwhile would use them too."""
        if threads is None or threads == self._threads:
            return self._load_state(sorted_rows)
        self._con.execute(f"SET threads = {int(threads)}")
        try:
            return self._load_state(sorted_rows)
        finally:
            restore = "RESET threads" if self._threads is None else f"SET threads = {self._threads}"
            self._con.execute(restore)

    def _load_state(self, sorted_rows: bool) -> StateImage:
        tables = {
            name: self.state_table(name, sorted_rows=sorted_rows) for name in self.flow.tables
        }
        return StateImage(tables, self.sequences())

    def state_table(self, name: str, *, sorted_rows: bool = True) -> pa.Table:
        """State table ``name`` as of the last commit, in its image form, sorted by row id (in
        storage order if ``sorted_rows`` is False)."""
        table = self.flow.tables[name]
        sql = f"SELECT * FROM {qualified(STATE, name)}"
        if sorted_rows:
            sql += " ORDER BY " + ", ".join(q(c) for c in table.row_id())
        # the state views read delta-log segment files: pinned, a release cannot delete them
        cursor = self.cursor()
        try:
            self.begin_read(cursor)
            data = arrow_of(cursor.sql(sql))
        finally:
            cursor.close()
        return data.cast(image_schema(table))

    def folded_through(self) -> int:
        """The last batch the state file's folded tables hold, as committed there."""
        cursor = self.cursor()
        try:
            self.begin_read(cursor)
            value = state_file.read_meta(cursor, FOLDED_THROUGH)
        finally:
            cursor.close()
        return int(value or 0)

    def sequences(self) -> dict[str, int]:
        """The sequences' values as of the last commit."""
        return read_sequences(self._con)

    def query(self, sql: str, params: list[Any] | None = None) -> pa.Table:
        """Run a read-only SQL query on a fresh cursor and return Arrow (for tools and tests)."""
        cursor = self.cursor()
        try:
            self.begin_read(cursor)
            return arrow_of(cursor.sql(sql, params=params) if params else cursor.sql(sql))
        finally:
            cursor.close()

    def read_schema(self, kind: str, name: str) -> pa.Schema:
        """The Arrow schema a read of a delta log (``kind="table"``) or a sink's outputs
        (``kind="sink"``) returns."""
        key = (kind, name)
        schema = self._read_schemas.get(key)
        if schema is None:
            relation = qualified(DELTA if kind == "table" else OUTPUTS, name)
            cursor = self.cursor()
            try:
                schema = arrow_of(cursor.sql(f"SELECT * FROM {relation} LIMIT 0")).schema
            finally:
                cursor.close()
            self._read_schemas[key] = schema
        return schema

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A new connection to the same database (its own transactions), for snapshot readers.
        It pins the segment files (:meth:`SegmentFolder.pin`) until it is closed: close it."""
        return PinnedCursor(self._con.cursor(), self.segment_folder)  # type: ignore[return-value]

    def begin_read(self, cursor: duckdb.DuckDBPyConnection) -> None:
        """BEGIN a read transaction on ``cursor`` (one of :meth:`cursor`) whose snapshots of the
        staging file and the state file agree (:func:`~staging.state_file.begin_read`): every
        reader of the ``state`` views starts so."""
        state_file.begin_read(cursor, self.snapshot_lock, attached=self.state_attached)

    # -- seeding -----------------------------------------------------------------------------------

    def seed(self, image: StateImage, *, checkpoint: bool = True) -> None:
        """Load the engine's starting state in bulk into a store nothing was committed to, e.g. the
        state a historical load leaves (the warehouse already holds those rows, so they are not
        changes to migrate and do not enter the delta log).

        The protocol, in this order:

        1. Refuse unless the watermark is 0 and every state table is empty
           (:class:`~staging.exceptions.StagingCommitFailed`).
        2. Check every image against its table's image schema (casting, names in order).
        3. In a transaction on the state file, create a new table per state table and append
           its rows (one Arrow insert per table); COMMIT. Nothing reads them yet (a crash here
           leaves tables no map names, which the next opening drops).
        4. BEGIN on the staging file.
        5. Replace the sequences with the image's; note ``seeded`` (the rows seeded) in
           ``streamdi.meta``: from now on a warehouse may hold rows staging never had (those the
           seed left out), so a warehouse added later copies its state tables from another
           warehouse, not from staging (:mod:`migration.bootstrap`).
        6. Map each state table to its new table and point its ``state`` view there.
        7. COMMIT (under ``snapshot_lock``): the state appears whole, or not at all.
        8. Drop the empty tables the map named before (under ``snapshot_lock``; a failure is
           only logged: the seed stands, and the next opening drops tables no map names).
        9. With ``checkpoint``, take the seed's checkpoint (:mod:`staging.checkpoints`): the state
           a reprocess of the seeded tables starts from, since it is not in Kafka.
        """
        if self.read_only:
            raise StagingCommitFailed([0], "the store is read-only")
        # 1.
        if self._watermark != 0:
            raise StagingCommitFailed(
                [0], f"cannot seed: batches up to {self._watermark} are already committed"
            )
        for name in self.flow.tables:
            if self._scalar(f"SELECT count(*) FROM {qualified(STATE, name)}"):
                raise StagingCommitFailed([0], f"cannot seed: state table {name!r} is not empty")
        unknown = sorted(set(image.tables) - set(self.flow.tables))
        if unknown:
            raise StagingCommitFailed([0], f"cannot seed unknown state tables {unknown}")
        # 2.
        rows = {
            name: data.select(image_schema(self.flow.tables[name]).names).cast(
                image_schema(self.flow.tables[name])
            )
            for name, data in image.tables.items()
        }
        con = self._con
        old = dict(self.state_tables)
        with self.write_lock:
            try:
                # 3.
                taken = state_file.existing_tables(con)
                new: dict[str, str] = {}
                con.execute("BEGIN TRANSACTION")
                for name in self.flow.tables:
                    new[name] = state_file.new_table_name(name, taken, self.version)
                    taken.add(new[name])
                    target = state_file.table_ref(new[name])
                    con.execute(state_base_ddl(self.flow, name, target))
                    data = rows.get(name)
                    if data is None or data.num_rows == 0:
                        continue
                    view = f"_seed_{name}"
                    con.register(view, data)
                    try:
                        con.execute(f"INSERT INTO {target} SELECT * FROM {view}")
                    finally:
                        con.unregister(view)
                con.execute("COMMIT")
                # 4.
                con.execute("BEGIN TRANSACTION")
                # 5.
                con.execute(f"DELETE FROM {_sys('sequences')}")
                for name, value in sorted(image.sequences.items()):
                    con.execute(f"INSERT INTO {_sys('sequences')} VALUES (?, ?)", [name, value])
                con.execute(
                    f"INSERT OR REPLACE INTO {_sys('meta')} VALUES (?, ?)",
                    [SEEDED, str(sum(t.num_rows for t in rows.values()))],
                )
                # 6.
                self.state_tables = new
                state_file.write_map(con, _sys("meta"), new)
                self.state_folder.define_views(con)
                # 7.
                with self.snapshot_lock:
                    con.execute("COMMIT")
            except Exception as exc:
                self.state_tables = old
                with suppress(duckdb.Error):
                    con.execute("ROLLBACK")
                raise StagingCommitFailed([0], f"seeding failed: {exc}") from exc
            self._seeded = True
            # 8.
            with self.snapshot_lock:
                con.execute("BEGIN TRANSACTION")
                try:
                    state_file.drop_orphans(con, new.values())
                    con.execute("COMMIT")
                except duckdb.Error as exc:  # the seed stands; the next opening drops them
                    with suppress(duckdb.Error):
                        con.execute("ROLLBACK")
                    logger.warning("state tables replaced by the seed not dropped: %s", exc)
        logger.info(
            "seeded staging tables=%s rows=%s",
            len(rows),
            sum(t.num_rows for t in rows.values()),
        )
        # 9.
        if checkpoint:
            take_checkpoint(self)

    # -- writing -----------------------------------------------------------------------------------

    def commit(self, commits: list[BatchCommit], *, hook: CommitHook | None = None) -> None:
        """Apply ``commits`` (consecutive batches, in order) in one transaction.

        The commit protocol, in this order:

        1. Refuse any batch id at or below the watermark (it would apply twice) or out of order.
        2. Build every row set as Arrow before the transaction opens: per state table the delta
           rows of all the batches, the outputs, the dead letters (assigning their ids), the
           aborts and the ledger rows. Write the delta rows and the outputs as segment files
           (:mod:`staging.segments`: one per delta log and sink with rows, fsynced with their
           folder); until step 8 they are orphans nothing reads.
        3. BEGIN.
        4. Register the segment files (the state changes: the ``state`` views read the delta
           logs' until a fold holds them, :mod:`staging.folding`; and the outputs).
        5. Append the dead letters, the aborts and the sink retractions; mark re-offered dead
           letters as replayed.
        6. Replace the sequences, the consumed offsets, the stream progress and the partitions'
           merge state (the events they hold back included) with the last batch's values.
        7. Insert one ledger row per batch.
        8. COMMIT: all of it becomes durable and visible at once.
        9. Advance the in-memory watermark (the segment catalog and the waiting deltas
           advanced under the write lock), and
           hand the committed delta-log and output rows to :attr:`recent`
           (:mod:`staging.recent`), so migration need not read them back. When a fold is due
           (:meth:`~staging.folding.StateFolder.due_now`), wake the housekeeping thread, which
           folds beside the next commits; a store without one folds here, in a transaction on
           the state file of its own.

        Any error before step 8 rolls the transaction back, deletes the segment files of step 2
        and raises :class:`~staging.exceptions.StagingCommitFailed`; nothing of the batches is
        visible and the caller may run them again (a process killed before step 8 leaves files
        the next opening deletes). ``hook(step)`` is called before steps 4 to 8 (fault
        injection in the crash tests). Steps 3 to 8 hold :attr:`write_lock`, which the migration's
        acknowledgements and releases (:mod:`staging.handoff`) also take, so their small
        transactions never interleave with a commit.
        """
        if not commits:
            return
        if self.read_only:
            raise StagingCommitFailed([c.batch_id for c in commits], "the store is read-only")
        # 1. no batch twice, in order
        expected = self._watermark
        for c in commits:
            if c.batch_id <= expected:
                raise BatchAlreadyCommitted(c.batch_id, expected)
            expected = c.batch_id
        ids = [c.batch_id for c in commits]
        # 2. everything as Arrow, outside the transaction
        deltas = {name: delta_rows(self.flow, name, commits) for name in self.flow.tables}
        outputs = {
            sink: conform(self._output_rows(sink, commits), self.catalog.schemas[(OUTPUTS, sink)])
            for sink in self.flow.sinks
        }
        # the files are written (outside the GIL) while the rest is built and the transaction
        # opens; step 5 waits for them
        writing = self._write_segments(ids, deltas, outputs)
        written: list[Segment] = []
        dead, next_id = dead_letter_rows(commits, self._next_dead_letter)
        aborts = abort_rows(commits)
        ledger = ledger_rows(commits, self.version)
        last = commits[-1]
        con = self._con
        registered: list[str] = []

        def register(name: str, table: pa.Table) -> str:
            con.register(name, table)
            registered.append(name)
            return name

        def step(name: str) -> None:
            if hook is not None:
                hook(name)

        self.write_lock.acquire()
        try:
            # 3.
            con.execute("BEGIN TRANSACTION")
            # 4. the segment files
            step("state")
            written = writing.result()
            changes = self.catalog.stage_add(con, written)
            # 5. dead letters, aborts, retractions
            step("outputs")
            if dead.num_rows:
                register("_dead", dead)
                con.execute(f"INSERT INTO {_sys('dead_letters')} BY NAME SELECT * FROM _dead")
            if aborts.num_rows:
                register("_aborts", aborts)
                con.execute(f"INSERT INTO {_sys('aborts')} BY NAME SELECT * FROM _aborts")
            retracted = [retraction_rows(c.batch_id, c.retractions) for c in commits]
            if any(t.num_rows for t in retracted):
                register("_retractions", pa.concat_tables(retracted))
                con.execute(f"INSERT INTO {RETRACTIONS} BY NAME SELECT * FROM _retractions")
            for c in commits:
                if c.replayed:
                    con.execute(
                        f"UPDATE {_sys('dead_letters')} SET replayed_in = ? "
                        "WHERE list_contains(?, id) AND replayed_in IS NULL",
                        [c.batch_id, c.replayed],
                    )
            # 6. sequences, offsets, stream progress
            step("progress")
            self._replace_progress(commits, last)
            # 7. the ledger
            step("ledger")
            register("_ledger", ledger)
            con.execute(f"INSERT INTO {_sys('batches')} BY NAME SELECT * FROM _ledger")
            # 8.
            step("commit")
            con.execute("COMMIT")
            self.catalog.install(changes)
            self.state_folder.committed(last.batch_id, deltas)
        except Exception as exc:
            try:
                con.execute("ROLLBACK")
            except duckdb.Error:
                logger.warning("rollback failed after commit error batch_ids=%s", ids)
            with suppress(Exception):
                written = writing.result()  # a file written meanwhile is an orphan now
            self.segment_folder.discard(written)
            raise StagingCommitFailed(ids, f"{type(exc).__name__}: {exc}") from exc
        finally:
            for name in registered:
                con.unregister(name)
            self.write_lock.release()
        # 9.
        due = self.state_folder.due_now()
        if self._merger is not None and (written or due):
            self._merger.wake()
        self._watermark = last.batch_id
        self._next_dead_letter = next_id
        if last.result.sequences:
            self._sequences = dict(last.result.sequences)
        self.recent.add(RecentCommit(ids[0], ids[-1], deltas, outputs))
        logger.debug("committed batch_ids=%s..%s", ids[0], ids[-1])
        if due and self._merger is None:
            try:
                self.fold_state(wait=False)
            except Exception as exc:  # the batches are committed: the deltas wait for the next
                logger.warning("state fold failed after batch_id=%s: %s", ids[-1], exc)

    # -- segments ----------------------------------------------------------------------------------

    def release_segments(
        self, cursor: duckdb.DuckDBPyConnection, through: int
    ) -> tuple[dict[tuple[str, str], tuple[Segment, ...]], list[Segment]]:
        """In the caller's transaction (under :attr:`write_lock`): unregister the segments of
        batches all at or below ``through``, but a delta log's only once every batch of it is
        folded too (the state views read the deltas after the fold from the registered
        segments; :mod:`staging.folding`); the caller's move of ``released_through`` hides the
        released batches in the ``delta_log`` and ``outputs`` views. Returns what
        :meth:`segments_released` takes once that transaction committed."""
        return self.catalog.stage_release(cursor, through, self.state_folder.folded_through)

    def releasable_segments(self, through: int) -> bool:
        """Whether a release through ``through`` would unregister a segment (a delta log's
        segment kept for the state views may have been folded since the last release)."""
        return bool(self.catalog.releasable(through, self.state_folder.folded_through))

    def segments_released(
        self, changes: dict[tuple[str, str], tuple[Segment, ...]], gone: list[Segment]
    ) -> None:
        """After a release committed: update the catalog and retire the files that left it."""
        self.catalog.install(changes)
        self.segment_folder.retire(gone)

    def fold_state(self, least: int = 1, *, wait: bool = True) -> bool:
        """Fold the state deltas that wait into the state file (:mod:`staging.folding`) in a
        transaction of its own, beside any commit, when at least ``least`` batches wait; then
        checkpoint the state file once its WAL holds
        :data:`~staging.state_file.CHECKPOINT_WAL_BYTES` (a commit of a batch does not wait
        for it: it writes the other file). ``wait``: False does nothing while another fold
        runs. True when it folded."""
        cursor = self._con.cursor()
        try:
            folded = self.state_folder.fold(cursor, least=least, wait=wait)
            if folded and state_file.wal_bytes(self.path) >= state_file.CHECKPOINT_WAL_BYTES:
                try:
                    cursor.execute(f"CHECKPOINT {q(state_file.STATE_CATALOG)}")
                except duckdb.Error as exc:  # a reader's transaction; DuckDB retries by itself
                    logger.debug("state file checkpoint skipped: %s", exc)
            return folded
        finally:
            cursor.close()

    def housekeeping(self) -> bool:
        """One step of the housekeeping thread: a fold a commit left to it when one is due
        (:meth:`fold_state`), else a segment merge (:meth:`merge_segments`). True when it did
        something."""
        if self.state_folder.due_now() and self.fold_state():
            return True
        return self.merge_segments()

    def merge_segments(self) -> bool:
        """Merge the segments one relation has due (:func:`~staging.segments.merge_candidates`),
        if any: the merged file is written outside the write lock, then swapped in for its
        inputs in one transaction (dropped when a release took an input meanwhile) and the
        inputs retired. True when a merge was due."""
        folder = self.segment_folder
        with folder.pinned():
            with self.write_lock:
                picked = next(
                    (
                        group
                        for segments in self.catalog.segments.values()
                        if (group := merge_candidates(list(segments))) is not None
                    ),
                    None,
                )
            if picked is None:
                return False
            merged = folder.merge(picked)
        cursor = self._con.cursor()
        try:
            with self.write_lock:
                cursor.execute("BEGIN TRANSACTION")
                try:
                    changes = self.catalog.stage_swap(cursor, picked, merged)
                    cursor.execute("COMMIT" if changes is not None else "ROLLBACK")
                except BaseException:
                    with suppress(duckdb.Error):
                        cursor.execute("ROLLBACK")
                    folder.discard([merged])
                    raise
                if changes is None:
                    folder.discard([merged])
                    return True
                self.catalog.install(changes)
        finally:
            cursor.close()
        folder.retire(picked)
        logger.debug(
            "merged %s segments of %s.%s into %s",
            len(picked),
            merged.relation,
            merged.name,
            merged.file,
        )
        return True

    def _write_segments(
        self, ids: list[int], deltas: Mapping[str, pa.Table], outputs: Mapping[str, pa.Table]
    ) -> SegmentWrites:
        """Step 2 of :meth:`commit`: start writing the segment files of the batches ``ids`` (one
        per delta log and sink with rows), each in a writer thread; :meth:`SegmentWrites.result`
        waits for them and fsyncs the folder. Not registered yet."""
        folder = self.segment_folder
        relations = [(DELTA, name, rows) for name, rows in deltas.items()]
        relations += [(OUTPUTS, sink, rows) for sink, rows in outputs.items()]
        futures = [
            self._segment_writer.submit(folder.write, relation, name, rows, ids[0], ids[-1])
            for relation, name, rows in relations
            if rows.num_rows
        ]
        return SegmentWrites(ids, folder, futures)

    def _replace_progress(self, commits: list[BatchCommit], last: BatchCommit) -> None:
        """Step 6 of :meth:`commit`. These are a handful of rows (one per sequence, partition and
        stream), so they go as statement parameters: registering an Arrow table per statement
        cost more than the statement."""
        con = self._con
        sequences = dict(last.result.sequences)
        if sequences and sequences != self._sequences:
            con.execute(f"DELETE FROM {_sys('sequences')}")
            insert_values(con, _sys("sequences"), [(n, int(v)) for n, v in sequences.items()])
        offsets: dict[tuple[str, int], tuple[int, int]] = {}
        streams: dict[str, tuple[StreamProgress, int]] = {}
        partitions: dict[StreamPartition, tuple[PartitionProgress, int]] = {}
        for c in commits:
            for tp, offset in c.offsets.items():
                offsets[tp] = (offset, c.batch_id)
            for stream, progress in c.streams.items():
                streams[stream] = (progress, c.batch_id)
            for key, merge in c.partitions.items():
                partitions[key] = (merge, c.batch_id)
        if partitions:
            self._replace_partitions(partitions)
        if offsets:
            keys = list(offsets)
            con.execute(
                f"DELETE FROM {_sys('offsets')} WHERE (topic, partition) IN "
                f"({', '.join(['(?, ?)'] * len(keys))})",
                [v for k in keys for v in (k[0], int(k[1]))],
            )
            insert_values(
                con,
                _sys("offsets") + " (topic, partition, next_offset, batch_id)",
                [(k[0], int(k[1]), int(offsets[k][0]), int(offsets[k][1])) for k in keys],
            )
        if streams:
            names = list(streams)
            con.execute(
                f"DELETE FROM {_sys('streams')} WHERE stream IN ({', '.join(['?'] * len(names))})",
                names,
            )
            insert_values(
                con,
                _sys("streams") + " (stream, last_batch, max_ts, events, last_pos, batch_id)",
                [
                    (
                        n,
                        streams[n][0].last_batch,
                        streams[n][0].max_ts,
                        streams[n][0].events,
                        streams[n][0].last_pos,
                        streams[n][1],
                    )
                    for n in names
                ],
            )

    def _replace_partitions(
        self, partitions: Mapping[StreamPartition, tuple[PartitionProgress, int]]
    ) -> None:
        keys = list(partitions)
        table = pa.table(
            {
                "stream": pa.array([k[0] for k in keys], pa.string()),
                "topic": pa.array([k[1] for k in keys], pa.string()),
                "partition": pa.array([k[2] for k in keys], pa.int32()),
                "last_batch": pa.array([partitions[k][0].last_batch for k in keys], pa.int64()),
                "max_ts": pa.array([partitions[k][0].max_ts for k in keys], pa.int64()),
                "held": pa.array([partitions[k][0].held for k in keys], pa.binary()),
                "batch_id": pa.array([partitions[k][1] for k in keys], pa.int64()),
            }
        )
        con = self._con
        con.register("_partitions", table)
        try:
            con.execute(
                f"DELETE FROM {_sys('partitions')} p USING _partitions x WHERE p.stream = x.stream "
                "AND p.topic = x.topic AND p.partition = x.partition"
            )
            con.execute(f"INSERT INTO {_sys('partitions')} BY NAME SELECT * FROM _partitions")
        finally:
            con.unregister("_partitions")

    def _output_rows(self, sink: str, commits: list[BatchCommit]) -> pa.Table:
        columns = output_columns(self.flow, sink)
        parts = []
        for c in commits:
            out = c.result.outputs.get(sink)
            if out is None or out.num_rows == 0:
                continue
            arrays = [pa.array([c.batch_id] * out.num_rows, pa.int64())]
            names = ["batch_id"]
            for name, kind in columns.items():
                if name not in out.column_names:
                    continue
                column = out.column(name)
                if kind is None and not pa.types.is_string(column.type):
                    column = column.cast(pa.string())
                arrays.append(column)
                names.append(name)
            parts.append(pa.Table.from_arrays(arrays, names=names))
        if not parts:
            return pa.table({"batch_id": pa.array([], pa.int64())})
        return pa.concat_tables(parts, promote_options="permissive")

    # -- dead letters ------------------------------------------------------------------------------

    def dead_letters(
        self,
        *,
        stream: str | None = None,
        pending_only: bool = False,
        ids: Iterable[int] | None = None,
        limit: int | None = None,
        after_id: int | None = None,
        reason: str | None = None,
    ) -> pa.Table:
        """Staged dead letters (oldest first), optionally of one stream, not yet replayed, with
        the given ids, after id ``after_id`` (paging), or whose reason contains ``reason``
        (case-insensitive, a plain substring: ``%`` and ``_`` are themselves)."""
        where = ["TRUE"]
        params: list[Any] = []
        if after_id is not None:
            where.append("id > ?")
            params.append(int(after_id))
        if stream is not None:
            where.append("stream = ?")
            params.append(stream)
        if pending_only:
            where.append("replayed_in IS NULL")
        if ids is not None:
            where.append("list_contains(?, id)")
            params.append(list(ids))
        if reason is not None:
            where.append("contains(lower(reason), lower(?))")
            params.append(reason)
        sql = f"SELECT * FROM {_sys('dead_letters')} WHERE {' AND '.join(where)} ORDER BY id"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        table = self.query(sql, params)
        for f in DEAD_LETTER_TABLE_SCHEMA:  # a read-only file of an older layout lacks some
            if f.name not in table.column_names:
                table = table.append_column(f, pa.nulls(table.num_rows, f.type))
        return table


def _sys(name: str) -> str:
    return qualified(SYSTEM, name)
