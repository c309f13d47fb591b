"""A real ``streamdi serve`` for the API integration tests: its own embedded broker, embedded
PostgreSQL and DuckDB warehouses, the kv dataflow fed over HTTP. A service that cannot start fails
the tests; it is never skipped. Also a session PostgreSQL server for in-process tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ingest.broker import free_port
from tests.integration.migration.conftest import PostgresServer

REPO = Path(__file__).resolve().parents[3]
SPEC = "tests.api_flows:run"


class ServedService:
    """A ``streamdi serve`` child process and an HTTP client for it."""

    def __init__(self, state: Path, **env: str) -> None:
        self.state = state
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = state / "serve.log"
        state.mkdir(parents=True, exist_ok=True)
        environ = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(
                (
                    "KAFKA__",
                    "STAGING__",
                    "INGEST__",
                    "ENGINE__",
                    "STREAMDI__",
                    "MIGRATION__",
                    "POSTGRES__",
                    "API__",
                )
            )
        }
        environ.update(
            STREAMDI__STATE_DIR=str(state),
            STREAMDI__LOG_LEVEL="WARNING",
            API__PORT=str(self.port),
            PYTHONPATH=str(REPO),
        )
        environ.update(env)
        handle = self.log.open("ab")
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "cli.main", "serve", SPEC],
                cwd=REPO,
                env=environ,
                stdout=handle,
                stderr=subprocess.STDOUT,
            )
        finally:
            handle.close()
        self.client = httpx.Client(base_url=self.url, timeout=60)

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"streamdi serve exited:\n{self.log.read_text()}"
            try:
                if self.client.get("/ready").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"streamdi serve not ready in {timeout} s:\n{self.log.read_text()}")

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = self.client.post(path, json=body)
        assert response.status_code == 200, f"{path}: {response.status_code} {response.text}"
        data: dict[str, Any] = response.json()
        return data

    def get(self, path: str, **params: Any) -> Any:
        response = self.client.get(path, params=params)
        assert response.status_code == 200, f"{path}: {response.status_code} {response.text}"
        return response.json()

    def stop(self, timeout: float = 120) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(
                f"streamdi serve ignored SIGTERM:\n{self.log.read_text()}"
            ) from None
        finally:
            self.client.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedService]:
    service = ServedService(
        tmp_path_factory.mktemp("serve") / "state",
        MIGRATION__TARGETS="duckdb,postgres",
        MIGRATION__PUSH_BATCHES="4",
        MIGRATION__PUSH_MS="300",
        MIGRATION__MERGE_MS="1500",
        ENGINE__BATCH_TIMEOUT_MS="50",
        INGEST__ALLOWED_LATENESS_MS="",
    )
    try:
        service.wait_ready()
        yield service
    finally:
        if service.process.poll() is None:
            service.stop()


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    server = PostgresServer(tmp_path_factory.mktemp("api-postgres") / "data")
    try:
        yield server
    finally:
        server.server.cleanup()
