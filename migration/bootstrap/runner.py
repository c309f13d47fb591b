"""The migrator's side of bootstraps: when one is needed, running it, and when a target may be read.

A :class:`Bootstrapper` belongs to one :class:`~migration.migrator.Migrator` and keeps, per
target, the bootstrap under way (at most one) and whether the query service may read the target:

* :meth:`Bootstrapper.wanted`: a target whose ledger holds no batch needs one when staging has
  released batches, or when an earlier bootstrap of it stopped half way (its record says
  ``copying``).
* :meth:`Bootstrapper.run` runs it (:class:`~migration.bootstrap.copier.Bootstrap`, through a
  twin of the target), after the migrator held back staging's release for the target. ``inline``
  (``streamdi migrate``): to the end, in the caller's round. ``background`` (the pipeline and the
  service): on a thread of its own, so the rounds of the other targets go on meanwhile (they share
  no connection with it); each round asks again, and a bootstrap stopped by a transient error is
  resumed by the next one. A terminal error is raised by the next round.
* :meth:`Bootstrapper.caught_up`: after a round, a bootstrapped target at staging's watermark is
  marked ``caught_up`` in its record.
* :meth:`Bootstrapper.readable`: the query service reads a target only when no bootstrap of it is
  under way or waiting to catch up (None: not known yet; :meth:`observe` learns it from the
  target's record when the migrator first opens the target).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any, Literal

from migration.bootstrap.copier import Bootstrap, BootstrapMethod
from migration.bootstrap.pieces import PIECE_BYTES
from migration.bootstrap.progress import BootstrapProgress, progress_of
from migration.bootstrap.record import mark_caught_up, read_record
from migration.bootstrap.sources import twin
from migration.targets.base import BaseTarget
from staging.handoff import StagedDeltas
from streamdi.errors import TransientError
from warehouse.exceptions import WarehouseUnavailable

logger = logging.getLogger(__name__)

BootstrapMode = Literal["inline", "background"]


class Bootstrapper:
    """See the module docstring. ``hold_release(name)`` makes staging keep every batch for target
    ``name`` from now on (the migrator's :meth:`~migration.migrator.Migrator.hold_release`);
    ``hook(phase, target)`` is the migrator's fault-injection hook; ``quiet(name)`` a context
    under which nothing else of the process uses target ``name`` (the migrator's
    :meth:`~migration.migrator.Migrator.quiet`: a bootstrap's file path swaps the target's file
    in it); ``method`` the paths a bootstrap may take
    (:data:`~migration.bootstrap.copier.BootstrapMethod`)."""

    def __init__(
        self,
        staged: StagedDeltas,
        targets: Mapping[str, BaseTarget],
        *,
        mode: BootstrapMode,
        hold_release: Callable[[str], None],
        hook: Callable[[str, str], None] | None = None,
        piece_bytes: int = PIECE_BYTES,
        quiet: Callable[[str], AbstractContextManager[object]] | None = None,
        method: BootstrapMethod = "auto",
    ) -> None:
        self.staged = staged
        self.targets = targets
        self.mode = mode
        self.hold_release = hold_release
        self.hook = hook
        self.piece_bytes = piece_bytes
        self.quiet = quiet
        self.method = method
        self._lock = threading.Lock()
        self._threads: dict[str, threading.Thread] = {}
        self._copies: dict[str, Bootstrap] = {}
        self._progress: dict[str, BootstrapProgress] = {}
        self._failed: dict[str, BaseException] = {}
        self._loaded: set[str] = set()  # bootstrapped, not caught up yet
        self._ready: dict[str, bool] = {}

    # -- what the migrator asks ----------------------------------------------------------------

    def observe(self, name: str, target: BaseTarget, watermark: int, released: int) -> None:
        """Learn from ``target``'s record (when the migrator first opens it) whether it may be
        read: not while a bootstrap is under way or waits to catch up, nor while it holds less
        than staging released."""
        record = read_record(target)
        with self._lock:
            if record is not None and record.state == "loaded":
                self._loaded.add(name)
            self._ready[name] = (
                record is None or record.state == "caught_up"
            ) and watermark >= released

    def wanted(self, name: str, target: BaseTarget, released: int) -> bool:
        """Whether ``target`` (whose ledger holds no batch) needs a bootstrap: staging released
        batches, or one of it is under way or stopped half way."""
        with self._lock:
            thread = self._threads.get(name)
            if thread is not None and thread.is_alive():
                return True
            known = self._progress.get(name)
            if known is not None and known.state == "loaded":
                return True  # finished since the round read the ledger
        return released > 0 or read_record(target) is not None

    def run(self, name: str) -> BootstrapProgress:
        """Run, start or look at target ``name``'s bootstrap (see the module docstring); its
        progress (``copying`` while it runs in the background, ``loaded`` once done). Inline,
        what the copy raises propagates; in the background, a terminal error of the last run is
        raised here and a transient one starts it again."""
        with self._lock:
            thread = self._threads.get(name)
            progress = self._progress.get(name)
            if thread is not None and thread.is_alive() and progress is not None:
                return progress
            if progress is not None and progress.state == "loaded":
                return progress
            failed = self._failed.pop(name, None)
        if failed is not None and not isinstance(failed, TransientError):
            raise failed
        # before anything is read: staging must keep every batch above its release point
        self.hold_release(name)
        progress = BootstrapProgress(name)
        copy = Bootstrap(
            twin(self.targets[name]),
            self.staged,
            self.targets,
            progress,
            piece_bytes=self.piece_bytes,
            hook=self._target_hook(name),
            method=self.method,
            quiet=self._quiet(name),
        )
        with self._lock:
            self._progress[name] = progress
            self._ready[name] = False
            self._copies[name] = copy
        if self.mode == "inline":
            self._run(name, copy, progress, raising=True)
            return progress
        thread = threading.Thread(
            target=self._run,
            args=(name, copy, progress),
            name=f"bootstrap-{name}",
            daemon=True,
        )
        with self._lock:
            self._threads[name] = thread
        thread.start()
        logger.info("bootstrap started in the background target=%s", name)
        return progress

    def _quiet(self, name: str) -> Callable[[], AbstractContextManager[object]] | None:
        quiet = self.quiet
        if quiet is None:
            return None

        def enter() -> AbstractContextManager[object]:
            return quiet(name)

        return enter

    def _target_hook(self, name: str) -> Callable[[str], None] | None:
        hook = self.hook
        if hook is None:
            return None

        def call(phase: str) -> None:
            hook(phase, name)

        return call

    def _run(
        self, name: str, copy: Bootstrap, progress: BootstrapProgress, *, raising: bool = False
    ) -> None:
        try:
            copy.run()
        except BaseException as exc:
            progress.state = "failed"
            progress.error = str(exc)
            with self._lock:
                self._failed[name] = exc
            if isinstance(exc, TransientError):
                logger.warning("bootstrap stopped target=%s (it resumes): %s", name, exc)
            else:
                logger.error("bootstrap failed target=%s: %s", name, exc)
            if raising:
                with self._lock:
                    self._failed.pop(name, None)
                raise
            return
        with self._lock:
            self._loaded.add(name)
        logger.info(
            "bootstrap done target=%s through=%s rows=%s seconds=%.1f",
            name,
            progress.through,
            progress.rows,
            progress.seconds,
        )

    def caught_up(self, name: str, target: BaseTarget, watermark: int, top: int) -> None:
        """After a round that left ``target`` at ``watermark`` with staging at ``top``: once a
        bootstrapped target reached ``top``, its record says so and the target may be read."""
        with self._lock:
            if name not in self._loaded or watermark < top:
                return
        try:
            mark_caught_up(target)
        except WarehouseUnavailable as exc:  # the next round marks it
            logger.warning("could not mark target=%s caught up: %s", name, exc)
            return
        with self._lock:
            self._loaded.discard(name)
            self._ready[name] = True
            progress = self._progress.get(name)
            if progress is not None:
                progress.state = "caught_up"
        logger.info("bootstrapped target caught up target=%s watermark=%s", name, watermark)

    def readable(self, name: str) -> bool | None:
        """Whether the query service may read target ``name`` (None: not known yet)."""
        with self._lock:
            return self._ready.get(name)

    def running(self, name: str) -> bool:
        """Whether a bootstrap of ``name`` runs in the background now."""
        with self._lock:
            thread = self._threads.get(name)
            return thread is not None and thread.is_alive()

    def wait(self, name: str, timeout: float | None = None) -> bool:
        """Wait for the background bootstrap of ``name`` (if one runs) to end; False when it
        still runs after ``timeout`` seconds."""
        with self._lock:
            thread = self._threads.get(name)
        if thread is not None:
            thread.join(timeout)
            return not thread.is_alive()
        return True

    def status(self, name: str, target: BaseTarget) -> dict[str, Any] | None:
        """``name``'s bootstrap for ``status``: the one under way in this process (live), or
        what the target's record says (None: never bootstrapped)."""
        with self._lock:
            progress = self._progress.get(name)
        if progress is not None and progress.state in ("copying", "failed"):
            return progress.as_dict()
        record = read_record(target)
        if record is None:
            return None
        return progress_of(name, record, list(target.layout.tables)).as_dict()

    def close(self) -> None:
        """Stop the bootstraps running in the background (the relation in hand rolls back; the
        next run resumes) and wait for them."""
        with self._lock:
            running = [(n, t) for n, t in self._threads.items() if t.is_alive()]
            copies = dict(self._copies)
        for name, _ in running:
            copies[name].stop()
        for _, thread in running:
            thread.join()
