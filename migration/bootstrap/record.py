"""What a target keeps about its own bootstrap, in its ``streamdi_migration`` schema.

The target is the truth about what it holds (as its ledger is for loads), so its bootstrap is
recorded there, in the same transactions as the rows:

* ``streamdi_migration.bootstraps``: one row per stream, written when the bootstrap starts
  (``copying``), updated by its last transaction (``loaded``: through which staging batch, from
  which peer, from which batch on its sinks are complete, how many rows) and once a migration round
  brought the target to staging's watermark (``caught_up``). A target without this row was never
  bootstrapped.
* ``streamdi_migration.bootstrap_tables``: one row per relation copied, committed with the
  relation's rows (the resume marker): the staging watermark it was copied at, the first batch its
  rows cover, how many, from where.

:func:`read_record` reads both; the writers run inside a transaction the caller opened
(:meth:`~migration.targets.base.BaseTarget.begin`), except :func:`start_record` and
:func:`mark_caught_up`, which are transactions of their own. :func:`finish_record`, the last
transaction's, also writes the ledger row and the ``merges`` row that make the target
bootstrapped (both paths of :mod:`migration.bootstrap.copier` end with it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

import pyarrow as pa

from migration.targets.base import BaseTarget

#: ``copying`` (relations being copied), ``loaded`` (its ledger says through the snapshot; later
#: batches load as for any target), ``caught_up`` (a round brought it to staging's watermark: the
#: query service may read it).
BootstrapState = Literal["copying", "loaded", "caught_up"]


def now() -> datetime:
    """UTC, naive (the warehouses' ``TIMESTAMP`` columns)."""
    return datetime.now(UTC).replace(tzinfo=None)


@dataclass(frozen=True)
class RelationMark:
    """One relation a bootstrap copied: its rows are those of staging's snapshot at ``through``
    (a sink's: from batch ``first_batch`` on), ``rows`` of them; a sink's rows up to batch
    ``peer_watermark`` came from target ``peer``, the others from staging."""

    relation: str
    through: int
    first_batch: int
    rows: int
    peer: str | None
    peer_watermark: int | None
    ms: float
    note: str | None = None
    """What the rows lack, if anything (a seeded staging's working set)."""

    @property
    def source(self) -> str:
        """Where the rows came from, for people."""
        return source_text(self.peer, self.peer_watermark, self.note)


def source_text(peer: str | None, peer_watermark: int | None, note: str | None = None) -> str:
    """Where a relation's rows came from, for people: staging, or a peer up to its watermark
    and staging after it; and what they lack."""
    text = "staging" if peer is None else f"{peer} through batch {peer_watermark}, then staging"
    return text if note is None else f"{text} ({note})"


@dataclass(frozen=True)
class BootstrapRecord:
    """A target's bootstrap as the target records it (see the module docstring)."""

    state: BootstrapState
    through: int | None
    peer: str | None
    peer_watermark: int | None
    sinks_from: int
    rows: int
    started_at: datetime
    loaded_at: datetime | None = None
    caught_up_at: datetime | None = None
    relations: dict[str, RelationMark] = field(default_factory=dict)


def read_record(target: BaseTarget) -> BootstrapRecord | None:
    """The target's bootstrap record (None: never bootstrapped), read in the open transaction or
    in short ones of its own."""
    layout = target.layout
    with target.guard():
        head = target.fetch(
            "SELECT state, through_batch, peer, peer_watermark, sinks_from, rows, started_at, "
            f"loaded_at, caught_up_at FROM {layout.bootstraps_name} WHERE stream = ?",
            [layout.stream],
        )
        if not head:
            return None
        marks = target.fetch(
            "SELECT relation, through_batch, first_batch, rows, peer, peer_watermark, ms, note "
            f"FROM {layout.bootstrap_tables_name} WHERE stream = ?",
            [layout.stream],
        )
    state, through, peer, peer_wm, sinks_from, rows, started, loaded, caught = head[0]
    relations = {
        str(r): RelationMark(
            str(r),
            int(t),
            int(f),
            int(n),
            None if p is None else str(p),
            None if pw is None else int(pw),
            float(ms),
            None if note is None else str(note),
        )
        for r, t, f, n, p, pw, ms, note in marks
    }
    return BootstrapRecord(
        state=state,
        through=None if through is None else int(through),
        peer=None if peer is None else str(peer),
        peer_watermark=None if peer_wm is None else int(peer_wm),
        sinks_from=int(sinks_from),
        rows=int(rows),
        started_at=started,
        loaded_at=loaded,
        caught_up_at=caught,
        relations=relations,
    )


def start_record(target: BaseTarget) -> None:
    """Write the record's row (``copying``) in a transaction of its own, unless there is one."""
    layout = target.layout
    with target.guard():
        target.begin()
        try:
            found = target.fetch(
                f"SELECT count(*) FROM {layout.bootstraps_name} WHERE stream = ?",
                [layout.stream],
            )
            if not int(found[0][0]):
                insert_record(target, now())
            target.commit()
        except BaseException:
            target.rollback()
            raise


def insert_record(target: BaseTarget, started_at: datetime) -> None:
    """Insert the record's row (``copying``, started at ``started_at``) in the open
    transaction."""
    layout = target.layout
    target.bulk_insert(
        layout.bootstraps_name,
        pa.table(
            {
                "stream": pa.array([layout.stream], pa.string()),
                "state": pa.array(["copying"], pa.string()),
                "sinks_from": pa.array([1], pa.int64()),
                "rows": pa.array([0], pa.int64()),
                "started_at": pa.array([started_at], pa.timestamp("us")),
            }
        ),
    )


def mark_relation(target: BaseTarget, mark: RelationMark) -> None:
    """Insert ``mark`` (in the open transaction that copied the relation). One row, so a plain
    ``INSERT ... VALUES``: a bulk path (an Arrow table registered with DuckDB, a COPY) costs a few
    milliseconds per call, which a bootstrap of many small relations pays once per relation."""
    layout = target.layout
    target.execute(
        f"INSERT INTO {layout.bootstrap_tables_name} (stream, relation, through_batch, "
        "first_batch, rows, peer, peer_watermark, ms, note, copied_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            layout.stream,
            mark.relation,
            mark.through,
            mark.first_batch,
            mark.rows,
            mark.peer,
            mark.peer_watermark,
            mark.ms,
            mark.note,
            now(),
        ],
    )


def finish_record(
    target: BaseTarget,
    *,
    through: int,
    merge_id: int,
    peer: str | None,
    peer_watermark: int | None,
    sinks_from: int,
    rows: int,
) -> None:
    """In the bootstrap's last transaction: the ledger row for ``through`` (``via='bootstrap'``:
    the next load starts after it), a ``merges`` row ``merge_id`` through it (the full tables
    hold every row up to it: no read is pinned below it), and the record says ``loaded``
    through it (``rows`` in all)."""
    layout = target.layout
    stamp = now()
    target.bulk_insert(
        layout.ledger_name,
        pa.table(
            {
                "stream": pa.array([layout.stream], pa.string()),
                "batch_id": pa.array([through], pa.int64()),
                "rows": pa.array([rows], pa.int64()),
                "via": pa.array(["bootstrap"], pa.string()),
                "loaded_at": pa.array([stamp], pa.timestamp("us")),
            }
        ),
    )
    target.insert_merge(merge_id, through, rows, 0.0, stamp)
    target.execute(
        f"UPDATE {layout.bootstraps_name} SET state = 'loaded', through_batch = ?, peer = ?, "
        "peer_watermark = ?, sinks_from = ?, rows = ?, loaded_at = ? WHERE stream = ?",
        [through, peer, peer_watermark, sinks_from, rows, stamp, layout.stream],
    )


def mark_caught_up(target: BaseTarget) -> None:
    """The record says ``caught_up`` (a transaction of its own)."""
    layout = target.layout
    with target.guard():
        target.begin()
        try:
            target.execute(
                f"UPDATE {layout.bootstraps_name} SET state = 'caught_up', caught_up_at = ? "
                "WHERE stream = ? AND state = 'loaded'",
                [now(), layout.stream],
            )
            target.commit()
        except BaseException:
            target.rollback()
            raise
