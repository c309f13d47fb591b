"""``streamdi`` as a child process with a given environment and an HTTP client for its service,
for the tests that run ``streamdi serve`` and stop it themselves (tests/integration/ops)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from streamdi.environment import setting_names
from tests.compose_file import REPO


class StackService:
    """``streamdi <args>`` with exactly ``env`` as its settings (nothing of this process's
    settings), its output in ``log``, and a client for the service it serves."""

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
