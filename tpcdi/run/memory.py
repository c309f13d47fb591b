"""Peak memory of a run: the resident set of this process and all its children (the Spark JVM,
the embedded Kafka broker), plus the embedded PostgreSQL server when the run uses it, sampled on
a thread; the peak of each part (this process, the Spark driver's JVM, its other children such as
the broker, PostgreSQL) and of each labelled phase are kept too (:attr:`MemorySampler.parts`,
:attr:`MemorySampler.phases`).

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


#: The parts of a sample: this process, the Spark driver's JVM (a descendant started through
#: spark-submit), the other descendants (the broker), PostgreSQL.
PARTS = ("process", "spark", "children", "postgres")
_SPARK_MAIN = "org.apache.spark.deploy.SparkSubmit"


class MemorySampler:
    """Samples :func:`tree_rss` (plus the embedded PostgreSQL server of ``postgres_dir``, once it
    runs) every ``interval`` seconds while running; ``peak`` is the highest sample (bytes).

    ``parts`` holds the peak of each part of :data:`PARTS` on its own (peaks of parts need not
    coincide, so they may add up to more than ``peak``); ``phases`` the peak while each label set
    with :meth:`label` was in force (a label lasts until the next one), ``phase_parts`` each
    part's peak in each phase."""

    def __init__(self, interval: float = 0.25, *, postgres_dir: Path | None = None) -> None:
        self.interval = interval
        self.postgres_dir = postgres_dir
        self.peak = 0
        #: The latest sample (bytes).
        self.last = 0
        self.parts: dict[str, int] = dict.fromkeys(PARTS, 0)
        self.phases: dict[str, int] = {}
        self.phase_parts: dict[str, dict[str, int]] = {}
        self._label: str | None = None
        self._spark_pids: dict[int, bool] = {}
        self._server: psutil.Process | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="memory-sampler", daemon=True)

    def label(self, name: str | None) -> None:
        """Count the samples from now on towards phase ``name`` (None: no phase)."""
        self._label = name
        if name is not None:
            self.phases.setdefault(name, 0)

    def _is_spark(self, child: psutil.Process) -> bool:
        # only a yes is kept: the JVM starts as a launcher script that execs java in place
        if self._spark_pids.get(child.pid):
            return True
        try:
            found = _SPARK_MAIN in child.cmdline()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return False
        if found:
            self._spark_pids[child.pid] = True
        return found

    def sample(self, process: psutil.Process | None = None) -> int:
        """One sample (bytes), folded into the peaks."""
        root = process or psutil.Process()
        own = spark = children = 0
        for p in [root, *root.children(recursive=True)]:
            try:
                rss = int(p.memory_info().rss)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            if p.pid == root.pid:
                own = rss
            elif self._is_spark(p):
                spark += rss
            else:
                children += rss
        server = 0
        if self.postgres_dir is not None:
            if self._server is None or not self._server.is_running():
                self._server = postgres_server(self.postgres_dir)
            if self._server is not None:
                server = server_pss(self._server)
        total = own + spark + children + server
        for part, value in zip(PARTS, (own, spark, children, server), strict=True):
            self.parts[part] = max(self.parts[part], value)
        self.peak = max(self.peak, total)
        label = self._label
        if label is not None:
            self.phases[label] = max(self.phases.get(label, 0), total)
            peaks = self.phase_parts.setdefault(label, dict.fromkeys(PARTS, 0))
            for part, value in zip(PARTS, (own, spark, children, server), strict=True):
                peaks[part] = max(peaks[part], value)
        return total

    def _loop(self) -> None:
        process = psutil.Process()
        while True:
            self.last = self.sample(process)
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    @property
    def peak_mb(self) -> float:
        return self.peak / (1 << 20)

    def as_json(self) -> dict[str, object]:
        """The peaks in MB: ``parts``, ``phases`` and each phase's parts (``phase_parts``)."""
        mb = 1 << 20
        return {
            "parts": {k: round(v / mb, 1) for k, v in self.parts.items()},
            "phases": {k: round(v / mb, 1) for k, v in self.phases.items()},
            "phase_parts": {
                phase: {k: round(v / mb, 1) for k, v in parts.items()}
                for phase, parts in self.phase_parts.items()
            },
        }
