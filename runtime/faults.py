"""Fault injection for the crash tests, kept out of the pipeline's own code.

The pipeline calls a :class:`PipelineFaults` at three moments of a batch's life; the production
default does nothing. The kill -9 tests run ``streamdi run --crash-at PHASE:BATCH`` (a hidden
option), and the CLI installs :class:`CrashAt`, which kills the process with SIGKILL:

* ``poll``: before the engine runs batch BATCH (it was polled and assembled, nothing executed);
* ``execute``: 5 ms into the engine's run of batch BATCH;
* ``commit``: inside the staging transaction of the group holding BATCH, just before its ledger
  rows are written (:meth:`staging.store.StagingStore.commit`, the ``ledger`` step);
* ``committed``: right after that group committed, before migration and observers hear of it.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable

#: The moments :class:`CrashAt` can kill the process at (see the module docstring).
CRASH_PHASES = ("poll", "execute", "commit", "committed")


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


def kill_self() -> None:
    """End this process as a crash does: SIGKILL, nothing flushed, nothing closed."""
    os.kill(os.getpid(), signal.SIGKILL)


class CrashAt(PipelineFaults):
    """Kill the process at ``phase`` of batch ``batch_id`` (see the module docstring)."""

    def __init__(self, phase: str, batch_id: int) -> None:
        if phase not in CRASH_PHASES:
            raise ValueError(f"crash phase {phase!r} is not one of {CRASH_PHASES}")
        self.phase = phase
        self.batch_id = batch_id

    def before_execute(self, batch_id: int) -> None:
        if batch_id != self.batch_id:
            return
        if self.phase == "poll":
            kill_self()
        elif self.phase == "execute":
            threading.Timer(0.005, kill_self).start()

    def commit_hook(self, first_id: int, last_id: int) -> Callable[[str], None] | None:
        if self.phase != "commit" or not first_id <= self.batch_id <= last_id:
            return None

        def hook(step: str) -> None:
            if step == "ledger":
                kill_self()

        return hook

    def after_commit(self, first_id: int, last_id: int) -> None:
        if self.phase == "committed" and first_id <= self.batch_id <= last_id:
            kill_self()
