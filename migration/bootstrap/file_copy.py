"""A bootstrap's fast path: a DuckDB target made from a copy of a DuckDB peer's file.

A DuckDB target bootstrapped from a DuckDB peer of the same layout need not move its rows through
Arrow: the peer's file, copied whole, holds every relation at the peer's watermark ``P`` in
DuckDB's own pages (TPC-DI at SF=3: 96 MB copied and synced in ~0.1 s, where inserting its 3.3 M
rows takes ~0.9 s). What makes the copy a bootstrap is what is rewritten in it before it becomes
the target's file — on a side file nothing else reads (``<target file>.bootstrap``) — and the
swap at the end. :class:`FileCopy` runs it for :class:`~migration.bootstrap.copier.Bootstrap`
after that one's step 1 (the target's ledger holds no batch, its record says ``copying``), and
returns None, the target unchanged, whenever the file path cannot be taken; the bootstrap then
copies rows. In order:

1. Check the target: it is one file (:meth:`~migration.targets.base.BaseTarget.whole_file`);
   remove what an earlier run left beside it (the side file and its log; whichever path runs
   now); its file holds nothing but the layout's relations and no other stream's rows (it is
   replaced).
2. Choose the peer: another target that is one file with the same layout (stream, schema,
   fingerprint), reachable, not being bootstrapped, holding every batch staging released
   (watermark ``>= R``), with complete sinks (``sinks_from`` 1: with a peer missing sink rows
   the rows path may find a better one); the highest watermark among those.
3. Copy the peer's file to the side file, checkpointed and held still (under the file's writer
   lock: the peer's loads and merges in this process wait for the copy, its reads go on) and
   synced. A file that did not hold still (:class:`~warehouse.exceptions.WarehouseFileBusy`)
   leaves it to the rows path.
4. Open staging's snapshot at its watermark ``S``, after the copy: ``S >= P`` (a peer holds only
   batches staging committed).
5. Rewrite the copy, through a target of its own, in one transaction:

   a. the copy is the truth about the peer (it may have moved since step 2): its ledger's
      watermark ``P >= R``, its record (if it was bootstrapped itself) loaded, with sinks from
      batch 1; ``P <= S``, else the staging file was replaced
      (:class:`~migration.exceptions.TargetMismatch`, as on the rows path);
   b. drop what the layout does not have (TPC-DI's static tables, another dataflow's relations);
      delete the other streams' rows of the migration schema; empty the rejects (as on the rows
      path: a bootstrapped target holds the rejects of the batches after ``S``); delete the
      peer's ledger, merges, layout history, bootstrap record and marks; record the layout's
      version as a new target's open does;
   c. count each relation's rows at ``P`` (its mark: through ``P``, from the peer);
   d. bring every relation from ``P`` to ``S``: staging's changes of ``(P, S]`` into its delta
      table, beside the peer's deltas not merged yet; merge them (the newest delta of a row id
      wins, a sink appends: exact for both); empty the delta tables; delete the sink rows
      retracted through ``S`` (:func:`~migration.bootstrap.catch_up.catch_up`, as the rows path
      ends). The full tables now hold what the rows path's would;
   e. insert the marks, the ledger row for ``S`` (``via='bootstrap'``), a ``merges`` row through
      ``S``, the record (``loaded`` through ``S``, the peer and ``P``, sinks from batch 1:
      :func:`~migration.bootstrap.record.finish_record`, as the rows path ends);

   COMMIT; CHECKPOINT; close (DuckDB checkpoints then, and leaves no log).
6. Swap: with the migrator's own object of the target closed and its rounds held off
   (``quiet``), close the target and make the side file its file
   (:meth:`~migration.targets.base.BaseWarehouseFile.replace_with`: an atomic rename; new
   connections of the process refused meanwhile). Refused, the target unchanged, while something
   in the process still holds the target's file open: then the rows path runs.
7. Close the snapshot; the caller notes the acknowledgement ``S`` (the ledger's ``S`` is where
   the next load starts).

A crash (``kill -9``) anywhere before step 6's rename leaves the target as it was (its ledger
holds no batch, its record says ``copying``): the next run starts over, by either path, and its
step 1 removes the side file. After the rename the target is bootstrapped (``loaded`` through
``S``): the next round reads ``S`` from its ledger and loads ``S + 1`` on, as after the rows
path's last COMMIT. Between step 6 removing the target's log and the rename, the target is its
last checkpoint, a state it was in (an empty layout, at worst without its ``copying`` record: the
released batches make the next round bootstrap it again). Staging keeps every batch for the
target throughout (its release is held back before the bootstrap starts).

The query service meanwhile: the peer's reads go on (a checkpoint holds DuckDB's lock for a
moment); the target is read only once it caught up, as on the rows path, and while its file is
swapped a connection to it is refused as unavailable.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import dataclass
from pathlib import Path

from migration.bootstrap.catch_up import catch_up
from migration.bootstrap.pieces import PIECE_BYTES
from migration.bootstrap.progress import BootstrapProgress
from migration.bootstrap.record import (
    BootstrapRecord,
    RelationMark,
    finish_record,
    insert_record,
    mark_relation,
    read_record,
    source_text,
)
from migration.exceptions import BootstrapStopped, MigrationError, TargetMismatch
from migration.schema import LEDGER_SCHEMA
from migration.targets.base import BaseTarget, BaseWarehouseFile
from staging.handoff import StagedDeltas
from staging.layout import q
from staging.snapshot import StagingSnapshot, open_snapshot
from warehouse.exceptions import WarehouseError

logger = logging.getLogger(__name__)

#: The migration schema's tables with a ``stream`` column (step 5b).
STREAM_TABLES = ("ledger", "merges", "streams", "layouts", "bootstraps", "bootstrap_tables")


@dataclass
class FilePeer:
    """The peer chosen in step 2: its name, an open twin (its connection copies the file) and
    its watermark when chosen."""

    name: str
    target: BaseTarget
    file: BaseWarehouseFile
    watermark: int


class FileRefused(Exception):
    """The file path cannot be taken (``reason`` says why); the target is unchanged. Internal to
    this module: :meth:`FileCopy.run` returns None."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


def side_file(path: Path) -> Path:
    """Where the copy is rewritten before it becomes the target's file ``path``."""
    return path.with_name(path.name + ".bootstrap")


def _remove(path: Path) -> None:
    for leftover in (path, path.with_name(path.name + ".wal")):
        leftover.unlink(missing_ok=True)


class FileCopy:
    """Steps 1-7 of the module docstring for ``target`` (opened, its ``record`` written:
    ``copying``), from one of ``peers``. ``step(phase)`` is the bootstrap's fault-injection
    hook: ``bootstrap-file-copy`` (part of the peer's file copied), ``bootstrap-file-rewrite``
    (the copy rewritten, its transaction not committed), ``bootstrap-file-swap`` (just before
    the rename); ``stopped()`` says whether the bootstrap was asked to stop; ``quiet()`` is a
    context under which nothing else of the process uses the target (the migrator's)."""

    def __init__(
        self,
        target: BaseTarget,
        staged: StagedDeltas,
        peers: Mapping[str, BaseTarget],
        progress: BootstrapProgress,
        record: BootstrapRecord,
        *,
        step: Callable[[str], None],
        stopped: Callable[[], bool],
        quiet: Callable[[], AbstractContextManager[object]] | None = None,
        piece_bytes: int = PIECE_BYTES,
    ) -> None:
        self.target = target
        self.staged = staged
        self.peers = peers
        self.progress = progress
        self.record = record
        self.step = step
        self.stopped = stopped
        self.quiet = quiet
        self.piece_bytes = piece_bytes

    def _check_stop(self) -> None:
        if self.stopped():
            raise BootstrapStopped(self.progress.target)

    def run(self) -> int | None:
        """The protocol; ``S`` (the target's ledger holds it, its file replaced), or None when
        the file path was not taken (the reason is logged) and the target is unchanged (it may
        have been closed: open it again)."""
        name = self.progress.target
        started = time.perf_counter()
        try:
            with ExitStack() as stack:
                # 1.
                whole = self.target.whole_file()
                if whole is None:
                    raise FileRefused("the target is not one file")
                side = side_file(whole.path)
                _remove(side)  # (step 3's, early: left by a crash, it goes whichever path runs)
                self._check_target(whole)
                # 2.
                released = self.staged.released_through()
                peer = self._choose_peer(released)
                stack.callback(peer.target.close)
                # 3.
                stack.callback(_remove, side)  # gone, unless step 6 moved it in
                self._check_stop()
                copied = time.perf_counter()
                peer.file.copy_to(side, lambda _: self.step("bootstrap-file-copy"))
                copy_s = time.perf_counter() - copied
                peer.target.close()
                self._check_stop()
                # 4.
                snap = stack.enter_context(open_snapshot(self.staged.store))
                top = snap.watermark
                self.progress.through = top
                # 5.
                rewriting = time.perf_counter()
                watermark = self._rewrite(whole, side, peer, snap, released)
                rewrite_s = time.perf_counter() - rewriting
                self._check_stop()
                # 6.
                self.step("bootstrap-file-swap")
                swapping = time.perf_counter()
                with self.quiet() if self.quiet is not None else nullcontext():
                    whole.replace_with(side)
                swap_s = time.perf_counter() - swapping
            # 7. (the snapshot closed with the stack)
        except FileRefused as refused:
            logger.info("bootstrap by file copy not taken target=%s: %s", name, refused)
            return None
        except WarehouseError as exc:
            logger.warning("bootstrap by file copy not taken target=%s: %s", name, exc)
            return None
        self.progress.state = "loaded"
        self.progress.seconds = time.perf_counter() - started
        logger.info(
            "bootstrap by file copy target=%s peer=%s peer_watermark=%s through=%s "
            "copy_s=%.3f rewrite_s=%.3f swap_s=%.3f seconds=%.3f",
            name,
            peer.name,
            watermark,
            top,
            copy_s,
            rewrite_s,
            swap_s,
            self.progress.seconds,
        )
        return top

    # -- 1. ----------------------------------------------------------------------------------------

    def _check_target(self, whole: BaseWarehouseFile) -> None:
        target = self.target
        try:
            foreign = whole.foreign_relations()
            others = self._other_streams(target)
        except WarehouseError as exc:
            raise FileRefused(f"its file could not be read: {exc}") from exc
        if foreign or others:
            raise FileRefused(
                f"its file holds more than this dataflow's layout ({foreign[:5]}, other streams "
                f"{others}): it is not replaced"
            )

    @staticmethod
    def _other_streams(target: BaseTarget) -> list[str]:
        layout = target.layout
        with target.guard():
            rows = target.fetch(
                f"SELECT stream FROM {layout.streams_name} WHERE stream <> ?", [layout.stream]
            )
        return [str(r[0]) for r in rows]

    # -- 2. ----------------------------------------------------------------------------------------

    def _choose_peer(self, released: int) -> FilePeer:
        mine = self.target.layout
        best: FilePeer | None = None
        for name, candidate in self.peers.items():
            if name == self.progress.target or candidate.whole_file() is None:
                continue
            theirs = candidate.layout
            if (theirs.stream, theirs.schema, theirs.fingerprint) != (
                mine.stream,
                mine.schema,
                mine.fingerprint,
            ):
                continue
            copy = candidate.twin()
            try:
                copy.open()
                record = read_record(copy)
                watermark = copy.watermark()
            except (WarehouseError, MigrationError) as exc:
                logger.info("bootstrap file peer unavailable peer=%s: %s", name, exc)
                copy.close()
                continue
            whole = copy.whole_file()
            usable = (
                whole is not None
                and watermark >= released
                and (record is None or (record.state != "copying" and record.sinks_from == 1))
            )
            if not usable or whole is None or (best is not None and best.watermark >= watermark):
                copy.close()
                continue
            if best is not None:
                best.target.close()
            best = FilePeer(name, copy, whole, watermark)
        if best is None:
            raise FileRefused("no peer is a file of the same layout holding every released batch")
        return best

    # -- 5. ----------------------------------------------------------------------------------------

    def _rewrite(
        self,
        whole: BaseWarehouseFile,
        side: Path,
        peer: FilePeer,
        snap: StagingSnapshot,
        released: int,
    ) -> int:
        """Step 5 on the side file; the peer's watermark ``P`` in the copy."""
        copy = whole.target_on(side)
        try:
            try:
                copy.open()
            except TargetMismatch as exc:  # not this layout after all: the target is unchanged
                raise FileRefused(f"the copy is not this layout: {exc}") from exc
            with copy.guard():
                copy.begin()
                try:
                    watermark = self._checked(copy, peer.name, snap, released)
                    self._clear(copy)
                    marks = self._marks(copy, peer.name, watermark)
                    since = dict.fromkeys(copy.layout.tables, watermark)
                    caught_up = catch_up(copy, snap, since, self.piece_bytes, self._check_stop)
                    self._finish(copy, peer.name, watermark, snap.watermark, marks, caught_up)
                    self.step("bootstrap-file-rewrite")
                    copy.commit()
                except BaseException:
                    copy.rollback()
                    raise
                copy.driver.reclaim([])  # CHECKPOINT: the file is whole without its log
        except WarehouseError as exc:
            raise FileRefused(f"the copy could not be rewritten: {exc}") from exc
        finally:
            copy.close()
        return watermark

    def _checked(self, copy: BaseTarget, peer: str, snap: StagingSnapshot, released: int) -> int:
        """5a."""
        watermark = copy.watermark()
        record = read_record(copy)
        if watermark < released:
            raise FileRefused(f"the copy holds batches up to {watermark} only, {released} released")
        if record is not None and (record.state == "copying" or record.sinks_from != 1):
            raise FileRefused(
                f"the peer's own bootstrap says {record.state}, sinks from "
                f"batch {record.sinks_from}"
            )
        if watermark > snap.watermark:
            raise TargetMismatch(
                self.progress.target,
                f"its bootstrap's peer holds batches up to {watermark}, above staging's "
                f"{snap.watermark}: the staging file was replaced; bootstrap into a new schema "
                "or database",
            )
        self.progress.peer = peer
        self.progress.peer_watermark = watermark
        self.progress.sinks_from = 1
        return watermark

    def _clear(self, copy: BaseTarget) -> None:
        """5b."""
        layout = copy.layout
        whole = copy.whole_file()
        assert whole is not None
        dropped = whole.drop_foreign_relations()
        if dropped:
            logger.info(
                "bootstrap file copy target=%s dropped %s relations the layout does not have: %s",
                self.progress.target,
                len(dropped),
                ", ".join(dropped[:20]),
            )
        for table in STREAM_TABLES:
            copy.execute(
                f"DELETE FROM {q(LEDGER_SCHEMA)}.{q(table)} WHERE stream <> ?", [layout.stream]
            )
        for table in STREAM_TABLES:
            if table != "streams":
                copy.execute(f"DELETE FROM {q(LEDGER_SCHEMA)}.{q(table)}")
        copy.execute(f"DELETE FROM {layout.dead_letters_name}")
        copy.execute(f"DELETE FROM {layout.aborts_name}")
        if layout.version:
            from migration.evolution import record_target_version

            record_target_version(copy, layout.version, 0)

    def _marks(self, copy: BaseTarget, peer: str, watermark: int) -> dict[str, RelationMark]:
        """5c: each relation's rows at ``P``: a sink's full and delta rows, a state table's full
        rows overlaid with its deltas not merged yet (counted so only where it has some)."""
        layout = copy.layout
        names = list(layout.tables)
        if not names:
            return {}
        sizes = " UNION ALL ".join(
            f"SELECT {i} AS t, (SELECT count(*) FROM {layout.full_name(n)}) AS full_rows, "
            f"(SELECT count(*) FROM {layout.delta_name(n)}) AS delta_rows"
            for i, n in enumerate(names)
        )
        rows: dict[str, int] = {}
        for t, full, delta in copy.fetch(sizes):
            name = names[int(t)]
            if layout.tables[name].kind == "state" and int(delta) > 0:
                current = f"SELECT count(*) FROM ({layout.current_sql(name)}) c"
                rows[name] = int(copy.fetch(current)[0][0])
            else:
                rows[name] = int(full) + int(delta)
        marks: dict[str, RelationMark] = {}
        for name in names:
            marks[name] = RelationMark(name, watermark, 1, rows[name], peer, watermark, 0.0)
            self.progress.update(
                name, rows=rows[name], through=watermark, source=source_text(peer, watermark)
            )
        return marks

    def _finish(
        self,
        copy: BaseTarget,
        peer: str,
        watermark: int,
        top: int,
        marks: dict[str, RelationMark],
        caught_up: int,
    ) -> None:
        """5e."""
        for mark in marks.values():
            mark_relation(copy, mark)
        rows = sum(m.rows for m in marks.values()) + caught_up
        # the peer's record and merges were deleted (5b): this target's own, as after the rows path
        insert_record(copy, self.record.started_at)
        finish_record(
            copy,
            through=top,
            merge_id=1,
            peer=peer,
            peer_watermark=watermark,
            sinks_from=1,
            rows=rows,
        )
        for name in marks:
            self.progress.update(name, done=True)
        logger.info(
            "bootstrap file copy rewritten target=%s through=%s rows=%s caught_up_rows=%s",
            self.progress.target,
            top,
            rows,
            caught_up,
        )
