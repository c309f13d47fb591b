"""One thread that calls a callback when a deadline passes (statement time limits).

``with WATCHDOG.armed(seconds, cursor.interrupt): cursor.sql(...)``: the callback runs once if
the block is still running after ``seconds``. One daemon thread serves every deadline of the
process (a ``threading.Timer`` per statement would start a thread per query), and a disarmed
callback is dropped at once, so nothing it refers to outlives its block.
"""

from __future__ import annotations

import contextlib
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
