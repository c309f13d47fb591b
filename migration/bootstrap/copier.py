"""The bootstrap of one target: a consistent snapshot copied in bulk, then the ledger says so.

A target added to ``MIGRATION__TARGETS`` after staging released batches cannot be loaded batch by
batch: the deltas of the released batches are gone. :meth:`Bootstrap.run` copies every full table
into it instead, at one staging watermark ``S`` (:mod:`migration.bootstrap.sources`: state tables
from staging's snapshot, sinks from a peer target at its watermark ``P`` plus staging's outputs
of ``(P, S]``; when staging was seeded, state tables from the peer too), and then writes one
ledger row for ``S`` (``via='bootstrap'``), so the normal loads continue with batch ``S + 1``.

Before it starts, staging holds back its release for the target (its acknowledgement set back to
0: :meth:`staging.handoff.StagedDeltas.retract`); nothing above ``released_through`` ``R`` leaves
staging until the target acknowledges ``S``. The protocol, in this order:

1. Check the target: its ledger holds no batch (else it is a
   :class:`~migration.exceptions.TargetMismatch`: it holds some batches but not the released
   ones). Without a bootstrap record every full and delta table must be empty (the bootstrap never
   deletes rows it did not write); write the record (``copying``) in a transaction of its own.
   Relations marked in the record were copied by an earlier run that stopped: they stay.
2. Open the peer's snapshot for the sinks not copied yet, and for the state tables when staging
   was seeded (it holds the engine's working set only; the warehouses hold the rows the seed
   left out): the best configured target that holds every released batch
   (:func:`~migration.bootstrap.sources.open_peer`), at its watermark ``P``. Without a peer,
   sinks get staging's outputs above ``R`` only: their rows of batches ``1..R`` are not
   available, and the record says so (``sinks_from = R + 1``); a seeded staging's state tables
   give their working set, and the relation's mark says so.
3. Open staging's snapshot (one read transaction, segment files pinned) at its watermark ``S``;
   ``S >= P``, and ``S`` is at least every ``through`` already marked.
4. For each relation not marked (state tables, then sinks), one target transaction: BEGIN (the
   stream's lock); delete what its full table holds (nothing, unless a bug); bulk-load its rows in
   pieces (:mod:`migration.bootstrap.pieces`: COPY for PostgreSQL, Arrow for DuckDB; the pieces
   are read ahead on a thread, across relations: the next piece, of this relation or the next
   one, is read while one loads or commits): a state table's rows of the staging snapshot (mark
   ``through = S``), or of the peer when staging was seeded (``through = P``: step 5 brings it
   to ``S``); a sink's rows of the peer (batches ``<= P``) and of staging ``(P, S]`` (``through
   = S``); insert its mark; COMMIT.
5. The last transaction: BEGIN; empty the delta tables; for the relations marked at ``S_t < S``
   (by an earlier run, or copied from the peer), bulk-load staging's changes of ``(S_t, S]`` into
   their delta tables, merge them into the full tables
   (:meth:`~migration.targets.base.BaseTarget.merge_table`: exact for state tables and sinks
   alike, rows of batches ``<= S_t`` being in the copy) and empty them again, delete the sink rows
   retracted through ``S`` (:func:`~migration.bootstrap.catch_up.catch_up`); insert the ledger
   row for ``S`` and a ``merges`` row through ``S`` (the full tables hold everything up to
   ``S``: no read is pinned below it); the record says ``loaded`` through ``S``
   (:func:`~migration.bootstrap.record.finish_record`); COMMIT.
6. Close the snapshots. The caller notes the acknowledgement ``S``, and migration goes on as for
   any target: batches ``(S, W]`` are loaded from staging, each once (the ledger's ``S`` is where
   the next load starts). Once a round brought the target to staging's watermark its record says
   ``caught_up`` (:mod:`migration.bootstrap.runner`), and only then does the query service read it.

**The file path.** When the target is a DuckDB file and another configured target is a DuckDB
file of the same layout holding every released batch, steps 2-6 are replaced by a copy of that
peer's file, rewritten for the target and swapped in (:mod:`migration.bootstrap.file_copy`, its
own numbered protocol), with the same outcome: the same rows, the ledger row for ``S``, the record
``loaded``. Whenever it cannot be taken (no such peer, the target's file holds anything else, the
peer's file did not hold still, something still holds the target's file open) the target is
unchanged and the steps below run: the *rows path*. ``method='rows'`` always takes it.

A crash (or ``kill -9``) in step 4 rolls back the relation in hand; the relations marked before it
stay, and the next run resumes with the others at a new snapshot, and brings the marked ones from
their ``S_t`` to the new ``S`` in step 5 (staging still holds those batches: the release waits for
the target). A crash in step 5 rolls it back whole. Until step 5 commits the ledger holds no
batch, the record says ``copying``, and the target is neither loaded nor read: it never looks
caught up before it is. :meth:`Bootstrap.stop` asks the copy to stop between two pieces; the
relation in hand rolls back.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass
from typing import Literal

import pyarrow as pa

from migration.bootstrap.catch_up import catch_up
from migration.bootstrap.file_copy import FileCopy
from migration.bootstrap.pieces import PIECE_BYTES, Prefetch, relation_pieces
from migration.bootstrap.progress import BootstrapProgress
from migration.bootstrap.record import (
    BootstrapRecord,
    RelationMark,
    finish_record,
    mark_relation,
    read_record,
    source_text,
    start_record,
)
from migration.bootstrap.sources import PeerSnapshot, open_peer
from migration.exceptions import BootstrapStopped, TargetMismatch
from migration.targets.base import BaseTarget
from staging.handoff import StagedDeltas
from staging.snapshot import StagingSnapshot, open_snapshot

logger = logging.getLogger(__name__)

#: The note of a state table copied from a seeded staging without a peer.
WORKING_SET = "the engine's working set only: staging was seeded, no peer held the table"

#: ``hook(phase)`` at fault-injection points: ``bootstrap-copy`` (a relation's first piece is in,
#: its transaction open), ``bootstrap-table`` (after a relation's COMMIT), ``bootstrap-ledger``
#: (the last transaction holds the ledger row, not committed), ``bootstrapped`` (after it; both
#: paths); the file path's ``bootstrap-file-copy``, ``bootstrap-file-rewrite`` and
#: ``bootstrap-file-swap`` (:class:`~migration.bootstrap.file_copy.FileCopy`).
BootstrapHook = Callable[[str], None]

#: ``auto``: the file path when it can be taken, else the rows path; ``rows``: the rows path.
BootstrapMethod = Literal["auto", "rows"]


@dataclass(frozen=True)
class RelationPlan:
    """One relation step 4 copies: functions opening its sources in order (called on the reading
    thread when the read reaches it), and what its mark will say (``through``, ``first`` batch,
    the ``peer`` its rows came from, a ``note`` on what they lack)."""

    name: str
    opens: list[Callable[[], Iterator[pa.RecordBatch]]]
    through: int
    first: int
    peer: PeerSnapshot | None
    note: str | None

    def batches(self) -> Iterator[pa.RecordBatch]:
        """The relation's record batches, each source opened when the one before is read out
        (and closed when the read stops early)."""
        for open_batches in self.opens:
            source = open_batches()
            try:
                yield from source
            finally:
                close = getattr(source, "close", None)
                if close is not None:
                    close()


class Bootstrap:
    """The bootstrap of ``target`` (opened and closed here: give it a twin,
    :func:`~migration.bootstrap.sources.twin`), reading staging through ``staged`` and the sinks
    from one of ``peers``; see the module docstring. ``progress`` is updated as it goes.
    ``method`` chooses the paths; ``quiet()``, a context under which nothing else in the process
    uses the target's warehouse (the migrator's own object of it closed, its rounds held off),
    lets the file path swap the target's file (without it, ``target`` must be the process's only
    user of the file)."""

    def __init__(
        self,
        target: BaseTarget,
        staged: StagedDeltas,
        peers: Mapping[str, BaseTarget],
        progress: BootstrapProgress,
        *,
        piece_bytes: int = PIECE_BYTES,
        hook: BootstrapHook | None = None,
        method: BootstrapMethod = "auto",
        quiet: Callable[[], AbstractContextManager[object]] | None = None,
    ) -> None:
        self.target = target
        self.staged = staged
        self.peers = dict(peers)
        self.progress = progress
        self.piece_bytes = piece_bytes
        self.hook = hook
        self.method = method
        self.quiet = quiet
        self._stop = threading.Event()

    def stop(self) -> None:
        """Ask the copy to stop between two pieces (:class:`BootstrapStopped` is raised)."""
        self._stop.set()

    def _step(self, phase: str) -> None:
        if self.hook is not None:
            self.hook(phase)

    def run(self) -> int:
        """Run the protocol; returns ``S``, the watermark the target's ledger now holds."""
        target = self.target
        layout = target.layout
        progress = self.progress
        started = time.perf_counter()
        target.open()
        try:
            # 1.
            record = self._check()
            if self.method == "auto":
                top = self._file_copy(record)
                if top is not None:
                    self._step("bootstrapped")
                    return top
                target.open()  # (the file path may have closed it)
                record = self._check()
                progress.peer = progress.peer_watermark = progress.through = None
                progress.sinks_from = 1
            progress.method = "rows"
            for name in layout.tables:
                mark = record.relations.get(name)
                progress.update(
                    name,
                    rows=0 if mark is None else mark.rows,
                    through=None if mark is None else mark.through,
                    done=mark is not None,
                    source="" if mark is None else mark.source,
                )
            with ExitStack() as stack:
                # 2.
                left = [n for n in layout.tables if n not in record.relations]
                sinks = [n for n in left if layout.tables[n].kind == "output"]
                released = self.staged.released_through()
                seeded = self.staged.store.seeded
                peer = None
                if (sinks and released > 0) or (seeded and len(sinks) < len(left)):
                    others = {n: t for n, t in self.peers.items() if n != progress.target}
                    peer = open_peer(others, released)
                    if peer is not None:
                        stack.callback(peer.close)
                        progress.peer, progress.peer_watermark = peer.name, peer.watermark
                        progress.sinks_from = peer.sinks_from
                    else:
                        progress.sinks_from = released + 1
                        logger.warning(
                            "bootstrap without a peer target=%s: no other target holds the sink "
                            "rows of batches 1..%s (released from staging): its sinks %s start "
                            "at batch %s%s",
                            progress.target,
                            released,
                            sinks,
                            released + 1,
                            "; staging was seeded: its state tables give the engine's working "
                            "set only"
                            if seeded
                            else "",
                        )
                # 3.
                snap = stack.enter_context(open_snapshot(self.staged.store))
                top = snap.watermark
                behind = [m for m in record.relations.values() if m.through > top]
                if behind or (peer is not None and peer.watermark > top):
                    raise TargetMismatch(
                        progress.target,
                        f"its bootstrap was copied at a staging watermark above staging's {top}: "
                        "the staging file was replaced; bootstrap into a new schema or database",
                    )
                progress.through = top
                logger.info(
                    "bootstrap target=%s snapshot=%s released=%s peer=%s peer_watermark=%s",
                    progress.target,
                    top,
                    snap.released_through(),
                    progress.peer,
                    progress.peer_watermark,
                )
                # 4.
                marks = dict(record.relations)
                plans = [self._plan(n, snap, peer, top) for n in layout.tables if n not in marks]
                for mark in self._copy_all(plans):
                    marks[mark.relation] = mark
                # 5.
                self._finish(snap, top, marks)
            # 6.
            progress.state = "loaded"
            progress.seconds = time.perf_counter() - started
            return top
        finally:
            target.close()

    def _file_copy(self, record: BootstrapRecord) -> int | None:
        """The file path (:mod:`migration.bootstrap.file_copy`): ``S``, or None when not taken."""
        self.progress.method = "file"
        return FileCopy(
            self.target,
            self.staged,
            self.peers,
            self.progress,
            record,
            step=self._step,
            stopped=self._stop.is_set,
            quiet=self.quiet,
            piece_bytes=self.piece_bytes,
        ).run()

    # -- 1. ----------------------------------------------------------------------------------------

    def _check(self) -> BootstrapRecord:
        target = self.target
        layout = target.layout
        name = self.progress.target
        held = target.watermark()
        if held != 0:
            raise TargetMismatch(
                name,
                f"it holds batches up to {held} but not the batches staging released before "
                "them; bootstrap into a new schema (MIGRATION__SCHEMA_NAME) or database",
            )
        record = read_record(target)
        if record is not None and record.state != "copying":
            raise TargetMismatch(
                name, f"its bootstrap record says {record.state} but its ledger holds no batch"
            )
        if record is None:
            counts = " UNION ALL ".join(
                f"SELECT {i} AS t, (SELECT count(*) FROM {layout.full_name(n)}) + "
                f"(SELECT count(*) FROM {layout.delta_name(n)}) AS n"
                for i, n in enumerate(layout.tables)
            )
            with target.guard():
                rows = target.fetch(f"SELECT t, n FROM ({counts}) c WHERE n > 0")
            if rows:
                names = [list(layout.tables)[int(t)] for t, _ in rows]
                raise TargetMismatch(
                    name,
                    f"its tables {names} hold rows but its ledger holds no batch: a bootstrap "
                    "never deletes rows it did not write; empty them, or use a new schema",
                )
            start_record(target)
            record = read_record(target)
            assert record is not None
        return record

    # -- 4. ----------------------------------------------------------------------------------------

    def _plan(
        self, name: str, snap: StagingSnapshot, peer: PeerSnapshot | None, top: int
    ) -> RelationPlan:
        """Where relation ``name``'s rows come from and what its mark will say (no read yet)."""
        table = self.target.layout.tables[name]
        columns = list(table.columns)
        released = snap.released_through()
        seeded = self.staged.store.seeded
        opens: list[Callable[[], Iterator[pa.RecordBatch]]]
        through, first, used, note = top, 1, peer, None
        if table.kind == "state" and (peer is None or not seeded):
            opens, used = [lambda: snap.table_batches(name)], None
            if seeded:
                note = WORKING_SET
        elif table.kind == "state":
            assert peer is not None
            opens, through = [lambda: peer.table_batches(name)], peer.watermark
        elif peer is not None:
            after = peer.watermark
            opens = [
                lambda: peer.sink_batches(name),
                lambda: snap.output_batches(name, after=after, upto=top, columns=columns),
            ]
            first = peer.sinks_from
        else:
            opens = [lambda: snap.output_batches(name, after=released, upto=top, columns=columns)]
            first = released + 1
        return RelationPlan(name, opens, through, first, used, note)

    def _copy_all(self, plans: list[RelationPlan]) -> Iterator[RelationMark]:
        """Step 4 for each of ``plans`` in order, one transaction each, the rows read ahead
        across relations (:func:`~migration.bootstrap.pieces.relation_pieces`): yields each
        relation's mark once its transaction committed."""
        sources = ((plan.name, plan.batches) for plan in plans)
        with Prefetch(relation_pieces(sources, self.piece_bytes)) as ahead:
            read = iter(ahead)
            for plan in plans:
                yield self._copy(plan, read)

    def _copy(
        self, plan: RelationPlan, read: Iterator[tuple[str, pa.Table | None]]
    ) -> RelationMark:
        """One relation's transaction: its pieces are taken from ``read`` up to its end."""
        target = self.target
        layout = target.layout
        name, used = plan.name, plan.peer
        columns = list(layout.tables[name].columns)
        source = source_text(
            None if used is None else used.name, None if used is None else used.watermark, plan.note
        )
        self.progress.update(name, rows=0, through=plan.through, source=source)
        started = time.perf_counter()
        rows = 0
        with target.guard():
            target.begin()
            try:
                target.execute(f"DELETE FROM {layout.full_name(name)}")
                for relation, piece in read:
                    if relation != name:  # pragma: no cover - relation_pieces keeps the order
                        raise RuntimeError(f"bootstrap read {relation} while copying {name}")
                    if piece is None:
                        break
                    if self._stop.is_set():
                        raise BootstrapStopped(self.progress.target)
                    target.bulk_insert(layout.full_name(name), piece.select(columns))
                    rows += piece.num_rows
                    self.progress.add_rows(name, piece.num_rows)
                    if rows == piece.num_rows:
                        self._step("bootstrap-copy")
                mark = RelationMark(
                    name,
                    plan.through,
                    plan.first,
                    rows,
                    None if used is None else used.name,
                    None if used is None else used.watermark,
                    (time.perf_counter() - started) * 1000,
                    plan.note,
                )
                mark_relation(target, mark)
                target.commit()
            except BaseException:
                target.rollback()
                raise
        self.progress.update(name, done=True)
        logger.info(
            "bootstrap copied target=%s relation=%s rows=%s through=%s source=%r ms=%.0f",
            self.progress.target,
            name,
            rows,
            plan.through,
            source,
            mark.ms,
        )
        self._step("bootstrap-table")
        return mark

    # -- 5. ----------------------------------------------------------------------------------------

    def _finish(self, snap: StagingSnapshot, top: int, marks: dict[str, RelationMark]) -> None:
        target = self.target
        layout = target.layout
        with target.guard():
            target.begin()
            try:
                for name in layout.tables:
                    target.execute(f"DELETE FROM {layout.delta_name(name)}")
                since = {name: mark.through for name, mark in marks.items()}
                caught_up = catch_up(target, snap, since, self.piece_bytes)
                rows = sum(m.rows for m in marks.values()) + caught_up
                last = target.fetch(
                    f"SELECT coalesce(max(merge_id), 0) FROM {layout.merges_name} WHERE stream = ?",
                    [layout.stream],
                )
                sink_marks = [
                    m for m in marks.values() if layout.tables[m.relation].kind != "state"
                ]
                progress = self.progress
                progress.peer = ",".join(sorted({m.peer for m in marks.values() if m.peer})) or None
                progress.peer_watermark = min(
                    (m.peer_watermark for m in marks.values() if m.peer_watermark is not None),
                    default=None,
                )
                progress.sinks_from = max((m.first_batch for m in sink_marks), default=1)
                finish_record(
                    target,
                    through=top,
                    merge_id=int(last[0][0]) + 1,
                    peer=progress.peer,
                    peer_watermark=progress.peer_watermark,
                    sinks_from=progress.sinks_from,
                    rows=rows,
                )
                self._step("bootstrap-ledger")
                target.commit()
            except BaseException:
                target.rollback()
                raise
        logger.info(
            "bootstrap loaded target=%s through=%s rows=%s caught_up_rows=%s",
            self.progress.target,
            top,
            rows,
            caught_up,
        )
        self._step("bootstrapped")
