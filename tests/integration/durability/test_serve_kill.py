"""kill -9 of ``streamdi serve`` (its own embedded Kafka) while clients push over HTTP and while
the consumer lags by thousands of acknowledged events; the restarted service adopts the broker
the killed one left running (and starts it again when that adopted broker is killed in turn), and
commits every acknowledged event exactly once."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

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


def _committed_through(service: ServedService, batch: int) -> bool:
    status = service.get("/status")
    return bool(status["streams"]["puts"]["last_batch"] >= batch)


def test_kill_9_serve_while_the_consumer_lags(tmp_path: Path) -> None:
    state = tmp_path / "state"
    service = ServedService(state, **SERVE_ENV)
    pusher = Pusher(service.url, size=50, threads=3)
    try:
        service.wait_ready()
        broker = broker_pid(state)
        assert kafka_jvms(state) == [broker]
        pusher.push(30)  # 1,500 events consumed as they come
        service.post("/ingest/pause", {})
        pusher.push(120)  # 6,000 more, acknowledged, not consumed
        lagging = pusher.acknowledged
        assert lagging >= 7_000 and pusher.failed == 0, (lagging, pusher.failed)
        pusher.start()  # clients keep pushing through the kill
        time.sleep(0.3)
        service.post("/ingest/resume", {})
        service.process.kill()  # kill -9, right after the resume: thousands still lag
        service.process.wait(30)
        service.client.close()
        time.sleep(0.5)
        pusher.stop()
        assert kafka_jvms(state) == [broker], "the killed service's broker should live on"
        staged_at_kill = len(staged_log(state / "staging.duckdb"))
        print(f"acknowledged {pusher.acknowledged}, staged at the kill {staged_at_kill}")
        assert staged_at_kill <= lagging - 2_000, "the kill came after the consumer caught up"

        service = ServedService(state, **SERVE_ENV)
        service.wait_ready()
        assert broker_pid(state) == broker, "the restarted service did not adopt the broker"
        assert kafka_jvms(state) == [broker]
        pusher.url = service.url
        pusher.push(30)
        # the adopted broker is not the service's child: killed, it is still noticed and started
        # again on its log
        os.kill(broker, signal.SIGKILL)
        wait_for(
            "the adopted broker restarted",
            lambda: (b := service.get("/status")["broker"])["restarts"] == 1 and b["up"],
            timeout=90,
        )
        assert broker_pid(state) != broker and kafka_jvms(state) == [broker_pid(state)]
        pusher.push(30)
        last = max(r.last_batch for r in pusher.receipts)
        wait_for("every receipt committed", lambda: _committed_through(service, last))
        assert service.stop() == 0, service.log.read_text()[-3000:]
        wait_for("no Kafka left", lambda: not kafka_jvms(state), timeout=60)
    finally:
        pusher.stop()
        if service.process.poll() is None:
            service.process.kill()
            service.process.wait(30)
        for pid in kafka_jvms(state):
            os.kill(pid, signal.SIGKILL)
    check_exactly_once(pusher.receipts, staged_log(state / "staging.duckdb"))
