"""A standalone Spark cluster on this machine: one master and N workers as native processes, the
way the compose stack's ``spark-master`` and ``spark-worker`` services run them (pyspark's
``bin/spark-class`` with ``org.apache.spark.deploy.master.Master`` and ``...worker.Worker``),
bound to 127.0.0.1 on free ports; and what a Spark event log says about where tasks ran.

Contract of :class:`StandaloneCluster`:

* :meth:`~StandaloneCluster.start` starts the master, waits until its JSON status page says
  ``ALIVE``, starts the workers (each ``cores`` cores, ``memory`` for executors, its own work
  directory) and returns once the master lists every worker ``ALIVE``; a process that exits or a
  cluster not up within ``timeout_s`` raises :class:`SparkUnavailable` with the end of its log.
* :meth:`~StandaloneCluster.stop` stops every process it started (SIGTERM to its process group,
  SIGKILL after a grace period); it is also the context manager's exit.
* Each process logs to ``<root>/<name>.log``; nothing is left running after ``stop``.

Drivers connect with ``--spark-master`` / ``SPARK__MASTER`` = :attr:`StandaloneCluster.url`.
Work the executors read or write by path (the TPC-DI load's Parquet files) must be on a file
system every worker sees: here, the same machine.

:func:`tasks_by_worker` reads an event log (``spark.eventLog.enabled``, uncompressed:
:func:`event_log_conf`) and counts the finished tasks of each executor and of each worker (by the
worker web UI address in the executor's log links), the evidence that a run's work really ran on
the workers.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from etl_dataflows.executors.spark.exceptions import SparkUnavailable

LOOPBACK = "127.0.0.1"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


def spark_class() -> Path:
    """pyspark's ``bin/spark-class`` (the launcher the streamdi image runs)."""
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


def _json(url: str, timeout_s: float = 3.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return json.loads(response.read())


@dataclass
class _Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


@dataclass
class StandaloneCluster:
    """A master and ``workers`` workers under ``root`` (see the module docstring)."""

    root: Path
    workers: int = 2
    cores: int = 1
    memory: str = "1g"
    daemon_memory: str = "256m"
    port: int = field(default_factory=_free_port)
    ui_port: int = field(default_factory=_free_port)
    worker_ui_ports: list[int] = field(default_factory=list)
    _processes: list[_Process] = field(default_factory=list, init=False, repr=False)

    @property
    def url(self) -> str:
        """The master URL drivers connect to."""
        return f"spark://{LOOPBACK}:{self.port}"

    @property
    def ui(self) -> str:
        return f"http://{LOOPBACK}:{self.ui_port}"

    def worker_uis(self) -> list[str]:
        return [f"http://{LOOPBACK}:{p}" for p in self.worker_ui_ports]

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            SPARK_HOME=str(spark_class().parent.parent),
            SPARK_LOCAL_IP=LOOPBACK,
            SPARK_DAEMON_MEMORY=self.daemon_memory,
            # executors that run Python (the engine's spark executor) use this interpreter
            PYSPARK_PYTHON=sys.executable,
        )
        return env

    def _spawn(self, name: str, args: list[str]) -> _Process:
        log = self.root / f"{name}.log"
        with log.open("ab") as out:
            popen = subprocess.Popen(
                [str(spark_class()), *args],
                env=self._env(),
                cwd=self.root,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # spark-class runs java as a child: stop the group
            )
        process = _Process(name, popen, log)
        self._processes.append(process)
        return process

    def start(self, timeout_s: float = 120) -> StandaloneCluster:
        """Start the master and the workers and wait for them (see the module docstring)."""
        self.root.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + timeout_s
        try:
            master = self._spawn(
                "spark-master",
                [MASTER_CLASS, "--host", LOOPBACK, "--port", str(self.port),
                 "--webui-port", str(self.ui_port)],
            )  # fmt: skip
            self._wait(master, deadline, lambda status: status.get("status") == "ALIVE")
            self.worker_ui_ports = [_free_port() for _ in range(self.workers)]
            for i, ui_port in enumerate(self.worker_ui_ports, start=1):
                work = self.root / f"spark-worker-{i}"
                work.mkdir(exist_ok=True)
                self._spawn(
                    f"spark-worker-{i}",
                    [WORKER_CLASS, "--host", LOOPBACK, "--cores", str(self.cores),
                     "--memory", self.memory, "--webui-port", str(ui_port),
                     "--work-dir", str(work), self.url],
                )  # fmt: skip
            self._wait(
                master, deadline, lambda status: len(self.alive_workers(status)) >= self.workers
            )
        except BaseException:
            self.stop()
            raise
        return self

    def alive_workers(self, status: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """The workers the master's status page lists as ``ALIVE``."""
        status = status if status is not None else _json(f"{self.ui}/json/")
        return [w for w in status.get("workers", []) if w.get("state") == "ALIVE"]

    def _wait(self, master: _Process, deadline: float, ready: Any) -> None:
        while True:
            for process in self._processes:
                if process.popen.poll() is not None:
                    raise SparkUnavailable(
                        f"{process.name} exited with {process.popen.returncode}:\n{process.tail()}"
                    )
            try:
                if ready(_json(f"{self.ui}/json/")):
                    return
            except (OSError, ValueError):
                pass  # the page is not up yet
            if time.monotonic() > deadline:
                raise SparkUnavailable(f"the Spark cluster did not come up:\n{master.tail()}")
            time.sleep(0.3)

    def stop(self, grace_s: float = 20) -> None:
        """Stop every process started here, the workers first."""
        for process in reversed(self._processes):
            if process.popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.popen.pid, signal.SIGTERM)
        for process in reversed(self._processes):
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.popen.wait(grace_s)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.popen.pid, signal.SIGKILL)  # what is left of the group
            process.popen.wait()
        self._processes.clear()

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


@dataclass(frozen=True)
class TaskPlacement:
    """Finished tasks of one application: per executor id, and per worker (its web UI address,
    ``host:port``, from the executor's log links; ``driver`` for tasks run in the driver)."""

    by_executor: dict[str, int]
    by_worker: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.by_executor.values())


def tasks_by_worker(event_log: Path | list[Path]) -> TaskPlacement:
    """Count the finished tasks in a Spark event log (one JSON event per line; a file, or the
    files of a rolling log in order) by executor and by worker."""
    files = [event_log] if isinstance(event_log, Path) else list(event_log)
    compressed = [f for f in files if Path(f).suffix in (".zstd", ".lz4", ".snappy", ".lzf")]
    if compressed:
        raise ValueError(
            f"{compressed[0]} is compressed: write event logs with spark.eventLog.compress=false"
        )
    tasks: Counter[str] = Counter()
    worker_of: dict[str, str] = {"driver": "driver"}
    for file in files:
        with Path(file).open() as handle:
            for line in handle:
                event = json.loads(line)
                kind = event.get("Event")
                if kind == "SparkListenerExecutorAdded":
                    links = event.get("Executor Info", {}).get("Log Urls", {})
                    url = next(iter(links.values()), "")
                    worker_of[str(event["Executor ID"])] = urlsplit(url).netloc or "?"
                elif kind == "SparkListenerTaskEnd":
                    tasks[str(event["Task Info"]["Executor ID"])] += 1
    by_worker: Counter[str] = Counter()
    for executor, count in tasks.items():
        by_worker[worker_of.get(executor, "?")] += count
    return TaskPlacement(dict(tasks), dict(by_worker))


def event_logs(directory: Path) -> dict[str, list[Path]]:
    """The event logs under ``spark.eventLog.dir`` ``directory`` by application: a plain log
    is one file; a rolling log (Spark 4's default, ``eventlog_v2_<app>/events_<n>_<app>``) its
    files in order."""
    found: dict[str, list[Path]] = {}
    for entry in sorted(Path(directory).iterdir()):
        if entry.is_dir() and entry.name.startswith("eventlog_v2_"):
            parts = [p for p in entry.iterdir() if p.name.startswith("events_")]
            found[entry.name.removeprefix("eventlog_v2_")] = sorted(
                parts, key=lambda p: int(p.name.split("_")[1])
            )
        elif entry.is_file():
            found[entry.name.removesuffix(".inprogress")] = [entry]
    return found


def event_log_conf(directory: Path) -> dict[str, str]:
    """Spark properties for an event log under ``directory`` that :func:`tasks_by_worker` reads
    (uncompressed)."""
    return {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": str(directory),
        "spark.eventLog.compress": "false",
    }
