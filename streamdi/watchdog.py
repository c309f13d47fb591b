"""One thread that calls a callback when a deadline passes (statement time limits).

``with WATCHDOG.armed(seconds, cursor.interrupt): cursor.sql(...)``: the callback runs once if
the block is still running after ``seconds``. One daemon thread serves every deadline of the
process (a ``threading.Timer`` per statement would start a thread per query), and a disarmed
callback is dropped at once, so nothing it refers to outlives its block.

:class:`QueryScope` groups the statements of one user query so the query service can interrupt
them together (its deadline, the memory backstop, shutdown): readers run each user statement
inside :func:`statement`, which arms the statement's deadline and registers its cancel callback
with the current query's scope (:data:`SCOPE`).
"""

from __future__ import annotations

import contextlib
import contextvars
import heapq
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class Watchdog:
    """See the module docstring. Thread-safe."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int]] = []
        self._callbacks: dict[int, Callable[[], object]] = {}
        self._ids = itertools.count()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def arm(self, seconds: float, callback: Callable[[], object]) -> int:
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="watchdog", daemon=True)
                self._thread.start()
            token = next(self._ids)
            self._callbacks[token] = callback
            heapq.heappush(self._heap, (time.monotonic() + seconds, token))
            self._cond.notify()
            return token

    def disarm(self, token: int) -> None:
        with self._cond:
            self._callbacks.pop(token, None)

    @contextmanager
    def armed(self, seconds: float, callback: Callable[[], object]) -> Iterator[None]:
        token = self.arm(seconds, callback)
        try:
            yield
        finally:
            self.disarm(token)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while self._heap and self._heap[0][1] not in self._callbacks:
                    heapq.heappop(self._heap)  # disarmed
                if not self._heap:
                    self._cond.wait()
                    continue
                deadline, token = self._heap[0]
                now = time.monotonic()
                if deadline > now:
                    self._cond.wait(deadline - now)
                    continue
                heapq.heappop(self._heap)
                callback = self._callbacks.pop(token)
            # an interrupt of a statement that ended meanwhile has nothing to do
            with contextlib.suppress(Exception):
                callback()
            del callback  # the waiting thread keeps no cursor alive


#: The process's watchdog.
WATCHDOG = Watchdog()


class QueryScope:
    """The statements one user query is running now, and why it was interrupted (if it was).

    The service opens a scope per query (:data:`SCOPE`); readers and the island register each
    user statement's cancel callback with :func:`statement` while it runs. :meth:`interrupt`
    cancels them all (a deadline, the memory backstop, shutdown) and records the first reason, so
    the service can answer with the right code when the interrupted statement raises. Thread-safe.
    """

    def __init__(self, *, rss_at_start: int = 0) -> None:
        self.rss_at_start = rss_at_start
        self.reason: str | None = None
        self._cancels: dict[int, Callable[[], object]] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()

    def register(self, cancel: Callable[[], object]) -> int:
        with self._lock:
            token = next(self._ids)
            self._cancels[token] = cancel
            interrupted = self.reason is not None
        if interrupted:  # interrupted before this statement started: stop it at once
            with contextlib.suppress(Exception):
                cancel()
        return token

    def unregister(self, token: int) -> None:
        with self._lock:
            self._cancels.pop(token, None)

    def interrupt(self, reason: str) -> None:
        """Cancel every registered statement (and any that registers later); the first reason
        given stays."""
        with self._lock:
            if self.reason is None:
                self.reason = reason
            cancels = list(self._cancels.values())
        for cancel in cancels:
            with contextlib.suppress(Exception):
                cancel()


#: The scope of the query the current thread works for (None: not a user query).
SCOPE: contextvars.ContextVar[QueryScope | None] = contextvars.ContextVar(
    "streamdi_query_scope", default=None
)


@contextmanager
def statement(seconds: float, cancel: Callable[[], object]) -> Iterator[None]:
    """Run a statement under its deadline (``cancel`` after ``seconds``) and, inside a user
    query's scope, cancellable by the service (:meth:`QueryScope.interrupt`)."""
    scope = SCOPE.get()
    token = scope.register(cancel) if scope is not None else None
    try:
        with WATCHDOG.armed(seconds, cancel):
            yield
    finally:
        if scope is not None and token is not None:
            scope.unregister(token)
