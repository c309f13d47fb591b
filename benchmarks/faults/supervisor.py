"""The campaign's supervisor: it restarts what dies, as systemd (``Restart=always``) would.

A thread looks every 100 ms at ``streamdi serve`` and at PostgreSQL:

1. serve ended (any exit code): note the exit (time, code, the point it was armed with, whether
   the campaign killed it itself) and tell :attr:`on_exit`, then start it again, armed with
   what :attr:`arm` says now;
   a serve that ends within 5 s of its start is started again after a growing pause (0.5, 1,
   2, 4 s), as a crash loop is;
2. PostgreSQL not running: start it again (``pg_ctl start`` on its data directory: crash
   recovery) one second after it was found down.

A fault that must keep a process down (a ``streamdi migrate`` run while serve is away, a
PostgreSQL outage) holds it (:meth:`held`); the supervisor starts it again once released.
Every restart and exit is an :class:`Event` in :attr:`events`, for the timeline.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from benchmarks.faults.processes import PostgresService, ServeProcess

logger = logging.getLogger(__name__)

_TICK_S = 0.1
_PG_RESTART_DELAY_S = 1.0


@dataclass(frozen=True)
class Event:
    """Something the supervisor saw or did, at ``at`` (monotonic s)."""

    at: float
    what: str
    detail: str = ""


@dataclass(frozen=True)
class ServeExit:
    """serve ended at ``at`` with ``code``, armed with ``armed``; ``by_campaign``: the campaign
    killed it itself."""

    at: float
    code: int
    armed: str | None
    by_campaign: bool
    uptime_s: float


class Supervisor:
    """See the module docstring. ``arm()`` gives the ``--crash-at`` of serve's next start."""

    def __init__(
        self,
        serve: ServeProcess,
        postgres: PostgresService | None,
        arm: Callable[[], str | None] = lambda: None,
        on_exit: Callable[[ServeExit], None] = lambda exit_: None,
    ) -> None:
        self.serve = serve
        self.postgres = postgres
        self.arm = arm
        self.on_exit = on_exit
        self.events: list[Event] = []
        self.exits: list[ServeExit] = []
        #: Serialises starts and kills of serve between this thread and the faults.
        self.lock = threading.RLock()
        self._held: set[str] = set()
        self._killing = False
        self._crash_loop = 0
        self._pg_down_since: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="supervisor", daemon=True)

    def start(self) -> None:
        with self.lock:
            self.serve.start(self.arm())
            self.note("serve started", f"armed={self.serve.armed}")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    def note(self, what: str, detail: str = "") -> None:
        self.events.append(Event(time.monotonic(), what, detail))
        logger.info("supervisor %s %s", what, detail)

    @contextlib.contextmanager
    def held(self, name: str) -> Iterator[None]:
        """Keep ``name`` (``serve`` or ``postgres``) down, as far as restarts go, for the block."""
        with self.lock:
            self._held.add(name)
        try:
            yield
        finally:
            with self.lock:
                self._held.discard(name)

    def kill_serve(self) -> bool:
        """``kill -9`` serve now (a fault); False when it was not running."""
        with self.lock:
            if not self.serve.running():
                return False
            self._killing = True
            self.serve.kill()
            return True

    def terminate_serve(self) -> int:
        """Stop serve with SIGTERM (a planned stop) and wait: its exit code."""
        with self.lock:
            self._killing = True
            return self.serve.terminate()

    def _run(self) -> None:
        while not self._stop.wait(_TICK_S):
            try:
                self._look_at_serve()
                self._look_at_postgres()
            except Exception as exc:  # a failed start is tried again at the next look
                self.note("restart failed", f"{type(exc).__name__}: {exc}")
                time.sleep(1.0)

    def _look_at_serve(self) -> None:
        with self.lock:
            code = self.serve.poll()
            if code is None or self.serve.process is None:
                return
            uptime = time.monotonic() - self.serve.started_at
            if not self._exit_noted():
                exit_ = ServeExit(time.monotonic(), code, self.serve.armed, self._killing, uptime)
                self.exits.append(exit_)
                self.note("serve exited", f"code={code} armed={self.serve.armed}")
                self._killing = False
                self._crash_loop = self._crash_loop + 1 if uptime < 5.0 else 0
                self.on_exit(exit_)
            if "serve" in self._held:
                return
            pause = 0.0 if self._crash_loop == 0 else min(4.0, 0.5 * 2 ** (self._crash_loop - 1))
        if pause:
            time.sleep(pause)
        with self.lock:
            if "serve" in self._held or self.serve.running():
                return
            self.serve.start(self.arm())
            self.note("serve started", f"armed={self.serve.armed}")

    def _exit_noted(self) -> bool:
        """Whether the current process's exit is already in :attr:`exits`."""
        return bool(self.exits) and self.exits[-1].at >= self.serve.started_at

    def _look_at_postgres(self) -> None:
        pg = self.postgres
        if pg is None or "postgres" in self._held:
            self._pg_down_since = None
            return
        if pg.running():
            self._pg_down_since = None
            return
        now = time.monotonic()
        if self._pg_down_since is None:
            self._pg_down_since = now
            self.note("postgres down")
            return
        if now - self._pg_down_since >= _PG_RESTART_DELAY_S:
            pg.start()
            self._pg_down_since = None
            self.note("postgres started", f"restarts={pg.restarts}")
