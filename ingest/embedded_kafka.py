"""The embedded broker: Apache Kafka (KRaft, one node) as a child process, its log on disk.

Without ``KAFKA__BOOTSTRAP_SERVERS``, streamdi runs Apache Kafka :data:`~ingest.kafka_dist.
KAFKA_VERSION` itself, from the jars of :mod:`ingest.kafka_dist`, on 127.0.0.1. Everything lives
in ``<state dir>/kafka/``: ``log/`` (the message log and the KRaft metadata, so topics and their
records survive a restart of streamdi and of the broker), ``server.properties``, ``log4j2.
properties``, ``broker.log`` (the broker's own log, rotated) and ``broker.json`` (pid, ports, the
pid of the streamdi that owns it, the cluster id).

:meth:`EmbeddedKafka.start`:

1. Take ``start.lock`` (an exclusive file lock): two streamdi processes on one state directory
   start one broker.
2. If ``broker.json`` names a live process that is a Kafka of this folder (its command line names
   this ``server.properties``): reuse it once it answers (within
   ``KAFKA__EMBEDDED_REUSE_TIMEOUT_S``, 10 s by default). Its
   owner (the streamdi that started it) still alive: *share* it (the owner stops it). Its owner
   gone (killed): *adopt* it (this process owns it now and stops it at the end). A broker of this
   folder that does not answer in that time is killed; its log is recovered by the next step.
3. Else start one: format ``log/`` with a new cluster id if it was never formatted; take the ports
   of the last start when they are free (else new free ones); write the configuration; launch the
   JVM in its own session (a Ctrl-C to streamdi's terminal does not reach it: streamdi drains,
   then stops it); record ``broker.json``; wait until it answers Kafka requests, or fail with the
   end of ``broker.log``.

:meth:`EmbeddedKafka.stop` stops an owned broker: SIGTERM (a controlled shutdown that closes the
log cleanly), SIGKILL after the grace time; a shared broker is left running.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

from ingest.class_archive import archive_options
from ingest.exceptions import BrokerStartFailed, BrokerUnavailable
from ingest.kafka_client import (
    BrokerHandle,
    free_port,
    pid_alive,
    process_start_ticks,
    wait_until_answering,
)
from ingest.kafka_dist import (
    KAFKA_MAIN,
    KAFKA_VERSION,
    STORAGE_TOOL,
    class_path,
    default_cache,
    kafka_jars,
)
from streamdi.settings import KafkaSettings

logger = logging.getLogger(__name__)

#: How long :meth:`EmbeddedKafka.restart` waits for a killed broker's port to be free.
RESTART_PORT_WAIT_S = 10.0
#: Lines of ``broker.log`` quoted when the broker fails to start.
LOG_TAIL_LINES = 20


def _server_properties(log_dir: Path, port: int, controller_port: int) -> str:
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(log_dir),
        "num.partitions": "1",
        "auto.create.topics.enable": "false",
        # one node: internal topics with one replica, and few partitions (each is a log to open)
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items())


def _log4j_properties(log_file: Path) -> str:
    return "\n".join(
        [
            "appender.file.type = RollingFile",
            "appender.file.name = FILE",
            f"appender.file.fileName = {log_file}",
            f"appender.file.filePattern = {log_file}.%i",
            "appender.file.layout.type = PatternLayout",
            "appender.file.layout.pattern = [%d] %p %m (%c)%n",
            "appender.file.policies.type = Policies",
            "appender.file.policies.size.type = SizeBasedTriggeringPolicy",
            "appender.file.policies.size.size = 10MB",
            "appender.file.strategy.type = DefaultRolloverStrategy",
            "appender.file.strategy.max = 3",
            "rootLogger.level = INFO",
            "rootLogger.appenderRef.file.ref = FILE",
            "logger.request.name = kafka.request.logger",
            "logger.request.level = WARN",
            "",
        ]
    )


def _new_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes in URL-safe base64; never one that starts with ``-``
    (the storage tool would read it as an option)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def _port_free(port: int) -> bool:
    """Whether Kafka can listen on ``port``: as the JVM does, with ``SO_REUSEADDR``, so the
    connections a killed broker left in TIME_WAIT do not count (its port is free again at once)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class EmbeddedKafka:
    """Apache Kafka in ``<state_dir>/kafka``; see the module docstring for the start protocol."""

    def __init__(
        self, state_dir: Path, kafka: KafkaSettings | None = None, *, port: int | None = None
    ) -> None:
        self.kafka = kafka or KafkaSettings()
        self.folder = Path(state_dir) / "kafka"
        self.log_dir = self.folder / "log"
        self.properties = self.folder / "server.properties"
        self.log_file = self.folder / "broker.log"
        self.record = self.folder / "broker.json"
        self.wanted_port = port
        #: Extra options of the broker's JVM; when set, they replace the class archive's (see
        #: :mod:`ingest.class_archive`, which sets the option that writes it).
        self.jvm_options: list[str] = []
        self.port = 0
        self.controller_port = 0
        self.cluster_id = ""
        self.owned = False
        self._pid: int | None = None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def handle(self) -> BrokerHandle:
        return BrokerHandle(self.bootstrap_servers, f"kafka:{self.cluster_id}", True)

    @property
    def pid(self) -> int | None:
        return self._pid

    @property
    def exit_code(self) -> int | None:
        """The exit code of the broker this process launched, once it ended (else None)."""
        return self._process.poll() if self._process is not None else None

    def alive(self) -> bool:
        if self._process is not None:
            return self._process.poll() is None
        # an adopted broker is not our child: "alive" means a live process that is still this
        # folder's Kafka (its pid not reused by another process since)
        return self._pid is not None and pid_alive(self._pid) and self._is_our_broker(self._pid)

    # -- start -------------------------------------------------------------------------------------

    def start(self, timeout_s: float | None = None) -> BrokerHandle:
        timeout = timeout_s if timeout_s is not None else self.kafka.embedded_start_timeout_s
        self.folder.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        # 1.
        with (self.folder / "start.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            # 2.
            if self._reuse(min(timeout, self.kafka.embedded_reuse_timeout_s)):
                how = "adopted" if self.owned else "shared"
                logger.info(
                    "embedded Kafka %s pid=%s bootstrap=%s", how, self._pid, self.bootstrap_servers
                )
                return self.handle
            # 3.
            self._launch(timeout)
        logger.info(
            "embedded Kafka %s started pid=%s bootstrap=%s in %.1f s (log %s)",
            KAFKA_VERSION,
            self._pid,
            self.bootstrap_servers,
            time.monotonic() - started,
            self.log_dir,
        )
        return self.handle

    def restart(self, timeout_s: float | None = None) -> BrokerHandle:
        """Start this process's broker again after it ended while running (killed, crashed):
        the same log and the same ports, so clients keep their bootstrap address and the log
        id is unchanged. Only for a broker this process owns; a running one is left as it is.
        Raises :class:`BrokerStartFailed` as :meth:`start` does (a port taken meanwhile)."""
        if not self.owned:
            raise BrokerStartFailed(f"the embedded Kafka of {self.folder} is not this process's")
        if self.alive():
            return self.handle
        self._process = None
        self._pid = None
        port = self.wanted_port or self.port
        if port:
            self.wanted_port = port
            # a killed JVM's main thread is reaped (a zombie, "not alive") before its other
            # threads have let go of its sockets: wait for the port rather than move
            deadline = time.monotonic() + RESTART_PORT_WAIT_S
            while not _port_free(port) and time.monotonic() < deadline:
                time.sleep(0.1)
        try:
            return self.start(timeout_s)
        except BrokerStartFailed:
            self.port = port  # the next try asks for the same address again
            raise

    def _read_record(self) -> dict[str, Any] | None:
        try:
            data: dict[str, Any] = json.loads(self.record.read_text())
        except (OSError, ValueError):
            return None
        return data

    def _running_pid(self, record: dict[str, Any]) -> int | None:
        """The pid ``record`` names when that process lives and is this folder's Kafka."""
        pid = int(record.get("pid", 0))
        return pid if pid > 0 and pid_alive(pid) and self._is_our_broker(pid) else None

    def _is_our_broker(self, pid: int) -> bool:
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return False
        return str(self.properties).encode() in command

    def _reuse(self, timeout_s: float) -> bool:
        record = self._read_record()
        pid = self._running_pid(record) if record is not None else None
        if record is None or pid is None:
            return False
        self._pid = pid
        self.port = int(record["port"])
        self.controller_port = int(record["controller_port"])
        self.cluster_id = str(record["cluster_id"])
        try:
            wait_until_answering(self.bootstrap_servers, timeout_s)
        except BrokerUnavailable:
            logger.warning(
                "embedded Kafka pid=%s of %s does not answer; killing it", pid, self.folder
            )
            self._kill(pid)
            self._pid = None
            return False
        owner = int(record.get("owner", 0))
        self.owned = owner <= 0 or not pid_alive(owner) or owner == os.getpid()
        if self.owned:
            self._write_record()
        return True

    def _format(self, java: str, classpath: str) -> None:
        """Format ``log/`` with a new cluster id, once. What formatting writes besides
        ``meta.properties`` (``bootstrap.checkpoint``: the metadata version's feature records) is
        the same for every log of this Kafka version, so after the first format it is copied from
        a template beside the jar cache, and ``meta.properties`` written with new ids: a new
        state directory starts without the storage tool's own JVM."""
        if (self.log_dir / "meta.properties").is_file():
            return
        template = default_cache().parent / f"kafka-{KAFKA_VERSION}-bootstrap.checkpoint"
        if template.is_file():
            self.log_dir.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(template, self.log_dir / "bootstrap.checkpoint")
            meta = {
                "node.id": "1",
                "directory.id": _new_cluster_id(),
                "version": "1",
                "cluster.id": _new_cluster_id(),
            }
            tmp = self.log_dir / "meta.properties.tmp"
            tmp.write_text("".join(f"{k}={v}\n" for k, v in meta.items()))
            tmp.replace(self.log_dir / "meta.properties")
            return
        done = subprocess.run(
            [java, "-cp", classpath, STORAGE_TOOL, "format", "-t", _new_cluster_id(), "-c",
             str(self.properties)],
            capture_output=True,
            text=True,
            check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise BrokerStartFailed(
                f"formatting the embedded Kafka log {self.log_dir} failed "
                f"(exit {done.returncode}): {(done.stderr or done.stdout).strip()[-2000:]}"
            )
        with contextlib.suppress(OSError):  # the template is an optimisation only
            part = template.with_name(f"{template.name}.{os.getpid()}")
            shutil.copyfile(self.log_dir / "bootstrap.checkpoint", part)
            part.replace(template)

    def _read_cluster_id(self) -> str:
        for line in (self.log_dir / "meta.properties").read_text().splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "cluster.id":
                return value.strip()
        raise BrokerStartFailed(f"{self.log_dir / 'meta.properties'} names no cluster.id")

    def _choose_ports(self) -> None:
        last = self._read_record() or {}
        port = self.wanted_port or int(last.get("port", 0))
        controller = int(last.get("controller_port", 0))
        self.port = port if port and _port_free(port) else free_port()
        if self.wanted_port and self.port != self.wanted_port:
            raise BrokerStartFailed(f"port {self.wanted_port} for the embedded Kafka is taken")
        self.controller_port = (
            controller if controller and controller != self.port and _port_free(controller) else 0
        )
        while self.controller_port in (0, self.port):
            self.controller_port = free_port()

    def _launch(self, timeout_s: float) -> None:
        try:
            java = shutil.which("java")
            if java is None:
                raise BrokerStartFailed(
                    "the embedded Kafka needs Java 17 or newer on PATH (`java`); install it, or "
                    "set KAFKA__BOOTSTRAP_SERVERS to a running Kafka"
                )
            classpath = class_path(kafka_jars(self.kafka))
            self._choose_ports()
            self.properties.write_text(
                _server_properties(self.log_dir, self.port, self.controller_port)
            )
            log4j = self.folder / "log4j2.properties"
            log4j.write_text(_log4j_properties(self.log_file))
            self._format(java, classpath)
            self.cluster_id = self._read_cluster_id()
            heap = self.kafka.embedded_heap_mb
            command = [
                java,
                f"-Xmx{heap}m",
                f"-Xms{min(heap, 128)}m",
                "-XX:+UseSerialGC",
                "-Djava.awt.headless=true",
                f"-Dlog4j2.configurationFile={log4j}",
                f"-Dkafka.logs.dir={self.folder}",
                *(self.jvm_options or archive_options(java, classpath)),
                "-cp",
                classpath,
                KAFKA_MAIN,
                str(self.properties),
            ]
            with (self.folder / "broker.out").open("ab") as out:
                self._process = subprocess.Popen(
                    command,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
        except OSError as exc:
            raise BrokerStartFailed(
                f"cannot start the embedded Kafka in {self.folder}: {exc}"
            ) from exc
        self._pid = self._process.pid
        self.owned = True
        self._write_record()
        try:
            self._wait_until_ready(timeout_s)
        except BaseException:
            self.stop()
            raise

    def _write_record(self) -> None:
        data = {
            "pid": self._pid or 0,
            "port": self.port,
            "controller_port": self.controller_port,
            "cluster_id": self.cluster_id,
            "owner": os.getpid() if self.owned else 0,
            "version": KAFKA_VERSION,
        }
        tmp = self.record.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(self.record)

    def _wait_until_ready(self, timeout_s: float) -> None:
        assert self._process is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            code = self._process.poll()
            if code is not None:
                raise BrokerStartFailed(
                    f"the embedded Kafka exited at start with code {code}; the end of "
                    f"{self.log_file}:\n{self.log_tail()}"
                )
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), 0.2),
            ):
                break
            time.sleep(0.05)
        try:
            wait_until_answering(self.bootstrap_servers, max(1.0, deadline - time.monotonic()))
        except BrokerUnavailable as exc:
            raise BrokerStartFailed(
                f"the embedded Kafka did not answer within {timeout_s:.0f} s "
                f"(KAFKA__EMBEDDED_START_TIMEOUT_S); the end of {self.log_file}:\n"
                f"{self.log_tail()}"
            ) from exc

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last lines of the broker's log (and of its stdout, where the JVM reports)."""
        out: list[str] = []
        for path in (self.log_file, self.folder / "broker.out"):
            with contextlib.suppress(OSError):
                out.extend(path.read_text(errors="replace").splitlines()[-lines:])
        return "\n".join(out[-lines:])

    # -- stop --------------------------------------------------------------------------------------

    def stop(self, grace_s: float = 30.0) -> None:
        """Stop the broker if this process owns it (see the module docstring)."""
        pid = self._pid
        if pid is None or not self.owned:
            return
        if self.alive():
            os.kill(pid, signal.SIGTERM)
            if not self._wait_gone(pid, grace_s):
                logger.warning(
                    "embedded Kafka pid=%s did not stop in %.0f s; killing it", pid, grace_s
                )
                self._kill(pid)
        if self._process is not None:
            self._process.wait()
        self._pid = None
        record = self._read_record()
        if record is not None and int(record.get("pid", 0)) == pid:
            self._write_record()  # no pid: nothing runs; the ports are kept for the next start
        logger.info("embedded Kafka stopped pid=%s", pid)

    def _wait_gone(self, pid: int, grace_s: float) -> bool:
        """Whether ``pid`` ended within ``grace_s``. A broker this process did not start is
        known by its start time, not its command line: an exiting JVM shows an empty command
        line before it ends, and a pid taken by another process has another start time."""
        deadline = time.monotonic() + grace_s
        started = process_start_ticks(pid)
        while time.monotonic() < deadline:
            if self._process is not None:
                if self._process.poll() is not None:
                    return True
            elif not pid_alive(pid) or process_start_ticks(pid) != started:
                return True
            time.sleep(0.05)
        return False

    def _kill(self, pid: int) -> None:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        if self._process is not None and self._process.pid == pid:
            self._process.wait()
            return
        self._wait_gone(pid, 10.0)

    def stop_orphan(self) -> bool:
        """Stop this folder's broker if it runs and its owner is gone; True when one was."""
        record = self._read_record()
        pid = self._running_pid(record) if record is not None else None
        if record is None or pid is None:
            return False
        owner = int(record.get("owner", 0))
        if owner > 0 and pid_alive(owner):
            return False
        self._pid, self.owned = pid, True
        self.stop()
        return True

    def __enter__(self) -> EmbeddedKafka:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def stop_left_running(state_dir: Path, kafka: KafkaSettings | None = None) -> bool:
    """Stop the embedded Kafka of ``state_dir`` if one runs whose owner is gone (a killed
    streamdi); True when one was stopped. A broker whose owner lives is left alone."""
    return EmbeddedKafka(state_dir, kafka).stop_orphan()
