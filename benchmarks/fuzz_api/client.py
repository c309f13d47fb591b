"""The fuzz run's HTTP client: one keep-alive session with the token, every answer counted,
connection resets noticed, requests known to stop the service held back."""

from __future__ import annotations

import http.client
import json
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from benchmarks.fuzz_api.known import known_crash
from benchmarks.fuzz_api.report import KEEP_FAILURES, Failure, FuzzReport

#: A request that finds its keep-alive connection closed this soon after the previous answer was
#: reset by the server (uvicorn closes an idle connection after 5 s).
RESET_WINDOW_S = 3.0


class ServiceStopped(Exception):
    """The service stopped answering: the run ends here."""


class FuzzClient:
    """Sends every case over one keep-alive ``requests`` session with the bearer token, counts
    the answers and notices connection resets."""

    def __init__(self, url: str, token: str | None, report: FuzzReport) -> None:
        import requests

        self.url = url
        self.report = report
        self.session = requests.Session()
        self.auth = {"Authorization": f"Bearer {token}"} if token else {}
        self._last_answer_at: float | None = None
        self._last_closed = False
        self.streams: set[str] = set()
        self._recent: deque[str] = deque(maxlen=5)

    def connections(self) -> int:
        total = 0
        for adapter in self.session.adapters.values():
            pools: Any = getattr(getattr(adapter, "poolmanager", None), "pools", None)
            if pools is None:
                continue
            for key in pools.keys():  # noqa: SIM118 (this container refuses plain iteration)
                total += getattr(pools.get(key), "num_connections", 0)
        return total

    def _note_connection(self, before: int, closing: bool) -> None:
        reopened = self.connections() > before
        if (
            reopened
            and self._last_answer_at is not None
            and not self._last_closed
            and time.monotonic() - self._last_answer_at < RESET_WINDOW_S
        ):
            self.report.resets += 1
        self._last_answer_at = time.monotonic()
        self._last_closed = closing

    def record(self, phase: str, operation: str, status: int) -> None:
        self.report.requests += 1
        self.report.by_phase[phase] += 1
        self.report.by_operation[operation][str(status)] += 1

    def fail(
        self, phase: str, operation: str, check: str, status: int | None, message: str, repro: str
    ) -> None:
        key = f"{operation} | {check} | {status}"
        self.report.failure_counts[key] += 1
        if self.report.failure_counts[key] <= KEEP_FAILURES:
            self.report.failures.append(
                Failure(phase, operation, check, status, message[:2000], repro[:4000])
            )

    def call_case(self, case: Any, phase: str) -> Any:
        """Send ``case``; its response, or None when it was not sent (a known crash, counted)
        or the transport failed (counted). Raises :class:`ServiceStopped` when the service no
        longer answers."""
        crash = known_crash(case, self.streams)
        if crash is not None:
            self.report.skipped_known[crash] += 1
            return None
        before = self.connections()
        curl = case.as_curl_command(headers={"Authorization": "Bearer $TOKEN"})
        self._recent.append(curl)
        try:
            response = case.call(session=self.session, headers=self.auth, timeout=120)
        except Exception as exc:
            self.report.transport_errors += 1
            self.fail(
                phase, case.operation.label, "transport", None, f"{type(exc).__name__}: {exc}", curl
            )
            self._last_answer_at = None
            self._check_alive()
            return None
        closing = "close" in ",".join(response.headers.get("connection", [])).lower()
        self._note_connection(before, closing)
        self.record(phase, case.operation.label, response.status_code)
        return response

    def _check_alive(self) -> None:
        try:
            alive: int | str = httpx.get(
                self.url + "/health", headers=self.auth, timeout=30
            ).status_code
        except httpx.HTTPError as exc:
            alive = f"{type(exc).__name__}: {exc}"
        if alive != 200:
            self.report.stopped = (
                f"the service stopped answering (/health: {alive}); the last requests:\n"
                + "\n".join(self._recent)
            )
            raise ServiceStopped(self.report.stopped)

    def raw(
        self,
        phase: str,
        label: str,
        method: str,
        path: str,
        headers: Mapping[str, str],
        body: Any = None,
    ) -> Any:
        """One hand-made request over the same session (no token added; ``body`` as JSON)."""
        before = self.connections()
        try:
            response = self.session.request(
                method, self.url + path, headers=headers, json=body, timeout=60
            )
        except Exception as exc:
            self.report.transport_errors += 1
            self.fail(
                phase, label, "transport", None, f"{type(exc).__name__}: {exc}", f"{method} {path}"
            )
            self._last_answer_at = None
            return None
        closing = "close" in response.headers.get("connection", "").lower()
        self._note_connection(before, closing)
        self.record(phase, label, response.status_code)
        return response


def send_raw(
    client: FuzzClient, label: str, method: str, path: str, headers: list[tuple[str, str]]
) -> Any:
    """One request with exactly these header lines (repeated names kept, which ``requests``
    would merge), on a connection of its own; a :class:`RawAnswer`, or None (counted)."""
    host, port = client.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        connection.putrequest(method.upper(), path)
        for name, value in headers:
            connection.putheader(name, value)
        connection.putheader("Content-Length", "0")
        connection.endheaders()
        answer = connection.getresponse()
        raw = RawAnswer(answer.status, dict(answer.getheaders()), answer.read())
    except OSError as exc:
        client.report.transport_errors += 1
        client.fail("auth", label, "transport", None, repr(exc), f"{method} {path} {headers}")
        return None
    finally:
        connection.close()
    client.record("auth", label, raw.status_code)
    return raw


@dataclass
class RawAnswer:
    status_code: int
    raw_headers: dict[str, str]
    content: bytes

    @property
    def headers(self) -> dict[str, str]:
        return {k.lower(): v for k, v in self.raw_headers.items()}

    @property
    def text(self) -> str:
        return self.content.decode(errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)
