"""The machine's load average while a benchmark runs: these machines are shared, so an absolute
figure is only read beside the load it was measured at, and the load at the start says little
about a run of many minutes."""

from __future__ import annotations

import os
import statistics
import threading
from types import TracebackType


class LoadAverageSampler:
    """A context manager sampling the one-minute load average every ``every_s`` seconds (and at
    entry and exit) on a daemon thread; :meth:`summary` gives the median and maximum."""

    def __init__(self, every_s: float = 10.0) -> None:
        self.every_s = every_s
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="load-average", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.samples.append(os.getloadavg()[0])

    def __enter__(self) -> LoadAverageSampler:
        self.samples.append(os.getloadavg()[0])
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append(os.getloadavg()[0])

    def summary(self) -> dict[str, float]:
        """``{"median", "max", "samples"}`` of the one-minute load average over the run."""
        return {
            "median": round(statistics.median(self.samples), 2),
            "max": round(max(self.samples), 2),
            "samples": len(self.samples),
        }
