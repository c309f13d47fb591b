"""A DuckDB warehouse file as a migration target, through :class:`warehouse.duckdb.DuckDBDriver`.

SQLAlchemy (the duckdb-engine dialect) compiles the DDL from the layout's metadata; it runs, and
the rows travel (Arrow tables registered as views, appended with one ``INSERT ... SELECT``),
through the driver's one plain DuckDB connection (a duckdb-engine connection would carry another
configuration, which DuckDB refuses while another connection of the process holds the file). The
file has one writing process, so the stream lock is a lock of this process.

The file's database instance runs user queries too (the query service's reader joins it: one
instance per file and process), so the driver is opened *fenced*
(:meth:`warehouse.duckdb.DuckDBDriver.fence`: external access off, a memory limit, a thread
count) when the target connects.

Idle detection: DuckDB has no view of other clients, so a warehouse file counts as busy only while
:meth:`DuckDBTarget.mark_busy` says so (the query service marks its reads).
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa

from migration.schema import WarehouseLayout, create_statements
from migration.targets.base import BaseTarget, BaseWarehouseFile, Hook
from staging.layout import q
from warehouse.duckdb import DuckDBDriver, replace_file, wal_path, writer_lock

if TYPE_CHECKING:
    import duckdb

    from migration.reader import ReaderOptions, WarehouseReader


logger = logging.getLogger(__name__)

#: A merge leaving at least this much write-ahead log checkpoints it (DuckDB's own threshold, set
#: to 256 MB at connect, is the backstop).
CHECKPOINT_WAL_BYTES = 64 * 1024 * 1024

#: A unique-upsert delta of at least this many rows is merged by what changed
#: (:meth:`DuckDBTarget._merge_narrow`); smaller ones by delete and insert. Below it the marks
#: cost more than they save: TPC-DI's daily Prospect at SF 3 (~15 k rows, the whole table) took
#: 0.257 s of merging a day by the marks against 0.216 s by delete and insert (40 days, both
#: warehouses); at SF 100 a day's ~500 k rows come in pieces of 100 k and more, which the marks
#: merge ten times faster than delete and insert.
NARROW_MIN_ROWS = 32_768
#: ... and at least this share of the full table's rows: the marks join the whole full table
#: once more, which a small delta of a large table does not repay (TPC-DI's FactWatches at
#: SF 100: 63 k rows, 80% of them new, against 24 M: the marks alone took 1.0 s).
NARROW_MIN_SHARE = 0.01
#: ... when the columns most of its rows change are at most this many.
NARROW_MAX_COLUMNS = 4
#: The temporary table of the narrow merge's row marks.
NARROW_MARKS = "streamdi_narrow_marks"
#: The temporary table of the narrow merge's rows when they come as a subquery.
NARROW_ROWS = "streamdi_narrow_rows"


#: The narrow merge's mark for a float whose sign alone differs (-0.0 against 0.0): DuckDB's
#: ``UPDATE`` keeps a value that compares equal to the new one, so such a row is deleted and
#: inserted instead (this bit is never in the updated columns).
SIGN_ONLY = 1 << 62


def _mark_bits(columns: list[str], floats: frozenset[str]) -> str:
    """SQL: the narrow merge's mark of a delta row (``u.``) against its full row (``f.``): bit
    ``i`` when ``columns[i]`` differs (``IS DISTINCT FROM``), :data:`SIGN_ONLY` when a float
    differs in its sign alone."""
    bits = [
        f"(CASE WHEN f.{q(c)} IS DISTINCT FROM u.{q(c)} THEN {1 << i} ELSE 0 END)::BIGINT"
        for i, c in enumerate(columns)
    ]
    signs = [
        f"(f.{q(c)} = u.{q(c)} AND signbit(f.{q(c)}) <> signbit(u.{q(c)}))"
        for c in columns
        if c in floats
    ]
    if signs:
        bits.append(f"(CASE WHEN {' OR '.join(signs)} THEN {SIGN_ONLY} ELSE 0 END)::BIGINT")
    return " + ".join(bits)


#: The layout's DDL compiled for DuckDB, once per layout (a layout is immutable): compiling it
#: through SQLAlchemy costs ~15 ms, paid on every open (a bootstrap opens a twin of its peer).
_DDL: weakref.WeakKeyDictionary[WarehouseLayout, list[str]] = weakref.WeakKeyDictionary()
_DDL_LOCK = threading.Lock()


def layout_ddl(layout: WarehouseLayout) -> list[str]:
    """``CREATE ... IF NOT EXISTS`` statements of ``layout`` for DuckDB (compiled once)."""
    with _DDL_LOCK:
        statements = _DDL.get(layout)
        if statements is None:
            from duckdb_engine import Dialect

            statements = create_statements(
                layout.metadata, Dialect(), layout.schemas, row_keys=False
            )
            _DDL[layout] = statements
        return list(statements)


class DuckDBTarget(BaseTarget):
    """See the module docstring."""

    name = "duckdb"

    def __init__(
        self,
        layout: WarehouseLayout,
        path: Path | str,
        *,
        memory_limit: str = "1GB",
        threads: int = 2,
    ) -> None:
        self._driver = DuckDBDriver(path, memory_limit=memory_limit, threads=threads, fenced=True)
        super().__init__(layout, self._driver)
        self.path = Path(path)
        self.memory_limit = memory_limit
        self.threads = threads
        self._lock = writer_lock(self.path)
        self._busy_until = 0.0
        #: A merge updated rows in place and no checkpoint has followed yet (see _merge_narrow).
        self._updated_in_place = False
        #: Tables merged by what changed (:meth:`_merge_narrow`) since this target was created.
        self.narrow_merges = 0

    def twin(self) -> DuckDBTarget:
        """Another target on the same file (it joins the DuckDB instance this process holds)."""
        return DuckDBTarget(
            self.layout, self.path, memory_limit=self.memory_limit, threads=self.threads
        )

    def whole_file(self) -> DuckDBWarehouseFile:
        return DuckDBWarehouseFile(self, self._driver)

    def _connect(self) -> None:
        driver = self._driver
        driver.connect()
        try:
            driver.execute_script(layout_ddl(self.layout))
            # Loads append to index-free delta tables; checkpointing belongs to the merges (which
            # rewrite the full tables anyway), not to whichever load crosses DuckDB's 16 MB default.
            driver.execute("SET checkpoint_threshold = '256MB'")
        except BaseException:
            driver.close()
            raise

    def sql_dialect(self) -> sa.engine.Dialect:
        from duckdb_engine import Dialect

        return Dialect()

    def create_missing_tables(self) -> None:
        for statement in layout_ddl(self.layout):
            self.execute(statement)

    @property
    def connection(self) -> duckdb.DuckDBPyConnection:
        """The driver's DuckDB connection (tests inspect the file through it)."""
        return self._driver.connection

    def begin(self) -> None:
        self._lock.acquire()
        try:
            super().begin()
        except BaseException:
            self._lock.release()
            raise

    def _lock_stream(self) -> None:
        """The file's writer lock :meth:`begin` took is the stream's lock (one writing
        process)."""

    def commit(self) -> None:
        try:
            super().commit()
        finally:
            self._lock.release()

    def rollback(self) -> None:
        try:
            super().rollback()
        finally:
            with suppress(RuntimeError):  # not held: the failure came before BEGIN
                self._lock.release()

    def _upsert(
        self, full: str, rows: str, columns: tuple[str, ...], row_id: tuple[str, ...]
    ) -> int:
        """Replace the full rows of ``rows``' row ids and insert the others: by what changed
        (:meth:`_merge_narrow`) when that pays, else by delete and insert (:meth:`_replace`)."""
        narrow = self._merge_narrow(full, rows, columns, row_id)
        if narrow is not None:
            return narrow
        return self._replace(full, rows, columns, row_id)

    def _replace(
        self, full: str, rows: str, columns: tuple[str, ...], row_id: tuple[str, ...]
    ) -> int:
        """Delete the rows being replaced, then insert: DuckDB's ``ON CONFLICT DO UPDATE`` that
        sets every column of a wide table is pathologically slow (measured on TPC-DI's Prospect,
        15 k rows of 28 columns: 20 s against 0.1 s for the delete and insert), and the two
        statements run in the merge's transaction, so the result is the same."""
        cols = ", ".join(q(c) for c in columns)
        match = " AND ".join(f"f.{q(c)} = u.{q(c)}" for c in row_id)
        self.execute(f"DELETE FROM {full} AS f USING {rows} u WHERE {match}")
        return self.execute(f"INSERT INTO {full} ({cols}) SELECT {cols} FROM {rows} u")

    def _merge_unique(
        self, full: str, delta: str, columns: tuple[str, ...], row_id: tuple[str, ...]
    ) -> int:
        """The delta, its own newest, as :meth:`_upsert` takes any rows: DuckDB's ``UPDATE ...
        FROM`` of wide rows is slower than delete and insert (TPC-DI's DimCustomer, 1,000 of
        6,600 rows of 36 columns: ~1.2 s against ~12 ms); only a narrow one pays."""
        return self._upsert(full, delta, columns, row_id)

    def _merge_narrow(
        self, full: str, rows_in: str, columns: tuple[str, ...], row_id: tuple[str, ...]
    ) -> int | None:
        """A merge of ``rows_in`` (upserts, one per row id: a delta table, or the newest rows
        of one as a subquery) that writes only what changed, for a delta of at least
        :data:`NARROW_MIN_ROWS` rows and :data:`NARROW_MIN_SHARE` of the full table's
        (TPC-DI's daily Prospect: every prospect again, almost all of them with only their
        record date and batch id new). ``None`` (nothing done) when it does not pay; else the
        delta's rows.

        0. A subquery that passes the size checks is materialized first (a temporary table):
           the steps below read it four times.
        1. Mark each delta row (a temporary table): -1 when the full table has no row of its
           row id, else a bit per non-key column that differs (:func:`_mark_bits`; a float's
           sign alone too, so -0.0 replaces 0.0).
        2. ``narrow`` = the most common non-zero mark. Go on only when it names at most
           :data:`NARROW_MAX_COLUMNS` columns and at least half of the delta's rows are
           unchanged (mark 0) or differ within it; else drop the marks and return ``None``.
        3. ``UPDATE`` the rows that differ within ``narrow``: only those columns.
        4. Delete and insert (:meth:`_replace`) the new rows and those that differ elsewhere.
           Unchanged rows are not written.
        5. Drop the temporary tables; note that the table was updated in place, so that
           :meth:`_after_merge` checkpoints (DuckDB keeps updated rows aside until a
           checkpoint; an earlier trial without it saw a later Prospect merge at SF 100 take
           46.8 s, and FactWatches' 3.9-5.0 s against 1.6 s).

        All of it in the merge's transaction: the result is the rows :meth:`_replace` leaves."""
        others = [c for c in columns if c not in row_id]
        if not others or len(others) > 61:
            return None
        counted, held = self.fetch(
            f"SELECT (SELECT count(*) FROM {rows_in} c), count(*) FROM {full}"
        )[0]
        rows = int(counted)
        if rows < NARROW_MIN_ROWS or rows < NARROW_MIN_SHARE * int(held):
            return None
        delta = rows_in
        if rows_in.startswith("("):
            # 0.
            delta = NARROW_ROWS
            self.execute(f"DROP TABLE IF EXISTS {delta}")
            self.execute(f"CREATE TEMPORARY TABLE {delta} AS SELECT * FROM {rows_in} c")
        self.execute(f"DROP TABLE IF EXISTS {NARROW_MARKS}")
        merged = self._merge_marked(full, delta, rows, others, row_id)
        # 5. (after an error the merge's rollback drops them: they were made in its transaction,
        # and a DROP on DuckDB's aborted transaction would only hide that error)
        self.execute(f"DROP TABLE IF EXISTS {NARROW_MARKS}")
        if delta == NARROW_ROWS:
            self.execute(f"DROP TABLE IF EXISTS {delta}")
        return merged

    def _merge_marked(
        self, full: str, delta: str, rows: int, others: list[str], row_id: tuple[str, ...]
    ) -> int | None:
        """Steps 1-4 of :meth:`_merge_narrow` (``others``: the columns not in ``row_id``)."""
        columns = (*row_id, *others)
        floats = self._float_columns(full)
        ids = [q(c) for c in row_id]
        match = " AND ".join(f"f.{c} = u.{c}" for c in ids)
        bits = _mark_bits(others, floats)
        marks = NARROW_MARKS
        # 1.
        self.execute(
            f"CREATE TEMPORARY TABLE {marks} AS SELECT {', '.join(f'u.{c}' for c in ids)}, "
            f"CASE WHEN f.{ids[0]} IS NULL THEN -1::BIGINT ELSE {bits} END AS _mark "
            f"FROM {delta} u LEFT JOIN {full} f ON {match}"
        )
        # 2.
        counts = dict(self.fetch(f"SELECT _mark, count(*) FROM {marks} GROUP BY 1"))
        changed = [(n, m) for m, n in counts.items() if m > 0]
        narrow = max(changed)[1] & ~SIGN_ONLY if changed else 0
        within = sum(n for m, n in counts.items() if m >= 0 and (m & ~narrow) == 0)
        width = bin(narrow).count("1")
        logger.debug(
            "narrow merge table=%s rows=%s new=%s unchanged=%s within=%s columns=%s",
            full,
            rows,
            counts.get(-1, 0),
            counts.get(0, 0),
            within,
            [c for i, c in enumerate(others) if narrow >> i & 1],
        )
        if width > NARROW_MAX_COLUMNS or 2 * within < rows:
            return None
        by_id = " AND ".join(f"m.{c} = u.{c}" for c in ids)
        # 3.
        if narrow:
            sets = ", ".join(f"{q(c)} = u.{q(c)}" for i, c in enumerate(others) if narrow >> i & 1)
            self.execute(
                f"UPDATE {full} AS f SET {sets} FROM (SELECT u.* FROM {delta} u "
                f"JOIN {marks} m ON {by_id} WHERE m._mark > 0 "
                f"AND (m._mark & {~narrow}) = 0) u WHERE {match}"
            )
            self._updated_in_place = True
        self.narrow_merges += 1
        # 4.
        elsewhere = (
            f"(SELECT u.* FROM {delta} u JOIN {marks} m ON {by_id} "
            f"WHERE m._mark < 0 OR (m._mark & {~narrow}) <> 0)"
        )
        if rows - within:
            self._replace(full, elsewhere, columns, row_id)
        return rows

    def _float_columns(self, full: str) -> frozenset[str]:
        """The columns of ``full`` stored as floating point."""
        found = self.fetch(f"SELECT column_name, column_type FROM (DESCRIBE {full})")
        return frozenset(name for name, kind in found if kind in ("DOUBLE", "FLOAT", "REAL"))

    def _after_merge(self, emptied: set[str]) -> None:
        """Checkpoint after a merge that updated rows in place (:meth:`_merge_narrow`), or once
        the write-ahead log holds :data:`CHECKPOINT_WAL_BYTES` (loads leave it to the merges,
        see ``_connect``); skipped while another transaction is open (an update in place is
        then checkpointed after the next merge). A checkpoint after every merge cost more than
        the merge itself on small ones (TPC-DI's daily feed at SF 3: 0.1-0.7 s against ~0.3 s,
        its CPU taken from the other warehouse's merge); the row groups several merges touch
        are rewritten once."""
        wal = wal_path(self.path)
        if not wal.exists() or wal.stat().st_size == 0:
            self._updated_in_place = False  # nothing waits: DuckDB checkpointed on its own
            return
        if self._updated_in_place or wal.stat().st_size >= CHECKPOINT_WAL_BYTES:
            with self._lock:
                self._driver.reclaim([])
            self._updated_in_place = self._updated_in_place and (
                wal.exists() and wal.stat().st_size > 0
            )

    def mark_busy(self, seconds: float) -> None:
        """Count the warehouse as busy (a reader is working) for the next ``seconds``."""
        self._busy_until = max(self._busy_until, time.monotonic() + seconds)

    def busy(self) -> bool:
        return time.monotonic() < self._busy_until

    def reader(
        self, ensure_layout: Callable[[], object], options: ReaderOptions
    ) -> WarehouseReader:
        from migration.reader import DuckDBReader

        return DuckDBReader(self.layout, ensure_layout, self._driver, self.mark_busy)


class DuckDBWarehouseFile(BaseWarehouseFile):
    """The file of a :class:`DuckDBTarget` (see :class:`~migration.targets.base.BaseWarehouseFile`).
    The relations a layout has are those its DDL creates (:func:`layout_ddl`)."""

    def __init__(self, target: DuckDBTarget, driver: DuckDBDriver) -> None:
        self.target = target
        self.driver = driver
        self.path = target.path

    def copy_to(self, dest: Path, hook: Hook | None = None) -> None:
        self.driver.copy_file(dest, hook)

    def target_on(self, path: Path) -> DuckDBTarget:
        t = self.target
        return DuckDBTarget(t.layout, path, memory_limit=t.memory_limit, threads=t.threads)

    def _foreign(self) -> list[tuple[str, str, str | None]]:
        """``(kind, schema, name)`` of each foreign relation (``name`` None for a schema)."""
        layout = self.target.layout
        ours = {(str(t.schema), t.name) for t in layout.metadata.tables.values()}
        found = self.target.fetch(
            "WITH here AS (SELECT current_database() AS db) "
            "SELECT 'MACRO', schema_name, function_name FROM duckdb_functions(), here "
            "WHERE database_name = db AND NOT internal AND function_type = 'macro' "
            "UNION ALL SELECT 'MACRO TABLE', schema_name, function_name FROM duckdb_functions(), "
            "here WHERE database_name = db AND NOT internal AND function_type = 'table_macro' "
            "UNION ALL SELECT 'VIEW', schema_name, view_name FROM duckdb_views(), here "
            "WHERE database_name = db AND NOT internal AND NOT temporary "
            "UNION ALL SELECT 'TABLE', schema_name, table_name FROM duckdb_tables(), here "
            "WHERE database_name = db AND NOT internal AND NOT temporary "
            "UNION ALL SELECT 'SEQUENCE', schema_name, sequence_name FROM duckdb_sequences(), "
            "here WHERE database_name = db AND NOT temporary "
            "UNION ALL SELECT 'TYPE', schema_name, type_name FROM duckdb_types(), here "
            "WHERE database_name = db AND NOT internal "
            "UNION ALL SELECT 'SCHEMA', schema_name, NULL FROM duckdb_schemas(), here "
            "WHERE database_name = db AND NOT internal"
        )
        schemas = set(layout.schemas)
        out: list[tuple[str, str, str | None]] = []
        for kind, schema, name in found:
            if kind == "SCHEMA":
                if schema not in schemas:
                    out.append((kind, str(schema), None))
            elif kind != "TABLE" or (schema, name) not in ours:
                out.append((str(kind), str(schema), str(name)))
        return out

    def foreign_relations(self) -> list[str]:
        with self.target.guard():
            return [s if n is None else f"{s}.{n}" for _, s, n in self._foreign()]

    def drop_foreign_relations(self) -> list[str]:
        """Objects inside a foreign schema go with it (``CASCADE``); the others one by one,
        macros and views before the tables they may read."""
        foreign = self._foreign()
        gone = {s for kind, s, _ in foreign if kind == "SCHEMA"}
        order = ("MACRO", "MACRO TABLE", "VIEW", "TABLE", "SEQUENCE", "TYPE")
        dropped: list[str] = []
        for kind in order:
            for k, schema, name in foreign:
                if k == kind and schema not in gone and name is not None:
                    self.target.execute(f"DROP {kind} {q(schema)}.{q(name)}")
                    dropped.append(f"{schema}.{name}")
        for schema in sorted(gone):
            self.target.execute(f"DROP SCHEMA {q(schema)} CASCADE")
            dropped.append(schema)
        return dropped

    def replace_with(self, source: Path) -> None:
        self.target.close()
        replace_file(self.path, source, self.target.name)
