"""Fault injection for the crash tests and the fault campaign, kept out of the pipeline's own code.

The pipeline calls a :class:`PipelineFaults` at the dangerous moments of its commit protocols;
the production default does nothing. ``streamdi run`` and ``streamdi serve`` take a hidden
``--crash-at POINT:N`` and install :class:`CrashAt`, which kills the process with SIGKILL (a
real ``kill -9``: nothing flushed, nothing closed) the moment it reaches the named point:

* the engine and staging (``N``: the batch id):

  - ``poll``: before the engine runs batch N (it was polled and assembled, nothing executed);
  - ``execute``: 5 ms into the engine's run of batch N;
  - ``commit-state``, ``commit-outputs``, ``commit-progress``, ``commit-ledger``,
    ``commit-commit``: inside the staging transaction of the group holding batch N, before
    that step of :meth:`staging.store.StagingStore.commit` (steps 4 to 8; ``commit`` is
    ``commit-ledger``);
  - ``committed``: right after that group committed, before migration and observers hear of it;

* the collector (:mod:`ingest.collector`; ``N``: the logical batch id):

  - ``collect-sent``: batch N's records were handed to the producer, nothing flushed;
  - ``collect-flushed``: Kafka acknowledged them, the checkpoint is not written;
  - ``collect-checkpointed``: the checkpoint is written, the source (an HTTP push) not told;

* a staging checkpoint (:mod:`staging.checkpoints`; ``N``: the N-th checkpoint this process
  takes): ``checkpoint-tables`` (the tables written into the ``.tmp`` folder),
  ``checkpoint-written`` (its ``checkpoint.json`` too, before the rename), ``checkpoint-renamed``
  (renamed, before the pruning);

* the migration (:mod:`migration.migrator`; ``N``: the N-th time the target reaches it):
  ``migrate-PHASE-TARGET`` with PHASE one of :data:`MIGRATION_PHASES` and TARGET ``postgres``
  or ``duckdb``, e.g. ``migrate-committed-postgres:3``.

``--crash-at @FILE`` (:class:`CrashAtFile`) arms the running process from a file instead: it
holds ``POINT:N`` or nothing, and each point looks at it when reached, so a harness arms (or
disarms) a live service by replacing the file, without restarting it; a count starts again at
each arming.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path

#: Steps of the staging commit a ``commit-STEP`` point names (:meth:`StagingStore.commit`).
COMMIT_STEPS = ("state", "outputs", "progress", "ledger", "commit")
#: Points of the collector's protocol (:mod:`ingest.collector`).
COLLECTOR_POINTS = ("sent", "flushed", "checkpointed")
#: Points of a staging checkpoint (:func:`staging.checkpoints.take_checkpoint`).
CHECKPOINT_POINTS = ("tables", "written", "renamed")
#: Phases of a migration round a ``migrate-PHASE-TARGET`` point names.
MIGRATION_PHASES = ("copy", "loaded", "rejects", "committed", "acked", "merge", "merged")
MIGRATION_TARGETS = ("postgres", "duckdb")

#: The points :class:`CrashAt` can kill the process at (see the module docstring).
CRASH_PHASES = (
    "poll",
    "execute",
    "commit",
    *(f"commit-{s}" for s in COMMIT_STEPS),
    "committed",
    *(f"collect-{p}" for p in COLLECTOR_POINTS),
    *(f"checkpoint-{p}" for p in CHECKPOINT_POINTS),
    *(f"migrate-{p}-{t}" for p in MIGRATION_PHASES for t in MIGRATION_TARGETS),
)

#: ``hook(point, batch_id)`` of a collector (see :data:`COLLECTOR_POINTS`).
CollectorHook = Callable[[str, int], None]
#: ``hook(phase, target)`` of a migrator (:data:`migration.migrator.MigrationHook`).
MigrationHook = Callable[[str, str], None]


class PipelineFaults:
    """The hooks the pipeline calls; each does nothing here. A harness subclasses it."""

    def before_execute(self, batch_id: int) -> None:
        """Batch ``batch_id`` is assembled and about to run in the engine."""

    def commit_hook(self, first_id: int, last_id: int) -> Callable[[str], None] | None:
        """The hook the staging commit of batches ``first_id..last_id`` calls at each of its
        steps (:data:`staging.store.CommitHook`), or None."""
        return None

    def after_commit(self, first_id: int, last_id: int) -> None:
        """Batches ``first_id..last_id`` committed to staging."""

    def collector_hook(self, stream: str) -> CollectorHook | None:
        """The hook ``stream``'s collector calls at its points, or None."""
        return None

    def checkpoint_hook(self) -> Callable[[str], None] | None:
        """The hook every staging checkpoint calls at its points, or None."""
        return None

    def migration_hook(self) -> MigrationHook | None:
        """The hook of the pipeline's migrator, or None."""
        return None


def kill_self() -> None:
    """End this process as a crash does: SIGKILL, nothing flushed, nothing closed."""
    os.kill(os.getpid(), signal.SIGKILL)


def parse_crash_at(text: str) -> tuple[str, int]:
    """``POINT:N`` as ``(point, n)``; :class:`ValueError` naming the points when it is not one."""
    point, _, n = text.rpartition(":")
    if point not in CRASH_PHASES or not n.isdigit():
        raise ValueError(f"--crash-at expects POINT:N with POINT one of {', '.join(CRASH_PHASES)}")
    return point, int(n)


class CrashAt(PipelineFaults):
    """Kill the process at ``point`` for ``n`` (a batch id, or a count: see the module
    docstring)."""

    def __init__(self, point: str, n: int) -> None:
        if point not in CRASH_PHASES:
            raise ValueError(f"crash point {point!r} is not one of {CRASH_PHASES}")
        self.phase = "commit-ledger" if point == "commit" else point
        self.batch_id = n
        self._reached = 0
        self._lock = threading.Lock()

    def _count(self) -> bool:
        """One more reach of a counted point; True at the N-th."""
        with self._lock:
            self._reached += 1
            return self._reached == self.batch_id

    def before_execute(self, batch_id: int) -> None:
        if batch_id != self.batch_id:
            return
        if self.phase == "poll":
            kill_self()
        elif self.phase == "execute":
            threading.Timer(0.005, kill_self).start()

    def commit_hook(self, first_id: int, last_id: int) -> Callable[[str], None] | None:
        if not self.phase.startswith("commit-") or not first_id <= self.batch_id <= last_id:
            return None
        step_name = self.phase.removeprefix("commit-")

        def hook(step: str) -> None:
            if step == step_name:
                kill_self()

        return hook

    def after_commit(self, first_id: int, last_id: int) -> None:
        if self.phase == "committed" and first_id <= self.batch_id <= last_id:
            kill_self()

    def collector_hook(self, stream: str) -> CollectorHook | None:
        if not self.phase.startswith("collect-"):
            return None
        point_name = self.phase.removeprefix("collect-")

        def hook(point: str, batch_id: int) -> None:
            if point == point_name and batch_id == self.batch_id:
                kill_self()

        return hook

    def checkpoint_hook(self) -> Callable[[str], None] | None:
        if not self.phase.startswith("checkpoint-"):
            return None
        point_name = self.phase.removeprefix("checkpoint-")

        def hook(point: str) -> None:
            if point == point_name and self._count():
                kill_self()

        return hook

    def migration_hook(self) -> MigrationHook | None:
        if not self.phase.startswith("migrate-"):
            return None
        phase_name, _, target_name = self.phase.removeprefix("migrate-").rpartition("-")

        def hook(phase: str, target: str) -> None:
            if phase == phase_name and target == target_name and self._count():
                kill_self()

        return hook


class CrashAtFile(PipelineFaults):
    """A :class:`CrashAt` read from ``path`` (``POINT:N``; empty or missing: not armed), read
    again whenever the file was replaced: a harness arms a running process by writing a new
    file and renaming it over the old one. Every point looks at the file when it is reached
    (one ``stat``), so a point armed before its batch arrives is never passed; a count (a
    checkpoint's or a migration round's N) starts at the arming. A file that does not parse
    disarms."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: tuple[int, int, int] | None = None
        self._armed: CrashAt | None = None
        self._lock = threading.Lock()

    def armed(self) -> CrashAt | None:
        """The point the file holds now (None: not armed)."""
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        seen = (st.st_ino, st.st_mtime_ns, st.st_size)
        with self._lock:
            if seen != self._seen:
                self._seen = seen
                try:
                    text = self.path.read_text().strip()
                    self._armed = CrashAt(*parse_crash_at(text)) if text else None
                except (OSError, ValueError):
                    self._armed = None
            return self._armed

    def before_execute(self, batch_id: int) -> None:
        armed = self.armed()
        if armed is not None:
            armed.before_execute(batch_id)

    def commit_hook(self, first_id: int, last_id: int) -> Callable[[str], None] | None:
        armed = self.armed()
        return None if armed is None else armed.commit_hook(first_id, last_id)

    def after_commit(self, first_id: int, last_id: int) -> None:
        armed = self.armed()
        if armed is not None:
            armed.after_commit(first_id, last_id)

    def collector_hook(self, stream: str) -> CollectorHook | None:
        def hook(point: str, batch_id: int) -> None:
            armed = self.armed()
            inner = None if armed is None else armed.collector_hook(stream)
            if inner is not None:
                inner(point, batch_id)

        return hook

    def checkpoint_hook(self) -> Callable[[str], None] | None:
        def hook(point: str) -> None:
            armed = self.armed()
            inner = None if armed is None else armed.checkpoint_hook()
            if inner is not None:
                inner(point)

        return hook

    def migration_hook(self) -> MigrationHook | None:
        def hook(phase: str, target: str) -> None:
            armed = self.armed()
            inner = None if armed is None else armed.migration_hook()
            if inner is not None:
                inner(phase, target)

        return hook


def write_armed(path: Path, crash_at: str | None) -> None:
    """Arm the process watching ``path`` (:class:`CrashAtFile`) with ``crash_at`` (None:
    disarm): written beside and renamed over, so the process reads all of it or none."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(crash_at or "")
    os.replace(tmp, path)
