"""The broker a run uses, watched: whether it answers, and the embedded one restarted when it dies.

A :class:`BrokerWatch` thread looks at the broker every ``every_s``, in order:

1. The embedded broker this process owns (started or adopted) whose process is gone (killed,
   crashed): start it again on the same log and the same ports
   (:meth:`~ingest.embedded_kafka.EmbeddedKafka.restart`), count the restart, log it. A start
   that fails is logged and tried again at the next look. A broker shared with another streamdi
   is that process's to restart.
2. Probe the broker (a TCP connection to one of its bootstrap addresses) and note when it went
   down and came back, with a log line each time. While it is down, the Kafka client's own log
   (an error with a traceback per connection attempt of every client) is muted below CRITICAL:
   the watch's line says it once; the client's level is restored when the broker is back.

The watch never stops the run: while the broker is away, the consumer polls in vain, the producers
and collectors wait and retry (:mod:`runtime.pipeline`), and they resume by themselves once it is
back; ``/ready``, ``/status`` and the metrics show the broker's state (:meth:`BrokerWatch.state`).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ingest.broker import BrokerHandle, EmbeddedKafka, start_broker
from ingest.exceptions import BrokerStartFailed
from streamdi.settings import KafkaSettings

logger = logging.getLogger(__name__)

#: How often the watch looks at the broker.
WATCH_EVERY_S = 1.0
#: How long a probe waits for a TCP connection.
PROBE_TIMEOUT_S = 1.0
#: The Kafka client library's logger (muted while the broker is down).
KAFKA_CLIENT_LOGGER = "kafka"


@dataclass(frozen=True)
class BrokerState:
    """The broker as the watch last saw it: where it answers, whether it does (``up``), since
    when it does not (``down_since``, epoch seconds), the embedded broker's pid, and how many
    times this process restarted it."""

    bootstrap_servers: str
    embedded: bool
    up: bool
    down_since: float | None
    pid: int | None
    restarts: int
    last_error: str | None


def _answers(bootstrap_servers: str, timeout_s: float) -> str | None:
    """None when one of the bootstrap addresses takes a TCP connection, else why not."""
    error = "no bootstrap address"
    for address in bootstrap_servers.split(","):
        host, _, port = address.strip().rpartition(":")
        try:
            with socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout_s):
                return None
        except (OSError, ValueError) as exc:
            error = f"{address}: {exc}"
    return error


class BrokerWatch:
    """Watches ``handle``'s broker; restarts ``embedded`` (when given and owned) if it dies. See
    the module docstring."""

    def __init__(
        self,
        handle: BrokerHandle,
        embedded: EmbeddedKafka | None = None,
        *,
        every_s: float = WATCH_EVERY_S,
    ) -> None:
        self.handle = handle
        self.embedded = embedded
        self.every_s = every_s
        self.restarts = 0
        self._up = True
        self._down_since: float | None = None
        self._last_error: str | None = None
        self._client_level: int | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def state(self) -> BrokerState:
        with self._lock:
            return BrokerState(
                bootstrap_servers=self.handle.bootstrap_servers,
                embedded=self.handle.embedded,
                up=self._up,
                down_since=self._down_since,
                pid=self.embedded.pid if self.embedded is not None else None,
                restarts=self.restarts,
                last_error=self._last_error,
            )

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="broker-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            self._unmute()

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.look()
            except Exception as exc:  # the watch must never end the run
                logger.warning("broker watch failed: %s", exc)

    def look(self) -> None:
        """One look (steps 1 and 2 of the module docstring)."""
        # 1.
        embedded = self.embedded
        if embedded is not None and embedded.owned and not embedded.alive():
            self._restart(embedded)
        # 2.
        problem = _answers(self.handle.bootstrap_servers, PROBE_TIMEOUT_S)
        self._note(problem)

    def _restart(self, embedded: EmbeddedKafka) -> None:
        logger.warning(
            "embedded Kafka pid=%s is gone; starting it again on its log %s (the pipeline "
            "waits and retries meanwhile)",
            embedded.pid,
            embedded.log_dir,
        )
        self._note(f"the embedded Kafka pid={embedded.pid} is gone")
        try:
            embedded.restart()
        except BrokerStartFailed as exc:
            logger.error("embedded Kafka restart failed (trying again): %s", exc)
            with self._lock:
                self._last_error = str(exc)
            return
        with self._lock:
            self.restarts += 1
        logger.warning(
            "embedded Kafka restarted pid=%s bootstrap=%s restarts=%s",
            embedded.pid,
            embedded.bootstrap_servers,
            self.restarts,
        )

    def _note(self, problem: str | None) -> None:
        with self._lock:
            if problem is None:
                if not self._up:
                    logger.warning(
                        "broker back bootstrap=%s after %.1f s",
                        self.handle.bootstrap_servers,
                        time.time() - (self._down_since or time.time()),
                    )
                self._up, self._down_since = True, None
                self._unmute()
                return
            self._last_error = problem
            if self._up:
                logger.warning(
                    "broker unavailable bootstrap=%s: %s; the pipeline waits and retries",
                    self.handle.bootstrap_servers,
                    problem,
                )
                self._up, self._down_since = False, time.time()
                self._mute()

    def _mute(self) -> None:
        client = logging.getLogger(KAFKA_CLIENT_LOGGER)
        if self._client_level is None:
            self._client_level = client.level
            client.setLevel(logging.CRITICAL)

    def _unmute(self) -> None:
        if self._client_level is not None:
            logging.getLogger(KAFKA_CLIENT_LOGGER).setLevel(self._client_level)
            self._client_level = None


@contextlib.contextmanager
def watched_broker(kafka: KafkaSettings, state_dir: Path) -> Iterator[BrokerWatch]:
    """The configured external Kafka, or the embedded broker of ``state_dir``, with a running
    :class:`BrokerWatch` for the block (as :func:`ingest.broker.open_broker`: an embedded broker
    this process started or adopted is stopped at the end, after the watch)."""
    handle, embedded = start_broker(kafka, state_dir)
    watch = BrokerWatch(handle, embedded)
    watch.start()
    try:
        yield watch
    finally:
        watch.stop()
        if embedded is not None:
            embedded.stop()
