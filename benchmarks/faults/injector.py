"""Each fault kind as an action on the run's real processes (see :mod:`benchmarks.faults.kinds`).

:meth:`Injector.inject` performs one :class:`~benchmarks.faults.kinds.Fault` and returns its
:class:`Injection`: when the disturbance began and ended (monotonic s), whether the fault
*landed* (the process was really killed at that point, the server really stopped, the disk
really full) and what happened. Crash points are armed in serve's arm file (``--crash-at
@FILE``, :class:`runtime.faults.CrashAtFile`): a running serve is armed where it is, without a
restart, and the supervisor starts a dead one armed with what :meth:`Injector.arm` says. (A
point fault once killed a serve started unarmed first, so that it came back armed: a third of the
TPC-DI campaign's serve restarts, and the point's own restart came right after it.)
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.faults.kinds import POINT_KINDS, Fault
from benchmarks.faults.processes import (
    PostgresService,
    StagingDisk,
    broker_pid,
    run_command,
)
from benchmarks.faults.supervisor import ServeExit, Supervisor

logger = logging.getLogger(__name__)

#: How long an armed crash point may take to be reached before the fault counts as missed.
POINT_TIMEOUT_S = 90.0
#: A counted point whose input has all been offered is given up this long after (no commit
#: will come to reach it).
DRY_S = 15.0
#: Kinds whose point is a batch id (armed ahead, when serve starts before the fault is due).
BATCH_POINT_KINDS = frozenset({"commit_point", "collector_point"})


def arms_ahead(fault: Fault, following: Fault | None) -> bool:
    """Whether ``following`` (a crash point at a batch) is armed as ``fault`` is injected, its
    batch placed from the input then (the run keeps the input short of it meanwhile). Not after
    a point counted in commits (its input runs past the following's batch), nor after a
    ``migrate_kill`` (it needs input to flow, so that staging holds a batch the warehouses have
    not when serve is killed: with the input held at the following's offer, ``streamdi migrate
    push`` found nothing to push and its point was never reached)."""
    counted = fault.kind in POINT_KINDS and fault.kind not in BATCH_POINT_KINDS
    return (
        following is not None
        and following.kind in BATCH_POINT_KINDS
        and not counted
        and fault.kind != "migrate_kill"
    )


@dataclass
class Injection:
    """What one fault did (see the module docstring)."""

    fault: Fault
    started: float
    ended: float
    landed: bool
    detail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunHandles:
    """The run's processes and what the injector needs to reach them."""

    supervisor: Supervisor
    postgres: PostgresService
    disk: StagingDisk | None
    state: Path
    spec: str
    env: dict[str, str]
    log: Path
    #: The staging batch id of offer ``k`` (offers and batches match one to one).
    batch_of: Callable[[int], int]
    #: The first offer not acknowledged yet.
    next_offer: Callable[[], int]
    #: Wait (at most this long) until staging holds a batch some warehouse has not.
    wait_pending: Callable[[float], bool]
    #: The input's last offer (None: no end to keep a point before).
    last_offer: int | None = None
    #: The last batch staging committed, as last seen.
    watermark: Callable[[], int] = lambda: 0


class Injector:
    """Injects faults into the run of ``handles`` (see the module docstring)."""

    def __init__(self, handles: RunHandles) -> None:
        self.h = handles
        self.pending: Fault | None = None
        """The point fault the next serve start is armed with, if any..."""
        self.pending_spec: str | None = None
        """...and its ``--crash-at``."""
        self.landed: ServeExit | None = None
        """The exit of serve at the pending point, once it happened."""
        self.unplanned: list[ServeExit] = []
        """Exits of serve nobody asked for (neither a kill nor an armed point)."""
        self.upcoming: Fault | None = None
        """The next fault when it is a crash point at a batch: armed as the fault in hand is
        injected (its batch placed from the input then; the run keeps the input short of it)."""
        self.anchor: tuple[int, int] | None = None
        """``(fault index, offer)``: place that fault's batch after this offer rather than after
        the first offer not taken yet (the run holds the input there while it arms the point,
        so the input cannot pass the batch before serve is armed for it)."""
        self.on_armed: Callable[[], None] | None = None
        """Called once a point fault's serve is armed (or killed to start armed): the run lets
        the input go on to the point's batch then."""
        self.on_waiting: Callable[[], bool] | None = None
        """Called once a second while a point fault waits to be reached: the run lets a point
        counted in commits have more input; False when none is left to give."""

    # -- arming ------------------------------------------------------------------------------------

    def point_offer(self, fault: Fault) -> int:
        """The offer whose batch a crash point at a batch is placed at: ``after`` offers past
        the one it is due at or the input's next (the anchor, when the run holds the input
        there), but never past the input's last offer (a point placed past it waited 90 s for
        a batch that never came: ``commit-ledger:534`` of 533 at the end of the TPC-DI
        campaign)."""
        taken = self.h.next_offer()
        if self.anchor is not None and self.anchor[0] == fault.index:
            taken = self.anchor[1]
        offer = max(fault.at_offer, taken) + fault.after
        return offer if self.h.last_offer is None else min(offer, self.h.last_offer)

    def reachable(self, fault: Fault) -> bool:
        """Whether the batch of ``fault`` (a crash point at a batch, armed) may still come: not
        once its offer was acknowledged (a collector point) or its batch committed (a commit
        point). A point counted in commits is given up by the run (``on_waiting``)."""
        spec = self.pending_spec
        if fault.kind not in BATCH_POINT_KINDS or spec is None:
            return True
        batch = int(spec.rpartition(":")[2])
        if fault.kind == "collector_point":
            return batch > self.h.next_offer()  # logical batch ids: offer + 1
        return batch > self.h.watermark()

    def crash_spec(self, fault: Fault) -> str:
        """``--crash-at`` of a point fault, placed after the offers it is due at."""
        assert fault.point is not None
        if fault.kind == "commit_point":
            return f"{fault.point}:{self.h.batch_of(self.point_offer(fault))}"
        if fault.kind == "collector_point":
            # logical batch ids of the stream: offer + 1
            return f"{fault.point}:{self.point_offer(fault) + 1}"
        return f"{fault.point}:{fault.after}"

    def set_pending(self, fault: Fault | None) -> None:
        """Arm serve with ``fault`` (a point fault), or with nothing: the running serve now, or
        its next start."""
        sup = self.h.supervisor
        with sup.lock:
            self.pending = fault
            self.pending_spec = None if fault is None else self.crash_spec(fault)
            self.landed = None
            sup.serve.arm(self.pending_spec)

    def arm(self) -> str | None:
        """The ``--crash-at`` for serve's next start (the supervisor asks)."""
        return self.pending_spec

    def on_exit(self, exit_: ServeExit) -> None:
        """serve ended (the supervisor tells, before it starts it again)."""
        if exit_.by_campaign:
            return
        at_point = exit_.code == -signal.SIGKILL  # a point kills with SIGKILL, nothing else does
        if at_point and exit_.armed is not None and exit_.armed == self.pending_spec:
            landed = self.pending
            self.set_pending(self.upcoming if self.upcoming is not landed else None)
            self.landed = exit_
            return
        self.unplanned.append(exit_)

    # -- injection ---------------------------------------------------------------------------------

    def inject(self, fault: Fault, upcoming: Fault | None = None) -> Injection:
        """Inject ``fault``; ``upcoming``: the fault after it (armed ahead when it can be)."""
        self.upcoming = upcoming if arms_ahead(fault, upcoming) else None
        if fault.kind not in POINT_KINDS:
            self.set_pending(self.upcoming)  # a restart this fault causes starts serve armed
        action = getattr(self, f"_{fault.kind}")
        injection: Injection = action(fault)
        logger.info(
            "fault %s %s landed=%s %s",
            fault.index,
            fault.describe(),
            injection.landed,
            injection.detail,
        )
        return injection

    def _serve_kill(self, fault: Fault) -> Injection:
        time.sleep(fault.delay_s)
        started = time.monotonic()
        landed = self.h.supervisor.kill_serve()
        return Injection(fault, started, time.monotonic(), landed, "serve killed")

    def _point(self, fault: Fault) -> Injection:
        sup = self.h.supervisor
        started = time.monotonic()
        with sup.lock:
            if self.pending is not fault:  # not armed ahead: arm it now (a dead serve at start)
                self.set_pending(fault)
            spec = self.pending_spec
        if self.on_armed is not None:
            self.on_armed()
        deadline = time.monotonic() + POINT_TIMEOUT_S
        next_step = time.monotonic() + 1.0
        dry_since: float | None = None
        while time.monotonic() < deadline:
            landed = self.landed
            if landed is not None:
                self.landed = None
                detail = f"serve died at {spec} (code {landed.code})"
                return Injection(fault, started, landed.at, landed.code == -signal.SIGKILL, detail)
            if not self.reachable(fault):
                break  # the input passed its batch (or ended before it): it will not come
            time.sleep(0.05)
            if self.on_waiting is not None and time.monotonic() >= next_step:
                if self.on_waiting():
                    dry_since = None
                elif dry_since is None:
                    dry_since = time.monotonic()
                elif time.monotonic() - dry_since > DRY_S:
                    break  # all its input is in and it was not reached: it will not be
                next_step += 1.0
        self.set_pending(self.upcoming)  # never reached: disarmed, or armed for the next fault
        return Injection(fault, started, time.monotonic(), False, f"{spec} not reached")

    _commit_point = _point
    _collector_point = _point
    _checkpoint_point = _point
    _migration_point = _point

    def _migrate_kill(self, fault: Fault) -> Injection:
        sup = self.h.supervisor
        self.h.wait_pending(5.0)  # kill serve when staging holds batches a warehouse has not
        started = time.monotonic()
        with sup.held("serve"):
            sup.kill_serve()
            args = ["migrate", "push", self.h.spec]
            if fault.point is not None and fault.point.startswith("merge"):
                args.append("--merge")  # a merge is due whenever asked
            if fault.point is not None:
                args += ["--crash-at", fault.point]
                code = run_command(args, self.h.env, self.h.log, timeout_s=180)
            else:
                code = run_command(
                    args, self.h.env, self.h.log, timeout_s=180, kill_after_s=fault.delay_s
                )
            ended = time.monotonic()
        what = fault.point or f"{fault.delay_s:.2f}s"
        return Injection(
            fault,
            started,
            ended,
            code == -signal.SIGKILL,
            f"streamdi migrate push killed at {what} (code {code})",
        )

    def _broker_kill(self, fault: Fault) -> Injection:
        started = time.monotonic()
        pid = broker_pid(self.h.state)
        if pid is None:
            return Injection(fault, started, started, False, "no broker running")
        os.kill(pid, signal.SIGKILL)
        return Injection(fault, started, time.monotonic(), True, f"Kafka pid {pid} killed")

    def _postgres_kill(self, fault: Fault) -> Injection:
        started = time.monotonic()
        killed = self.h.postgres.kill()  # the supervisor starts it again after a second
        deadline = time.monotonic() + 120
        while not self.h.postgres.running() and time.monotonic() < deadline:
            time.sleep(0.05)
        return Injection(
            fault, started, time.monotonic(), killed > 0, f"{killed} PostgreSQL processes killed"
        )

    def _postgres_outage(self, fault: Fault) -> Injection:
        sup = self.h.supervisor
        started = time.monotonic()
        with sup.held("postgres"):
            self.h.postgres.stop("immediate")
            down = not self.h.postgres.running()
            time.sleep(fault.hold_s)
            self.h.postgres.start()
        return Injection(
            fault, started, time.monotonic(), down, f"PostgreSQL down {fault.hold_s:.1f}s"
        )

    def _postgres_slow(self, fault: Fault) -> Injection:
        sup = self.h.supervisor
        started = time.monotonic()
        frozen = 0
        with sup.held("postgres"):
            try:
                while time.monotonic() - started < fault.hold_s:
                    if self.h.postgres.processes():
                        self.h.postgres.freeze()
                        frozen += 1
                    time.sleep(0.4)
                    self.h.postgres.thaw()
                    time.sleep(0.1)
            finally:
                self.h.postgres.thaw()
        return Injection(
            fault,
            started,
            time.monotonic(),
            frozen > 0,
            f"PostgreSQL frozen 400 ms of every 500 ms for {fault.hold_s:.1f}s",
        )

    def _disk_full(self, fault: Fault) -> Injection:
        disk = self.h.disk
        started = time.monotonic()
        if disk is None:
            return Injection(fault, started, started, False, "staging is not on its own disk")
        try:
            filled = disk.fill()
            full = disk.free_bytes() == 0
            time.sleep(fault.hold_s)
        finally:
            disk.free()
        return Injection(
            fault,
            started,
            time.monotonic(),
            full,
            f"staging's disk full for {fault.hold_s:.1f}s ({filled / 2**20:.0f} MiB of ballast)",
        )
