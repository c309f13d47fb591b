"""The service a fuzz run attacks: ``streamdi serve`` as a child process, seeded."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from ingest.broker import free_port

REPO = Path(__file__).resolve().parents[2]
SPEC = "tests.api_flows:run"
TOKEN = "fuzz-token"

#: The settings sections a run's environment must not inherit from the caller's.
_SECTIONS = ("KAFKA", "STAGING", "INGEST", "ENGINE", "STREAMDI", "MIGRATION", "POSTGRES", "API")


class FuzzTarget:
    """A ``streamdi serve`` child with both warehouses and ``API__TOKEN``, seeded with rows in
    both warehouses and one dead letter."""

    def __init__(self, state: Path, **env: str) -> None:
        self.state = state
        state.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = state / "serve.log"
        environ = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(tuple(f"{p}__" for p in _SECTIONS))
        }
        environ.update(
            STREAMDI__STATE_DIR=str(state),
            STREAMDI__LOG_LEVEL="WARNING",
            API__PORT=str(self.port),
            API__TOKEN=TOKEN,
            MIGRATION__TARGETS="duckdb,postgres",
            MIGRATION__PUSH_BATCHES="4",
            MIGRATION__PUSH_MS="300",
            ENGINE__BATCH_TIMEOUT_MS="50",
            PYTHONPATH=str(REPO),
        )
        environ.update(env)
        with self.log.open("ab") as handle:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "cli.main", "serve", SPEC],
                cwd=REPO,
                env=environ,
                stdout=handle,
                stderr=subprocess.STDOUT,
            )
        self.client = httpx.Client(
            base_url=self.url, timeout=120, headers={"Authorization": f"Bearer {TOKEN}"}
        )

    def start(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"streamdi serve exited:\n{self.log.read_text()}")
            try:
                if self.client.get("/ready").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"streamdi serve not ready in {timeout} s")
            time.sleep(0.2)
        events = [{"op": "put", "key": k, "value": k * 10, "seq": k} for k in range(200)]
        self._post("/streams/puts/events", {"events": events})
        self._post(
            "/streams/puts/events", {"events": [{"op": "put", "key": "x", "value": 1, "seq": 1}]}
        )
        while time.monotonic() < deadline:
            if any(t["staged_rows"] == 200 for t in self._get("/tables") if t["name"] == "kv"):
                break
            time.sleep(0.1)
        self._post("/migration/push", {})

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        response = self.client.post(path, json=body)
        response.raise_for_status()
        return response.json()

    def _get(self, path: str) -> Any:
        response = self.client.get(path)
        response.raise_for_status()
        return response.json()

    def stop(self) -> int:
        self.client.close()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(120)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


@contextmanager
def fuzz_target(state: Path | None = None, **env: str) -> Iterator[FuzzTarget]:
    """A started and seeded :class:`FuzzTarget`, stopped afterwards."""
    with tempfile.TemporaryDirectory(prefix="streamdi-fuzz-") as tmp:
        target = FuzzTarget(state or Path(tmp) / "state", **env)
        try:
            target.start()
            yield target
        finally:
            target.stop()
