"""Waiting for a Kafka that does not answer ends when its time is up: a port nothing listens on,
and a port that accepts connections but never answers (a frozen broker), both within the timeout
and not kafka-python's own 30 s bootstrap wait."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from ingest.exceptions import BrokerUnavailable
from ingest.kafka_client import pid_alive, process_start_ticks, wait_until_answering


@pytest.mark.parametrize("listening", [False, True], ids=["refused", "silent"])
def test_waiting_for_a_kafka_that_does_not_answer_ends_on_time(listening: bool) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        if listening:
            sock.listen(8)  # the kernel accepts; nothing ever answers
        address = f"127.0.0.1:{sock.getsockname()[1]}"
        if not listening:
            sock.close()
        started = time.monotonic()
        with pytest.raises(BrokerUnavailable, match=f"{address} did not answer within 2 s"):
            wait_until_answering(address, 2.0)
        took = time.monotonic() - started
    assert 2.0 <= took < 6.0, took  # a 2 s budget, not the client's 30 s bootstrap


def test_a_process_is_known_by_its_start_until_it_is_reaped() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        started = process_start_ticks(child.pid)
        assert started is not None and started >= (process_start_ticks(os.getpid()) or 0)
        assert process_start_ticks(child.pid) == started and pid_alive(child.pid)
    finally:
        child.kill()
        child.wait()
    assert process_start_ticks(child.pid) is None and not pid_alive(child.pid)
