"""kill -9 of the embedded Kafka under a running ``streamdi serve`` while clients push: the
service notices, starts its broker again on the same log and port, says so in ``/ready``,
``/status`` and the metrics, never exits, and commits every acknowledged event exactly once."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.integration.api.conftest import ServedService
from tests.integration.durability.helpers import (
    SERVE_ENV,
    Pusher,
    broker_pid,
    check_exactly_once,
    kafka_jvms,
    staged_log,
    wait_for,
)

pytestmark = pytest.mark.kafka


def metric(text: str, name: str) -> float:
    found = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    assert found, f"{name} not in the metrics"
    return float(found.group(1))


class ReadyProbe:
    """Polls ``/ready`` in a thread; keeps the reasons of every 503."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.not_ready: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)
        self._thread.start()

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=10) as client:
            while not self._stop.wait(0.1):
                try:
                    response = client.get("/ready")
                except httpx.HTTPError:
                    continue
                if response.status_code == 503:
                    self.not_ready.extend(response.json()["error"]["detail"]["reasons"])

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def test_kill_9_the_embedded_broker_under_serve(tmp_path: Path) -> None:
    state = tmp_path / "state"
    service = ServedService(state, **SERVE_ENV)
    pusher = Pusher(service.url, size=50, threads=3)
    try:
        service.wait_ready()
        first = broker_pid(state)
        pusher.push(20)
        pusher.start()
        probe = ReadyProbe(service.url)
        time.sleep(1.0)
        os.kill(first, signal.SIGKILL)  # the broker dies under the pushes
        status = wait_for(
            "the broker restarted",
            lambda: (
                (s := service.get("/status"))["broker"]["restarts"] == 1 and s["broker"]["up"] and s
            ),
            timeout=90,
        )
        time.sleep(2.0)  # pushes go on against the restarted broker
        pusher.stop()
        probe.stop()
        second = broker_pid(state)
        assert second != first and status["broker"]["pid"] == second
        assert kafka_jvms(state) == [second]
        assert service.process.poll() is None, "the service exited when its broker died"
        assert any(r.startswith("broker unavailable") for r in probe.not_ready), probe.not_ready
        text = service.client.get("/metrics").text
        assert metric(text, "streamdi_broker_up") == 1
        assert metric(text, "streamdi_broker_restarts_total") == 1
        failed = pusher.failed
        pusher.push(21)  # and after it, every offer is acknowledged
        assert pusher.failed == failed
        last = max(r.last_batch for r in pusher.receipts)
        wait_for(
            "every receipt committed",
            lambda: service.get("/status")["streams"]["puts"]["last_batch"] >= last,
        )
        log = service.log.read_text()
        assert "is gone; starting it again" in log and "embedded Kafka restarted" in log, log
        assert service.stop() == 0, service.log.read_text()[-3000:]
        wait_for("no Kafka left", lambda: not kafka_jvms(state), timeout=60)
    finally:
        pusher.stop()
        if service.process.poll() is None:
            service.process.kill()
            service.process.wait(30)
        for pid in kafka_jvms(state):
            os.kill(pid, signal.SIGKILL)
    print(f"acknowledged {pusher.acknowledged}, failed offers {pusher.failed}")
    check_exactly_once(pusher.receipts, staged_log(state / "staging.duckdb"))
