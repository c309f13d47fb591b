"""SIGTERM on an embedded ``streamdi serve`` (its own broker, its own PostgreSQL): it stops taking
events, drains what Kafka already holds into staging and the warehouses, exits 0, and leaves no
broker or PostgreSQL process behind."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from cli.commands import EXIT_OK
from cli.main import main
from ingest.broker import free_port
from tests.integration.ops.stack_service import StackService, push

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]


def children(pid: int) -> dict[int, str]:
    """Processes whose parent is ``pid``: their command names."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        if ppid == pid:
            found[int(entry.name)] = name
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ", 1)[1].startswith("Z"))


def test_sigterm_drains_commits_and_stops_the_embedded_services(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state"
    env = {
        "STREAMDI__STATE_DIR": str(state),
        "STREAMDI__LOG_LEVEL": "INFO",
        "STREAMDI__LOG_FORMAT": "logfmt",
        "MIGRATION__TARGETS": "postgres,duckdb",
        "ENGINE__BATCH_SIZE": "200",
        "ENGINE__EXECUTOR": "serial",
        "INGEST__ALLOWED_LATENESS_MS": "",
        "INGEST__DRAIN_S": "60",
        "API__PORT": str(free_port()),
    }
    service = StackService(env, ["serve", "runtime.stack:kv"], tmp_path / "serve.log")
    try:
        service.wait("/ready")
        broker = json.loads((state / "kafka" / "broker.json").read_text())["pid"]
        assert broker in children(service.process.pid), children(service.process.pid)
        brokers = [broker]
        postmaster_pid = state / "postgres" / "postmaster.pid"
        assert postmaster_pid.exists()
        postmaster = int(postmaster_pid.read_text().split()[0])
        assert alive(postmaster)
        # a backlog in Kafka: pushed while paused, then SIGTERM right after resuming
        service.client.post("/ingest/pause").raise_for_status()
        total = 0
        for first in range(1, 6001, 1500):
            total += push(service, first, 1500)["events"]
        service.client.post("/ingest/resume").raise_for_status()
        service.process.send_signal(signal.SIGTERM)
        code = service.process.wait(120)
    finally:
        if service.process.poll() is None:
            service.process.kill()
            service.process.wait()
        service.client.close()
    log = service.log.read_text()
    assert code == 0, log
    assert "Traceback" not in log
    assert 'level=info logger=runtime.pipeline msg="pipeline stop' in log, log[-2000:]
    # the embedded services are gone
    deadline = time.monotonic() + 30
    while (alive(brokers[0]) or alive(postmaster)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive(brokers[0]), "the embedded broker outlived streamdi serve"
    assert not alive(postmaster), "the embedded PostgreSQL outlived streamdi serve"
    assert not postmaster_pid.exists()
    # every pushed event was drained from Kafka into staging and acknowledged by both targets
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["status", "--json", "--url", "http://127.0.0.1:9"]) == EXIT_OK
    staged = json.loads(capsys.readouterr().out)["staging"]
    assert staged["events"] == total == 6000
    assert staged["batches"] == 4  # one per push (a pushed request is one logical batch)
    assert {t: m["lag_batches"] for t, m in staged["migration"].items()} == {
        "postgres": 0,
        "duckdb": 0,
    }
