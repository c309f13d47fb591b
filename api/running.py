"""Running user queries within bounds of time and memory, and stopping them all on shutdown.

:meth:`QueryRunner.run` runs one query, in this order:

1. Refuse while the service is stopping (``not_ready``), or while as many abandoned statements
   still run as there are query slots (each burns a core until DuckDB's binder lets it go).
2. Take a query slot (``API__MAX_CONCURRENT_QUERIES``; a slot is never held past step 5).
3. Open the query's :class:`~streamdi.watchdog.QueryScope` (with the process's resident memory
   now) and run the query in a worker thread inside it: every user statement registers its
   cancel callback there (:func:`streamdi.watchdog.statement`) besides its own deadline.
4. Wait ``API__QUERY_TIMEOUT_S``; then interrupt every statement of the scope (``timeout``).
   DuckDB and PostgreSQL stop an executing statement at once; DuckDB's binder and optimizer do
   not look at interrupts (why :mod:`api.limits` bounds a query's shape before it gets there).
5. Wait ``API__QUERY_GRACE_S`` more; a worker still running then is *abandoned*: the slot is
   freed and the client answered ``query_timeout``; the worker finishes on its own time and its
   result is dropped.
6. An error the worker raised after an interruption is answered by its cause:
   ``query_timeout`` (408), ``query_memory_exceeded`` (400) for the memory backstop,
   ``not_ready`` (503) for shutdown.

**Memory backstop** (:class:`MemoryGuard`): while queries run, the process's resident memory is
sampled every ``API__RSS_SAMPLE_MS``; above ``API__RSS_LIMIT_MB`` every running query whose scope
opened at least :data:`SLACK_BYTES` lower is interrupted (``memory``), so what one query grows
is taken back whatever DuckDB's or Arrow's accounting missed (DuckDB's list and string vectors
are not buffer-managed), and a query that started while memory was already high (the allocator
may keep freed pages) is not blamed for it. After such an interruption Arrow's pool and glibc's
heap give unused memory back to the system.

:meth:`QueryRunner.shutdown` refuses new queries, interrupts the running ones (``shutdown``) and
waits a bounded time; it returns how many are still running (abandoned).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import psutil
import pyarrow as pa

from api.exceptions import (
    NotReady,
    QueryMemoryExceeded,
    QueryTimeout,
)
from streamdi.watchdog import SCOPE, QueryScope

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: A query is blamed for memory only if the process grew at least this much since it started.
SLACK_BYTES = 64 << 20


def rss_bytes() -> int:
    """The process's resident memory."""
    return int(psutil.Process().memory_info().rss)


def release_memory() -> None:
    """Give memory freed by Arrow and by C allocations back to the system (best effort)."""
    with contextlib.suppress(Exception):
        pa.default_memory_pool().release_unused()
    with contextlib.suppress(Exception):
        name = ctypes.util.find_library("c")
        if name:
            ctypes.CDLL(name).malloc_trim(0)


class _Worker:
    """One query's worker thread and what became of it."""

    def __init__(
        self, scope: QueryScope, work: Callable[[], object], on_exit: Callable[[_Worker], None]
    ) -> None:
        self.scope = scope
        self.done = threading.Event()
        self.result: object = None
        self.error: BaseException | None = None
        self._work = work
        self._on_exit = on_exit
        self.thread = threading.Thread(target=self._run, name="query", daemon=True)

    def _run(self) -> None:
        SCOPE.set(self.scope)
        try:
            self.result = self._work()
        except BaseException as exc:
            self.error = exc
        finally:
            self.done.set()
            self._on_exit(self)


class MemoryGuard:
    """The memory backstop of the module docstring: one daemon thread, sampling only while
    queries run. ``limit_bytes`` 0: off."""

    def __init__(
        self, runner: QueryRunner, limit_bytes: int, sample_s: float, slack_bytes: int = SLACK_BYTES
    ) -> None:
        self.limit_bytes = limit_bytes
        self.sample_s = sample_s
        self.slack_bytes = slack_bytes
        self.peak_bytes = 0
        self.trips = 0
        self._runner = runner
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    def wake(self) -> None:
        if self.limit_bytes <= 0:
            return
        with self._wake:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="memory-guard", daemon=True)
                self._thread.start()
            self._wake.notify()

    def _loop(self) -> None:
        while True:
            with self._wake:
                while not self._runner.running_scopes():
                    self._wake.wait()
            rss = rss_bytes()
            self.peak_bytes = max(self.peak_bytes, rss)
            if rss > self.limit_bytes:
                blamed = [
                    s
                    for s in self._runner.running_scopes()
                    if s.reason is None and rss - s.rss_at_start >= self.slack_bytes
                ]
                if blamed:
                    self.trips += 1
                    logger.warning(
                        "memory backstop rss_mb=%d limit_mb=%d interrupting=%d",
                        rss >> 20,
                        self.limit_bytes >> 20,
                        len(blamed),
                    )
                    for scope in blamed:
                        scope.interrupt("memory")
            time.sleep(self.sample_s)


class QueryRunner:
    """See the module docstring. Thread-safe."""

    def __init__(
        self,
        *,
        slots: int,
        timeout_s: float,
        grace_s: float,
        rss_limit_bytes: int = 0,
        rss_sample_s: float = 0.05,
    ) -> None:
        self.timeout_s = timeout_s
        self.grace_s = grace_s
        self._slots = threading.BoundedSemaphore(slots)
        self._max_abandoned = slots
        self._lock = threading.Lock()
        self._workers: set[_Worker] = set()
        self._abandoned: set[_Worker] = set()
        self._closing = False
        self.guard = MemoryGuard(self, rss_limit_bytes, rss_sample_s)

    def running_scopes(self) -> list[QueryScope]:
        with self._lock:
            return [w.scope for w in self._workers]

    @property
    def abandoned(self) -> int:
        """Workers abandoned that still run."""
        with self._lock:
            return len(self._abandoned)

    def _exited(self, worker: _Worker) -> None:
        with self._lock:
            self._workers.discard(worker)
            self._abandoned.discard(worker)
        if worker.scope.reason == "memory":
            release_memory()

    def run(self, work: Callable[[], T]) -> T:
        """``work()`` run as the module docstring says; its result or its (translated) error."""
        # 1.
        with self._lock:
            if self._closing:
                raise NotReady("the service is stopping; ask another instance or again later")
            if len(self._abandoned) >= self._max_abandoned:
                raise NotReady(
                    f"{len(self._abandoned)} abandoned statements are still running; ask again "
                    "in a moment"
                )
        # 2.
        self._slots.acquire()
        try:
            # 3.
            worker = _Worker(QueryScope(rss_at_start=rss_bytes()), work, self._exited)
            with self._lock:
                self._workers.add(worker)
            worker.thread.start()
            self.guard.wake()
            # 4.
            if not self._wait(worker, self.timeout_s):
                worker.scope.interrupt("timeout")
                # 5.
                if not worker.done.wait(self.grace_s):
                    with self._lock:
                        if not worker.done.is_set():
                            self._abandoned.add(worker)
                    logger.warning(
                        "abandoned a query still running past its limit timeout_s=%s grace_s=%s",
                        self.timeout_s,
                        self.grace_s,
                    )
                    raise QueryTimeout(
                        f"the query ran past its limit of {self.timeout_s:g} s and did not stop "
                        f"within {self.grace_s:g} s more (it is abandoned)",
                        seconds=self.timeout_s,
                    )
        finally:
            self._slots.release()
        # 6.
        if worker.error is not None:
            answer = _translated(worker.error, worker.scope, self.timeout_s)
            if answer is worker.error:
                raise worker.error
            raise answer from worker.error
        return worker.result  # type: ignore[return-value]

    def _wait(self, worker: _Worker, seconds: float) -> bool:
        """Wait for ``worker`` up to ``seconds``, or until shutdown interrupted it."""
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return worker.done.is_set()
            if worker.done.wait(min(left, 0.1)):
                return True
            if worker.scope.reason == "shutdown":
                return worker.done.wait(self.grace_s) or self._abandon(worker)

    def _abandon(self, worker: _Worker) -> bool:
        with self._lock:
            if not worker.done.is_set():
                self._abandoned.add(worker)
        raise NotReady("the service is stopping; the query was interrupted")

    def shutdown(self, wait_s: float) -> int:
        """Refuse new queries, interrupt the running ones, wait up to ``wait_s`` for them; the
        number still running (abandoned)."""
        with self._lock:
            self._closing = True
            workers = list(self._workers)
        for worker in workers:
            worker.scope.interrupt("shutdown")
        deadline = time.monotonic() + wait_s
        for worker in workers:
            worker.done.wait(max(0.0, deadline - time.monotonic()))
        with self._lock:
            left = len(self._workers)
        if left:
            logger.warning("stopping with %d query statements still running", left)
        return left


def _translated(error: BaseException, scope: QueryScope, timeout_s: float) -> BaseException:
    """The error to answer for ``error``, by why the scope was interrupted (if it was)."""
    if scope.reason is None or not isinstance(error, Exception):
        return error
    if scope.reason == "memory":
        return QueryMemoryExceeded(
            "the service passed its memory bound (API__RSS_LIMIT_MB) while the query ran, and "
            "the query was interrupted; ask for less, or retry if other queries were to blame"
        )
    if scope.reason == "shutdown":
        return NotReady("the service is stopping; the query was interrupted")
    if scope.reason == "timeout" and not isinstance(error, QueryTimeout):
        return QueryTimeout(f"the query ran past its limit of {timeout_s:g} s", seconds=timeout_s)
    return error
