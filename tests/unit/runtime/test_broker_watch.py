"""The broker watch without a broker: a probe of a closed port is "down" (once, logged, the Kafka
client's log muted), a listening port is "up" again (logged, unmuted); a collector that loses the
broker is run again; the consuming loop waits on a poll the broker does not answer."""

from __future__ import annotations

import logging
import socket
import threading
from pathlib import Path

import pytest

from ingest.broker import BrokerHandle, free_port
from ingest.collector import BatchCollector
from ingest.exceptions import BrokerUnavailable, CollectorBusy
from runtime.broker_watch import KAFKA_CLIENT_LOGGER, BrokerWatch
from runtime.pipeline import run_collector
from tests.unit.runtime.harness import LoopRig, MemoryFeed, StreamWriter


def test_a_broker_that_goes_away_and_comes_back(caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()
    watch = BrokerWatch(BrokerHandle(f"127.0.0.1:{port}", "external:x", False))
    client = logging.getLogger(KAFKA_CLIENT_LOGGER)
    before = client.level
    with caplog.at_level(logging.WARNING, logger="runtime.broker_watch"):
        watch.look()
        watch.look()
        state = watch.state()
        assert not state.up and state.down_since is not None and state.restarts == 0
        assert "Connection refused" in (state.last_error or "")
        assert client.level == logging.CRITICAL
        with socket.socket() as server:
            server.bind(("127.0.0.1", port))
            server.listen()
            watch.look()
        assert watch.state().up and watch.state().down_since is None
    assert client.level == before
    lines = [r.getMessage() for r in caplog.records]
    assert sum("broker unavailable" in line for line in lines) == 1, lines
    assert sum("broker back" in line for line in lines) == 1, lines


class FlakyCollector:
    """Fails ``failures`` times with a transient error, then ends."""

    stream = "s"

    def __init__(self, failures: int, error: Exception) -> None:
        self.failures = failures
        self.error = error
        self.runs = 0

    def run(self, stop: threading.Event | None = None) -> None:
        self.runs += 1
        if self.runs <= self.failures:
            raise self.error


def _as_collector(fake: FlakyCollector) -> BatchCollector:
    return fake  # type: ignore[return-value]


def test_a_collector_that_loses_the_broker_runs_again() -> None:
    fake = FlakyCollector(2, BrokerUnavailable("gone"))
    run_collector(_as_collector(fake), threading.Event(), retry_s=0.01)
    assert fake.runs == 3


def test_a_terminal_collector_error_is_raised_and_a_stop_ends_the_retries() -> None:
    with pytest.raises(CollectorBusy):
        run_collector(_as_collector(FlakyCollector(1, CollectorBusy("busy"))), threading.Event())
    stop = threading.Event()
    stop.set()
    fake = FlakyCollector(5, BrokerUnavailable("gone"))
    run_collector(_as_collector(fake), stop, retry_s=0.01)
    assert fake.runs == 1


class AwayFeed(MemoryFeed):
    """A feed whose first ``away`` polls fail as a broker that does not answer."""

    def __init__(self, records: list, away: int) -> None:
        super().__init__(records)
        self.away = away

    def poll(self, timeout_ms: int) -> list:
        if self.away > 0:
            self.away -= 1
            raise BrokerUnavailable("polling failed: the broker is away")
        return super().poll(timeout_ms)


def test_the_consuming_loop_waits_for_the_broker(tmp_path: Path) -> None:
    writer = StreamWriter()
    feed = AwayFeed(writer.records("a", [1, 2, 3, 4]), away=3)
    rig = LoopRig(tmp_path / "s.duckdb", feed, batch_size=4, until_idle_s=0.3)
    rig.run()
    assert feed.away == 0
    assert rig.cut == [(1, 4)]
    assert [r["_pos"] for r in rig.staged("log_a")] == [0, 1, 2, 3]
    rig.close()
