"""The recently committed changes, kept in memory so migration need not read them back.

The staging store builds every batch's delta-log rows and output rows as Arrow before its commit
transaction (:meth:`~staging.store.StagingStore.commit`, step 2). Once the transaction has
committed, those very tables are what a range read of staging would return, so the store hands
them to a :class:`RecentCommits` cache; :meth:`~staging.handoff.StagedDeltas.read` serves a batch
range from it when it holds every batch of the range, and reads the file otherwise (after a
restart, for a range older than the cache, or when the cache is disabled).

Contract:

* Only committed batches enter (the store adds them after its COMMIT), in batch order; a range is
  served only when the cache holds it without a gap, so an answer is never partial.
* Entries leave oldest first once the cache holds more than ``limit_bytes`` of Arrow data, and when
  staging releases their batches (:meth:`forget_through`).
* The tables served are cast to the staging tables' Arrow schemas (``schemas``), so a reader cannot
  tell a cached answer from one read from the file.

Thread-safe: the committer adds while the migration thread reads.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc


@dataclass(frozen=True)
class RecentCommit:
    """The delta-log rows per state table and output rows per sink of batches ``first..last``
    (each row with its ``batch_id``), as committed."""

    first: int
    last: int
    tables: Mapping[str, pa.Table]
    outputs: Mapping[str, pa.Table]

    @property
    def nbytes(self) -> int:
        return int(
            sum(t.nbytes for t in self.tables.values())
            + sum(t.nbytes for t in self.outputs.values())
        )


#: ``schema_of(kind, name)``: the Arrow schema a staging read of that relation returns
#: (kind is ``"table"`` for a delta log, ``"sink"`` for outputs).
SchemaOf = Callable[[str, str], pa.Schema]


class RecentCommits:
    """See the module docstring."""

    def __init__(self, limit_bytes: int, schema_of: SchemaOf) -> None:
        self.limit_bytes = limit_bytes
        self._schema_of = schema_of
        self._entries: deque[RecentCommit] = deque()
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        return self._bytes

    def add(self, commit: RecentCommit) -> None:
        """Remember a committed batch group (the batch after the newest one held, or the first
        after a gap, which then drops everything older so the cache stays contiguous)."""
        if self.limit_bytes <= 0:
            return
        size = commit.nbytes
        with self._lock:
            if self._entries and self._entries[-1].last + 1 != commit.first:
                self._entries.clear()
                self._bytes = 0
            self._entries.append(commit)
            self._bytes += size
            while self._bytes > self.limit_bytes and self._entries:
                self._bytes -= self._entries.popleft().nbytes

    def forget_through(self, batch_id: int) -> None:
        """Drop the entries whose batches are all at or below ``batch_id`` (released)."""
        with self._lock:
            while self._entries and self._entries[0].last <= batch_id:
                self._bytes -= self._entries.popleft().nbytes

    def entries(self) -> list[RecentCommit]:
        """The commits held, oldest first (a copy)."""
        with self._lock:
            return list(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def changes(
        self, after: int, upto: int, tables: list[str], sinks: list[str]
    ) -> tuple[dict[str, pa.Table], dict[str, pa.Table]] | None:
        """The delta-log rows per table and output rows per sink of batches ``(after, upto]``,
        or ``None`` unless the cache holds every one of those batches."""
        with self._lock:
            if not self._entries or upto <= after:
                return None
            if self._entries[0].first > after + 1 or self._entries[-1].last < upto:
                return None
            chosen = [e for e in self._entries if e.last > after and e.first <= upto]
        cut = (after, upto) if chosen[0].first <= after or chosen[-1].last > upto else None
        out_tables = {
            name: self._assemble([e.tables.get(name) for e in chosen], ("table", name), cut)
            for name in tables
        }
        out_sinks = {
            sink: self._assemble([e.outputs.get(sink) for e in chosen], ("sink", sink), cut)
            for sink in sinks
        }
        return out_tables, out_sinks

    def _assemble(
        self, parts: list[pa.Table | None], relation: tuple[str, str], cut: tuple[int, int] | None
    ) -> pa.Table:
        schema = self._schema_of(*relation)
        aligned = [_aligned(p, schema) for p in parts if p is not None and p.num_rows]
        if not aligned:
            return schema.empty_table()
        table = pa.concat_tables(aligned)
        if cut is not None:
            after, upto = cut
            ids = table.column("batch_id")
            table = table.filter(pc.and_(pc.greater(ids, after), pc.less_equal(ids, upto)))
        return table


def _aligned(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with exactly ``schema``'s columns, in order (missing ones as nulls)."""
    if table.schema.equals(schema):
        return table
    n = table.num_rows
    arrays = [
        table.column(f.name).cast(f.type) if f.name in table.column_names else pa.nulls(n, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(arrays, schema=schema)
