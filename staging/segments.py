"""The staged delta logs and outputs as Parquet segment files beside the staging file.

A batch commit appends every state change to a delta log and every output row to its sink; these
rows are written once and only read (by migration and the query service) until they are released.
Kept in DuckDB tables, each row was written three times on the commit path: the insert, DuckDB's
WAL at COMMIT, and the checkpoint that folds the WAL into the file (which blocks commits while it
runs). As segment files each row is written once, compressed, before the commit's transaction:

The protocol, per commit (:meth:`staging.store.StagingStore.commit` runs it):

1. Write, per delta log and per sink the commit has rows for, one Parquet file (LZ4, no
   dictionary, statistics on ``batch_id``) under a temporary name; fsync it; rename it to
   ``<relation>+<quoted name>+<first>-<last>.L<level>.<token>.parquet`` in the one flat folder
   ``<staging file>.segments``; fsync the folder.
2. In the commit's transaction, register the files in ``streamdi.segments``.
3. COMMIT: the rows become visible with the rest of the batch.

The views ``delta_log.<table>`` and ``outputs.<sink>`` are defined when the writer opens the
store and never change: each reads its relation's files by glob and keeps the rows of registered
files above ``released_through``, both looked up in the reader's own transaction. So a reader
sees the segments of the batches it sees, no more, and a commit, a release or a merge changes
rows of the registry and of ``streamdi.meta``, not the views. An empty *anchor* file per
relation fixes its schema and keeps the glob from ever matching nothing.

* A file that no registration names is an orphan (a commit that failed or was killed before its
  COMMIT, a merge that lost its race, a temporary file): the writer deletes it at open.
* Release (:mod:`staging.handoff`) unregisters the segments whose every batch is released; the
  views hide the released batches of a segment that straddles the release point.
* Merging keeps the file count low: once a relation has :data:`FANOUT` segments of one level, the
  oldest of them are merged into one of the next level (never beyond :data:`MAX_MERGED_ROWS`
  rows) by a background thread, off the commit path, then swapped in one transaction.
* A file that left the registry, or never entered it (a failed commit's, a lost merge's), is
  deleted only when no reader holds a pin
  (:meth:`SegmentFolder.pin`): a view lists its relation's files when a query binds, so a file
  unlinked between that list and its read would fail the query. Readers pin before their query
  or transaction begins.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import stat
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from staging import state_file
from staging.layout import DELTA, insert_values, literal, qualified
from streamdi.files import fsync_path

logger = logging.getLogger(__name__)

#: A relation with this many segments of one level has the oldest of them merged into one.
FANOUT = 32
#: A merge never makes a segment of more rows than this (bigger segments simply stay).
MAX_MERGED_ROWS = 8_000_000
SUFFIX = ".parquet"
ANCHOR = "anchor"


@dataclass(frozen=True)
class Segment:
    """One registered segment file: the rows of ``relation.name`` (``delta_log`` or ``outputs``)
    of batches ``first_batch..last_batch``; ``level`` 0 for a commit's own file, one more than its
    inputs' for a merged one."""

    relation: str
    name: str
    file: str
    first_batch: int
    last_batch: int
    rows: int
    level: int


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with exactly ``schema``'s columns, in order and type (missing ones as nulls)."""
    n = table.num_rows
    arrays = [
        table.column(f.name).cast(f.type) if f.name in table.column_names else pa.nulls(n, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


class SegmentFolder:
    """The segment files of one staging file (``<staging file>.segments``, one flat folder:
    see :meth:`prefix`): writing, merging, pinning, retiring and the clean-up of orphans.
    Thread-safe."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._lock = threading.Lock()
        self._pins = 0
        self._retired: list[Path] = []

    @staticmethod
    def prefix(relation: str, name: str) -> str:
        """How every file of ``relation.name`` starts: ``<relation>+<name>+``, the name quoted
        (so neither a ``+`` nor a glob character of a sink's name reaches the file system). One
        flat folder: a commit fsyncs one directory, whatever the relations it wrote."""
        return f"{relation}+{quote(name, safe='')}+"

    def path(self, segment: Segment) -> Path:
        return self.folder / segment.file

    def pattern(self, relation: str, name: str) -> str:
        """The glob a view reads: every Parquet file of the relation (only registered ones
        count; :class:`SegmentCatalog` filters by name)."""
        return str(self.folder / f"{self.prefix(relation, name)}*{SUFFIX}")

    # -- writing -----------------------------------------------------------------------------------

    def ensure_anchor(self, relation: str, name: str, schema: pa.Schema) -> None:
        """Write the empty file that fixes ``relation.name``'s schema (and keeps its glob from
        ever matching nothing), unless it is there with that schema."""
        path = self.folder / f"{self.prefix(relation, name)}{ANCHOR}{SUFFIX}"
        if path.is_file():
            try:
                if pq.read_schema(path).remove_metadata().equals(schema.remove_metadata()):
                    return
            except (OSError, pa.ArrowException):
                logger.warning("rewriting the unreadable anchor %s", path)
        self._write(schema.empty_table(), path)
        self.sync()

    def write(
        self, relation: str, name: str, rows: pa.Table, first: int, last: int, level: int = 0
    ) -> Segment:
        """Write ``rows`` (batches ``first..last``) as a new segment file: written under a
        temporary name, fsynced, then renamed (a glob never sees half a file). The folder is
        fsynced by :meth:`sync`, once per commit. Until a transaction registers it, the file is
        an orphan every view ignores."""
        file = self.prefix(relation, name) + _file_name(first, last, level)
        self._write(rows, self.folder / file)
        return Segment(relation, name, file, first, last, rows.num_rows, level)

    def _write(self, rows: pa.Table, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        pq.write_table(
            rows, tmp, compression="lz4", use_dictionary=False, write_statistics=["batch_id"]
        )
        fsync_path(tmp)
        tmp.replace(path)

    def merge(self, segments: list[Segment]) -> Segment:
        """Write one new segment file holding the rows of ``segments`` (consecutive, oldest
        first), a row group at a time, fsynced with its folder; not registered yet."""
        first, last = segments[0], segments[-1]
        level = max(s.level for s in segments) + 1
        file = self.prefix(first.relation, first.name) + _file_name(
            first.first_batch, last.last_batch, level
        )
        path = self.folder / file
        tmp = path.with_name(file + ".tmp")
        schema = pq.read_schema(self.path(first))
        rows = 0
        with pq.ParquetWriter(
            tmp, schema, compression="lz4", use_dictionary=False, write_statistics=["batch_id"]
        ) as writer:
            for segment in segments:
                source = pq.ParquetFile(self.path(segment))
                for group in range(source.num_row_groups):
                    table = source.read_row_group(group)
                    rows += table.num_rows
                    writer.write_table(table)
        fsync_path(tmp)
        tmp.replace(path)
        self.sync()
        return Segment(
            first.relation, first.name, file, first.first_batch, last.last_batch, rows, level
        )

    def sync(self) -> None:
        """fsync the folder, so the names of the files written in it are durable."""
        fsync_path(self.folder)

    def discard(self, segments: Iterable[Segment]) -> None:
        """Delete files no transaction registered (a failed commit's, a lost merge's) as soon
        as no reader holds a pin, like a retired file: the file was in the folder under its
        final name, so a reader's glob may have listed it (and would fail to open it, even
        though the registry hides its rows)."""
        self.retire(segments)

    def remove_orphans(self, registered: Iterable[Segment]) -> int:
        """Delete every file of the folder that is neither registered nor an anchor: a commit
        or merge that did not commit, a retired file a crash kept, a temporary file. Done by the
        writer when it opens the store, before anything reads. Returns how many."""
        if not self.folder.is_dir():
            return 0
        keep = {self.path(s) for s in registered}
        removed = 0
        for path in self.folder.iterdir():
            if path in keep or path.name.endswith(f"+{ANCHOR}{SUFFIX}") or not path.is_file():
                continue
            path.unlink()
            removed += 1
        if removed:
            logger.info("removed %s unregistered segment files from %s", removed, self.folder)
        return removed

    # -- pins and retirement -----------------------------------------------------------------------

    def pin(self) -> None:
        """Keep every file on disk until :meth:`unpin`: a view's glob lists the relation's files
        when a query binds, and a file deleted between that and its read fails the query.
        Take it before the query (or transaction) begins."""
        with self._lock:
            self._pins += 1

    def unpin(self) -> None:
        with self._lock:
            self._pins -= 1
            self._sweep()

    @contextlib.contextmanager
    def pinned(self) -> Iterator[None]:
        self.pin()
        try:
            yield
        finally:
            self.unpin()

    def retire(self, segments: Iterable[Segment]) -> None:
        """``segments`` left the registry in a committed transaction: delete their files as
        soon as no reader holds a pin."""
        with self._lock:
            self._retired.extend(self.path(s) for s in segments)
            self._sweep()

    def _sweep(self) -> None:
        """Under the lock (so no pin can start meanwhile): delete the retired files when no
        reader holds a pin."""
        if self._pins > 0 or not self._retired:
            return
        for path in self._retired:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        self._retired = []

    @property
    def waiting(self) -> int:
        """Retired files still kept for a pinned reader."""
        with self._lock:
            return len(self._retired)


def staging_disk_bytes(path: Path) -> int:
    """Bytes the staging file at ``path`` takes on disk: the file, its WAL, the state file
    (:mod:`staging.state_file`) and its WAL, and its segment folder. A file deleted while it is
    counted (a merge retiring segments, a checkpoint of the WAL) counts as gone: ``GET /status``
    asks this while the pipeline runs."""
    files = state_file.staging_files(path)
    for root, _, names in os.walk(f"{path}.segments"):  # a folder gone meanwhile is skipped
        files += (Path(root, name) for name in names)
    return sum(_file_bytes(p) for p in files)


def _file_bytes(path: Path) -> int:
    """The size of the regular file ``path``; 0 when it is not one, or no longer exists."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return 0
    return st.st_size if stat.S_ISREG(st.st_mode) else 0


def _row(s: Segment) -> tuple[object, ...]:
    """``s`` as a row of ``streamdi.segments``."""
    return (s.relation, s.name, s.file, s.first_batch, s.last_batch, s.rows, s.level)


def _file_name(first: int, last: int, level: int) -> str:
    return f"{first:012d}-{last:012d}.L{level}.{secrets.token_hex(4)}{SUFFIX}"


def merge_candidates(segments: list[Segment]) -> list[Segment] | None:
    """The segments of one relation to merge next (oldest first), or None: the oldest
    :data:`FANOUT` of the lowest level that has that many, when together they stay within
    :data:`MAX_MERGED_ROWS`."""
    by_level: dict[int, list[Segment]] = {}
    for s in sorted(segments, key=lambda s: s.first_batch):
        by_level.setdefault(s.level, []).append(s)
    for level in sorted(by_level):
        group = by_level[level][:FANOUT]
        if len(group) == FANOUT and sum(s.rows for s in group) <= MAX_MERGED_ROWS:
            return group
    return None


Key = tuple[str, str]


class SegmentCatalog:
    """The registered segments (``streamdi.segments``) of one staging file, mirrored in memory,
    and the views over them.

    A view reads its relation's folder by glob and keeps the rows of registered files only, of
    batches above ``released_through`` (both looked up in the reader's own transaction), so a
    commit, a release or a merge changes what the views show by changing rows of the registry
    and of ``streamdi.meta``, not the views. A change runs in two halves: the ``stage_*`` half
    inside the caller's transaction (under the store's write lock) returns the new mirror
    entries; :meth:`install` applies them once that transaction committed."""

    def __init__(
        self, folder: SegmentFolder, schemas: dict[Key, pa.Schema], registry: str, meta: str
    ) -> None:
        self.folder = folder
        self.schemas = schemas
        self.registry = registry
        self.meta = meta
        self.segments: dict[Key, tuple[Segment, ...]] = {key: () for key in schemas}

    def load(self, con: duckdb.DuckDBPyConnection) -> None:
        rows = con.execute(
            f"SELECT relation, name, file, first_batch, last_batch, rows, level "
            f"FROM {self.registry} ORDER BY first_batch"
        ).fetchall()
        found: dict[Key, list[Segment]] = {key: [] for key in self.schemas}
        for relation, name, file, first, last, count, level in rows:
            segment = Segment(relation, name, file, int(first), int(last), int(count), int(level))
            found.setdefault((relation, name), []).append(segment)
        self.segments = {key: tuple(found[key]) for key in found}

    def all(self) -> list[Segment]:
        return [s for segments in self.segments.values() for s in segments]

    def missing(self) -> list[str]:
        """Registered files that are not in the folder (a damaged staging folder)."""
        return sorted(str(p) for s in self.all() if not (p := self.folder.path(s)).is_file())

    def registered_sql(self, key: Key) -> str:
        """A query of every row of the relation's registered files, released batches included
        (the state views read their deltas after the last fold this way: a release may have
        hidden some of them from ``delta_log.<table>``, never unregistered them)."""
        relation, name = key
        files = literal(self.folder.pattern(relation, name))
        return (
            f"SELECT * EXCLUDE (filename) FROM read_parquet({files}, filename = true) "
            f"WHERE parse_filename(filename) IN (SELECT file FROM {self.registry} "
            f"WHERE relation = {literal(relation)} AND name = {literal(name)})"
        )

    def view_sql(self, key: Key) -> str:
        return (
            f"CREATE OR REPLACE VIEW {qualified(*key)} AS {self.registered_sql(key)} "
            f"AND batch_id > (SELECT coalesce(max(CAST(value AS BIGINT)), 0) FROM {self.meta} "
            "WHERE key = 'released_through')"
        )

    def define_views(self, con: duckdb.DuckDBPyConnection) -> None:
        """(Re)define every view (at open: the folder may have moved), writing anchors."""
        for key, schema in self.schemas.items():
            self.folder.ensure_anchor(key[0], key[1], schema)
            con.execute(self.view_sql(key))

    def stage_add(
        self, con: duckdb.DuckDBPyConnection, added: list[Segment]
    ) -> dict[Key, tuple[Segment, ...]]:
        """Register ``added`` in the caller's transaction."""
        insert_values(con, self.registry, [_row(s) for s in added])
        changes: dict[Key, tuple[Segment, ...]] = {}
        for s in added:
            key = (s.relation, s.name)
            changes[key] = (*changes.get(key, self.segments[key]), s)
        return changes

    def releasable(self, through: int, deltas_through: int) -> list[Segment]:
        """The segments a release through ``through`` unregisters: every batch of theirs at or
        below ``through``, and for a delta log's also at or below ``deltas_through`` (the last
        folded batch: the state views still read the deltas after it)."""
        return [
            s
            for s in self.all()
            if s.last_batch <= (min(through, deltas_through) if s.relation == DELTA else through)
        ]

    def stage_release(
        self, con: duckdb.DuckDBPyConnection, through: int, deltas_through: int
    ) -> tuple[dict[Key, tuple[Segment, ...]], list[Segment]]:
        """Unregister the :meth:`releasable` segments in the caller's transaction (which also
        moves ``released_through``: the views hide the released batches of a segment that
        straddles it, or of a delta log's segment kept for the state views). Returns the new
        mirror and the segments that left it."""
        gone = self.releasable(through, deltas_through)
        if gone:
            files = [s.file for s in gone]
            con.execute(
                f"DELETE FROM {self.registry} WHERE file IN ({', '.join(['?'] * len(files))})",
                files,
            )
        left = {s.file for s in gone}
        changes = {
            key: tuple(s for s in segments if s.file not in left)
            for key, segments in self.segments.items()
        }
        return changes, gone

    def stage_swap(
        self, con: duckdb.DuckDBPyConnection, inputs: list[Segment], merged: Segment
    ) -> dict[Key, tuple[Segment, ...]] | None:
        """Replace ``inputs`` by ``merged`` in the registry, in the caller's transaction; None
        (nothing done) when an input is no longer registered (released meanwhile)."""
        key = (merged.relation, merged.name)
        current = self.segments[key]
        names = {s.file for s in inputs}
        if not names <= {s.file for s in current}:
            return None
        params: list[object] = [merged.relation, merged.name, *names]
        con.execute(
            f"DELETE FROM {self.registry} WHERE relation = ? AND name = ? "
            f"AND file IN ({', '.join(['?'] * len(names))})",
            params,
        )
        insert_values(con, self.registry, [_row(merged)])
        kept = [s for s in current if s.file not in names]
        return {key: tuple(sorted([*kept, merged], key=lambda s: s.first_batch))}

    def install(self, changes: dict[Key, tuple[Segment, ...]]) -> None:
        """Apply staged changes after their transaction committed."""
        self.segments.update(changes)


class SegmentMerger:
    """A thread that calls ``merge_once`` (one merge; True when it merged something) until it
    has nothing to merge, then waits for :meth:`wake` or ``interval_s``. It holds
    ``merge_once``'s owner weakly (a store nobody closed still goes away, and the thread with
    it). An error is logged and the thread goes on: merging only keeps the file count down (the
    store's housekeeping step also folds state, :mod:`staging.folding`; a failed fold leaves
    its deltas waiting for the next)."""

    def __init__(self, merge_once: Callable[[], bool], *, interval_s: float = 1.0) -> None:
        self._merge_once = weakref.WeakMethod(merge_once)
        self._interval_s = interval_s
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="segment-merger", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        # below the committer and the engine: merging may wait, a commit should not
        with contextlib.suppress(AttributeError, OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
        while not self._stop.is_set():
            self._wake.wait(self._interval_s)
            self._wake.clear()
            try:
                while not self._stop.is_set() and self._merge_step():
                    pass
            except Exception as exc:  # merging is housekeeping: never fatal
                logger.warning("segment merge failed: %s", exc)
            if self._merge_once() is None:
                return

    def _merge_step(self) -> bool:
        """One merge, holding the store only for its length (a local kept across the loop would
        keep a store nobody closed alive, and this thread with it)."""
        merge_once = self._merge_once()
        return merge_once is not None and merge_once()
