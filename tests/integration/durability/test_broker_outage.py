"""An external Kafka (``KAFKA__BOOTSTRAP_SERVERS``) that goes away for ~10 s under a running
``streamdi serve`` while clients push: the service stays up, says it is not ready and why, shows
the broker down in ``/status`` and the metrics, and resumes by itself when the broker is back on
the same address; every acknowledged event is staged exactly once."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from ingest.broker import EmbeddedKafka
from tests.integration.api.conftest import ServedService
from tests.integration.durability.helpers import (
    Pusher,
    check_exactly_once,
    kafka_jvms,
    staged_log,
    wait_for,
)
from tests.integration.durability.test_broker_kill import ReadyProbe, metric

pytestmark = pytest.mark.kafka

OUTAGE_S = 10.0


@pytest.mark.slow  # about 65 s: the outage, and the broker stopping and starting again
def test_an_external_broker_away_for_ten_seconds(tmp_path: Path) -> None:
    kafka_state = tmp_path / "kafka-state"
    broker = EmbeddedKafka(kafka_state)
    broker.start()
    state = tmp_path / "state"
    service = ServedService(
        state,
        KAFKA__BOOTSTRAP_SERVERS=broker.bootstrap_servers,
        ENGINE__BATCH_TIMEOUT_MS="50",
        INGEST__ALLOWED_LATENESS_MS="",
    )
    pusher = Pusher(service.url, size=50, threads=3)
    try:
        service.wait_ready()
        pusher.push(21)
        pusher.start()
        probe = ReadyProbe(service.url)
        time.sleep(1.0)
        broker.stop()  # the broker goes away
        status = wait_for(
            "the broker seen down",
            lambda: not (s := service.get("/status"))["broker"]["up"] and s,
            timeout=30,
        )
        assert status["broker"]["embedded"] is False and status["broker"]["restarts"] == 0
        assert metric(service.client.get("/metrics").text, "streamdi_broker_up") == 0
        time.sleep(OUTAGE_S)
        assert service.process.poll() is None, "the service exited while the broker was away"
        broker = EmbeddedKafka(kafka_state, port=broker.port)  # back, on the same address
        broker.start()
        wait_for("the broker seen up", lambda: service.get("/status")["broker"]["up"], 30)
        wait_for("ready again", lambda: service.client.get("/ready").status_code == 200, 60)
        time.sleep(2.0)  # pushes go on against the broker that came back
        pusher.stop()
        probe.stop()
        assert any(r.startswith("broker unavailable") for r in probe.not_ready), probe.not_ready
        failed = pusher.failed
        pusher.push(21)
        assert pusher.failed == failed, "offers failed after the broker came back"
        last = max(r.last_batch for r in pusher.receipts)
        wait_for(
            "every receipt committed",
            lambda: service.get("/status")["streams"]["puts"]["last_batch"] >= last,
        )
        assert metric(service.client.get("/metrics").text, "streamdi_broker_up") == 1
        assert service.stop() == 0, service.log.read_text()[-3000:]
    finally:
        pusher.stop()
        if service.process.poll() is None:
            service.process.kill()
            service.process.wait(30)
        broker.stop()
        for pid in kafka_jvms(kafka_state):
            os.kill(pid, signal.SIGKILL)
    print(f"acknowledged {pusher.acknowledged}, failed offers {pusher.failed}")
    check_exactly_once(pusher.receipts, staged_log(state / "staging.duckdb"))
