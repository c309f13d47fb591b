"""Peak memory of a run: the resident set of this process and all its children (the Spark JVM,
the embedded Kafka broker), sampled on a thread.

The embedded PostgreSQL server is not a child (``pg_ctl`` detaches it) and is not counted.
"""

from __future__ import annotations

import threading

import psutil


def tree_rss(process: psutil.Process | None = None) -> int:
    """Bytes resident in ``process`` (default: this one) and its descendants now."""
    root = process or psutil.Process()
    total = 0
    for p in [root, *root.children(recursive=True)]:
        try:
            total += int(p.memory_info().rss)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total


class MemorySampler:
    """Samples :func:`tree_rss` every ``interval`` seconds while running; ``peak`` is the
    highest sample (bytes)."""

    def __init__(self, interval: float = 0.25) -> None:
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="memory-sampler", daemon=True)

    def _loop(self) -> None:
        process = psutil.Process()
        while True:
            self.peak = max(self.peak, tree_rss(process))
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, tree_rss())

    @property
    def peak_mb(self) -> float:
        return self.peak / (1 << 20)
