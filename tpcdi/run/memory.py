"""Peak memory of a run: the resident set of this process and all its children (the Spark JVM,
the embedded Kafka broker), plus the embedded PostgreSQL server when the run uses it, sampled on
a thread.

The embedded PostgreSQL server detaches from its parent (``pg_ctl``), so it is found by its data
directory; its processes are counted by their proportional set size (PSS), because every backend
maps the same shared buffers and their resident sets would count those once per backend.
"""

from __future__ import annotations

import threading
from pathlib import Path

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


def postgres_server(data_dir: Path) -> psutil.Process | None:
    """The postmaster serving ``data_dir`` (``postgres -D <data_dir>``), if one runs."""
    wanted = str(Path(data_dir).expanduser().resolve())
    for p in psutil.process_iter(["name", "cmdline"]):
        cmdline = p.info.get("cmdline") or []
        if "-D" in cmdline and cmdline.index("-D") + 1 < len(cmdline):
            given = cmdline[cmdline.index("-D") + 1]
            if str(Path(given).resolve()) == wanted and "postgres" in (p.info.get("name") or ""):
                return p
    return None


def server_pss(server: psutil.Process) -> int:
    """Bytes of the server and its backends by proportional set size (RSS where PSS is not
    available)."""
    total = 0
    for p in [server, *server.children(recursive=True)]:
        try:
            info = p.memory_full_info()
            total += int(getattr(info, "pss", info.rss))
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total


class MemorySampler:
    """Samples :func:`tree_rss` (plus the embedded PostgreSQL server of ``postgres_dir``, once it
    runs) every ``interval`` seconds while running; ``peak`` is the highest sample (bytes)."""

    def __init__(self, interval: float = 0.25, *, postgres_dir: Path | None = None) -> None:
        self.interval = interval
        self.postgres_dir = postgres_dir
        self.peak = 0
        #: The latest sample (bytes).
        self.last = 0
        self._server: psutil.Process | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="memory-sampler", daemon=True)

    def sample(self, process: psutil.Process | None = None) -> int:
        total = tree_rss(process)
        if self.postgres_dir is not None:
            if self._server is None or not self._server.is_running():
                self._server = postgres_server(self.postgres_dir)
            if self._server is not None:
                total += server_pss(self._server)
        return total

    def _loop(self) -> None:
        process = psutil.Process()
        while True:
            self.last = self.sample(process)
            self.peak = max(self.peak, self.last)
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.sample())

    @property
    def peak_mb(self) -> float:
        return self.peak / (1 << 20)
