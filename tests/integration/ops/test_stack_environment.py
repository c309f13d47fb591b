"""The compose stack's ``streamdi`` service, run for real without Docker: its environment and
command from docker-compose.yml (plus the image's ENV), with only the addresses of the other
services rewritten to an embedded broker and an embedded PostgreSQL. It must start, answer health
and readiness, ingest pushed events into both warehouses, export every metric, pause and resume
through ``streamdi pause|resume``, report ``streamdi status`` (from the service, then from the
state directory once it stopped), and stop cleanly on SIGTERM."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from api.metrics import METRIC_NAMES
from cli.commands import EXIT_OK
from cli.main import main
from ingest.broker import EmbeddedKafka, free_port
from streamdi.environment import setting_names
from tests.compose_file import REPO, command, dockerfile_env, environment, load_compose
from tests.integration.migration.conftest import PostgresServer

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]


def rewrite_addresses(
    env: dict[str, str], broker: str, postgres_dsn: str, state: Path, port: int
) -> dict[str, str]:
    """``env`` with every address of another compose service replaced by an embedded one (and
    the state directory and port made this test's); nothing else changes."""
    services = set(load_compose()["services"])
    out = dict(env)
    for address in env["KAFKA__BOOTSTRAP_SERVERS"].split(","):
        assert address.rsplit(":", 1)[0] in services
    out["KAFKA__BOOTSTRAP_SERVERS"] = broker
    assert urlsplit(env["POSTGRES__DSN"]).hostname in services
    out["POSTGRES__DSN"] = postgres_dsn
    assert urlsplit(env["SPARK__MASTER"]).hostname in services
    out["SPARK__MASTER"] = "local[1]"  # the kv batches stay below SPARK__MIN_TRANSACTIONS
    out["STREAMDI__STATE_DIR"] = str(state)
    out["API__HOST"] = "127.0.0.1"
    out["API__PORT"] = str(port)
    assert set(out) == set(env), "only values are rewritten"
    return out


class StackService:
    def __init__(self, env: dict[str, str], args: list[str], log: Path) -> None:
        self.env = env
        self.url = f"http://127.0.0.1:{env['API__PORT']}"
        self.log = log
        base = {k: v for k, v in os.environ.items() if k.upper() not in setting_names()}
        base["PYTHONPATH"] = str(REPO)
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "cli.main", *args],
                cwd=REPO,
                env={**base, **env},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.client = httpx.Client(base_url=self.url, timeout=60)

    def wait(self, path: str, timeout: float = 120) -> httpx.Response:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"the service exited:\n{self.log.read_text()}"
            try:
                response = self.client.get(path)
                if response.status_code == 200:
                    return response
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"{path} not 200 in {timeout} s:\n{self.log.read_text()}")

    def status(self) -> dict[str, Any]:
        data: dict[str, Any] = self.client.get("/status").json()
        return data

    def until(self, check: Any, what: str, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            status = self.status()
            if check(status):
                return status
            assert time.monotonic() < deadline, f"{what}: {json.dumps(status, indent=1)}"
            time.sleep(0.1)


@pytest.fixture(scope="module")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    server = PostgresServer(tmp_path_factory.mktemp("stack-postgres") / "data")
    try:
        yield server
    finally:
        server.server.cleanup()


def push(service: StackService, first_seq: int, n: int) -> dict[str, Any]:
    events = [
        {"op": "put", "key": seq % 17, "value": seq * 10, "seq": seq}
        for seq in range(first_seq, first_seq + n)
    ]
    response = service.client.post("/streams/puts/events", json={"events": events})
    assert response.status_code == 200, response.text
    receipt: dict[str, Any] = response.json()
    assert receipt["events"] == n and receipt["rejects"] == 0
    return receipt


def metric(text: str, name: str, labels: str = "") -> float:
    match = re.search(rf"^{re.escape(name + labels)} (\S+)$", text, re.MULTILINE)
    assert match is not None, f"{name}{labels} not in /metrics"
    return float(match.group(1))


def test_the_compose_environment_runs_against_embedded_services(
    broker: EmbeddedKafka,
    postgres: PostgresServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    compose = load_compose()["services"]["streamdi"]
    image = {k: v for k, v in dockerfile_env().items() if k.upper() in setting_names()}
    env = rewrite_addresses(
        {**image, **environment(compose)},
        broker.bootstrap_servers,
        postgres.database(),
        tmp_path / "state",
        free_port(),
    )
    assert env["ENGINE__EXECUTOR"] == "spark" and env["MIGRATION__TARGETS"] == "postgres,duckdb"
    service = StackService(env, command(compose), tmp_path / "serve.log")
    try:
        # 1. health and readiness, as the compose healthcheck asks
        service.wait("/ready")
        assert service.client.get("/health").json()["status"] == "ok"
        done = subprocess.run(
            [sys.executable, "-m", "streamdi.probe", f"{service.url}/ready"], timeout=30
        )
        assert done.returncode == 0

        # 2. events pushed over HTTP reach staging and both warehouses
        receipt = push(service, 1, 40)
        status = service.until(
            lambda s: (
                s["streams"]["puts"]["last_batch"] >= receipt["last_batch"]
                and all(t["lag_batches"] == 0 for t in s["migration"].values())
                and s["streams"]["puts"]["lag_records"] == 0
            ),
            "staged, migrated and consumed",
        )
        assert set(status["migration"]) == {"postgres", "duckdb"}
        assert status["pipeline"] == {"state": "running", "error": None, "paused": False}
        text = service.client.get("/metrics").text
        exported = set(re.findall(r"^# TYPE (\S+) ", text, re.MULTILINE))
        assert set(METRIC_NAMES) <= exported, set(METRIC_NAMES) - exported
        assert metric(text, "streamdi_engine_events_total") == 40
        assert metric(text, "streamdi_batch_latency_seconds_count") >= 1
        assert metric(text, "streamdi_engine_events_per_second") > 0
        assert metric(text, "streamdi_consumer_lag_records", '{stream="puts"}') == 0
        assert metric(text, "streamdi_migration_lag_batches", '{target="postgres"}') == 0
        assert metric(text, "streamdi_staging_bytes") > 0
        assert metric(text, "streamdi_ingest_paused") == 0

        # 3. pause: pushed events wait in Kafka (lag grows, staging stays); resume: they land
        watermark = status["staging"]["watermark"]
        assert main(["pause", "--url", service.url, "--json"]) == EXIT_OK
        assert json.loads(capsys.readouterr().out)["pipeline"]["paused"] is True
        push(service, 41, 25)
        paused = service.until(
            lambda s: (s["streams"]["puts"]["lag_records"] or 0) > 0, "lag while paused"
        )
        assert paused["staging"]["watermark"] == watermark
        text = service.client.get("/metrics").text
        assert metric(text, "streamdi_ingest_paused") == 1
        assert metric(text, "streamdi_consumer_lag_records", '{stream="puts"}') > 0
        assert main(["resume", "--url", service.url]) == EXIT_OK
        assert "ingest consuming" in capsys.readouterr().out
        service.until(
            lambda s: (
                s["staging"]["watermark"] > watermark and s["streams"]["puts"]["lag_records"] == 0
            ),
            "consumed after resume",
        )

        # 4. streamdi status from the service
        assert main(["status", "--url", service.url, "--json"]) == EXIT_OK
        summary = json.loads(capsys.readouterr().out)
        assert summary["running"] is True and summary["pipeline"]["state"] == "running"
        assert main(["status", "--url", service.url]) == EXIT_OK
        assert "pipeline    running" in capsys.readouterr().out
    finally:
        if service.process.poll() is None:
            service.process.send_signal(signal.SIGTERM)
        code = service.process.wait(120)
        service.client.close()
    # 5. SIGTERM: a clean exit, every committed event is in the warehouses
    assert code == 0, service.log.read_text()
    assert "Traceback" not in service.log.read_text()
    import psycopg2

    con = psycopg2.connect(env["POSTGRES__DSN"])
    with con.cursor() as cur:
        cur.execute("SELECT count(*) FROM kv_delta.log UNION ALL SELECT count(*) FROM kv.log")
        rows = sum(r[0] for r in cur.fetchall())
    con.close()
    assert rows == 65

    # 6. streamdi status with no service: the state directory's summary
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["status", "--json"]) == EXIT_OK
    offline = json.loads(capsys.readouterr().out)
    assert offline["running"] is False
    assert offline["staging"]["dataflow"] == "kv" and offline["staging"]["events"] == 65
    assert offline["staging"]["migration"]["postgres"]["lag_batches"] == 0
