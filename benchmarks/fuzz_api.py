"""``python -m benchmarks.fuzz_api``: schemathesis against a real ``streamdi serve``, counted.

The run starts ``streamdi serve`` (its own broker, embedded PostgreSQL and a DuckDB warehouse,
the kv dataflow of ``tests.api_flows`` fed over HTTP, ``API__TOKEN`` set), seeds it with rows in
both warehouses and a dead letter, and sends requests drawn from its OpenAPI description in five
phases:

1. ``auth``: every operation without a token, with a wrong one, another scheme, an empty one and
   two ``Authorization`` headers: 401, 401, 401, 401 and 400 ``ambiguous_credentials``;
2. ``methods``: every path with every method it does not declare: 405 with ``Allow``;
3. ``positive`` and 4. ``negative``: schemathesis' cases per operation, valid and invalid ones;
5. ``stateful``: schemathesis' state machine, following the OpenAPI links between operations
   (an answer to its pages, a table to a query, a dead letter to its replay...).

Every response is checked: no 5xx, its status declared for its operation, its content type and
body those the description gives. Every request goes over one keep-alive connection, and a
request that finds it closed without a ``Connection: close`` answer before it counts as a
connection reset. The serve log must not hold an internal error. The report (JSON and Markdown)
gives the requests per operation and status, the failures with a curl command to reproduce each,
the time and the load average.

Full run (about 20,000 requests; 10-20 minutes on two cores)::

    .venv/bin/python -m benchmarks.fuzz_api --requests 20000 --out reports/fuzz-api

``tests/integration/security/test_http_fuzz.py`` runs :func:`fuzz` with a small budget in the
default test run. schemathesis is a development dependency (``make install-dev``).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from ingest.broker import free_port

REPO = Path(__file__).resolve().parents[1]
SPEC = "tests.api_flows:run"
TOKEN = "fuzz-token"

#: A request that finds its keep-alive connection closed this soon after the previous answer was
#: reset by the server (uvicorn closes an idle connection after 5 s).
RESET_WINDOW_S = 3.0

#: The share of the request budget each schemathesis phase gets (the deterministic phases take
#: what they need first).
SHARES = {"positive": 0.3, "negative": 0.3, "stateful": 0.4}

#: The settings sections a run's environment must not inherit from the caller's.
_SECTIONS = ("KAFKA", "STAGING", "INGEST", "ENGINE", "STREAMDI", "MIGRATION", "POSTGRES", "API")

#: Methods a client may send; those a path does not declare must get 405 with ``Allow``.
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


#: Requests known to stop the service (the pipeline fails, ``streamdi serve`` exits), reported
#: and pinned by strict xfail tests in ``tests/integration/security/test_http_attacks.py``. The
#: run does not send them (it would end there); it counts them. Remove an entry once it is fixed.
KNOWN_CRASHES = {
    "push-nested-value": "POST /streams/{stream}/events with an event value that is a list or an "
    "object: the collector fails ('expected text, got list<...>') and the pipeline stops",
    "replay-to-stream": "POST /deadletters/replay re-offering an event to a real stream (by id, "
    "or an entry) that does not parse: the pipeline stops (KeyError on the stream)",
}


def known_crash(case: Any, streams: set[str]) -> str | None:
    """The :data:`KNOWN_CRASHES` key ``case`` would trigger, or None."""
    label = case.operation.label
    body = case.body if isinstance(case.body, dict) else {}
    if label == "POST /streams/{stream}/events":
        events = body.get("events")
        if isinstance(events, list) and any(
            isinstance(event, dict) and any(isinstance(v, list | dict) for v in event.values())
            for event in events
        ):
            return "push-nested-value"
    if label == "POST /deadletters/replay":
        entries = body.get("entries")
        if body.get("ids") or (
            isinstance(entries, list)
            and any(isinstance(e, dict) and e.get("stream") in streams for e in entries)
        ):
            return "replay-to-stream"
    return None


class ServiceStopped(Exception):
    """The service stopped answering: the run ends here."""


@dataclass
class Failure:
    """One check that failed, with what reproduces it."""

    phase: str
    operation: str
    check: str
    status: int | None
    message: str
    reproduce: str


@dataclass
class FuzzReport:
    """What a run sent and found. ``by_operation[op][status]`` counts answers; ``failures`` keeps
    the first :data:`KEEP_FAILURES` of each (operation, check, status); ``resets`` counts
    requests that found their keep-alive connection reset."""

    requests: int = 0
    seconds: float = 0.0
    by_operation: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    by_phase: Counter[str] = field(default_factory=Counter)
    failures: list[Failure] = field(default_factory=list)
    failure_counts: Counter[str] = field(default_factory=Counter)
    resets: int = 0
    transport_errors: int = 0
    skipped_known: Counter[str] = field(default_factory=Counter)
    stopped: str | None = None
    load_average: dict[str, list[float]] = field(default_factory=dict)
    server_errors_logged: int | None = None

    @property
    def server_errors(self) -> int:
        """Answers with a 5xx status."""
        return sum(
            n
            for statuses in self.by_operation.values()
            for status, n in statuses.items()
            if int(status) >= 500
        )

    @property
    def ok(self) -> bool:
        return (
            not self.failures
            and self.resets == 0
            and self.transport_errors == 0
            and not self.server_errors_logged
            and self.stopped is None
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "seconds": round(self.seconds, 1),
            "requests_per_second": round(self.requests / self.seconds, 1) if self.seconds else 0,
            "server_errors": self.server_errors,
            "resets": self.resets,
            "transport_errors": self.transport_errors,
            "server_errors_logged": self.server_errors_logged,
            "service_stopped": self.stopped,
            "skipped_known_crashes": dict(self.skipped_known),
            "failures": len(self.failures),
            "failure_counts": dict(self.failure_counts),
            "load_average": self.load_average,
            "by_phase": dict(self.by_phase),
            "by_operation": {
                op: dict(sorted(statuses.items()))
                for op, statuses in sorted(self.by_operation.items())
            },
            "failure_examples": [asdict(f) for f in self.failures],
        }


KEEP_FAILURES = 3


class _Client:
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
        self, phase: str, label: str, method: str, path: str, headers: Mapping[str, str]
    ) -> Any:
        """One hand-made request over the same session (no token added)."""
        before = self.connections()
        try:
            response = self.session.request(method, self.url + path, headers=headers, timeout=60)
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


def _checks() -> list[Any]:
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import (
        content_type_conformance,
        response_schema_conformance,
        status_code_conformance,
    )

    return [
        not_a_server_error,
        status_code_conformance,
        content_type_conformance,
        response_schema_conformance,
    ]


def _validate(client: _Client, case: Any, response: Any, phase: str) -> None:
    from schemathesis.core.failures import FailureGroup

    try:
        case.validate_response(response, checks=_checks())
    except FailureGroup as group:
        for failure in group.exceptions:
            client.fail(
                phase,
                case.operation.label,
                getattr(failure, "title", type(failure).__name__),
                response.status_code,
                str(failure),
                case.as_curl_command(headers=client.auth),
            )
    except AssertionError as exc:
        client.fail(
            phase,
            case.operation.label,
            type(exc).__name__,
            response.status_code,
            str(exc),
            case.as_curl_command(headers=client.auth),
        )


def _auth_phase(client: _Client, schema: Any, token: str) -> None:
    """Every operation refused without exactly one valid bearer token."""
    attempts: list[tuple[str, list[tuple[str, str]], int, str]] = [
        ("none", [], 401, "unauthorized"),
        ("wrong token", [("Authorization", f"Bearer {token}x")], 401, "unauthorized"),
        ("other scheme", [("Authorization", f"Basic {token}")], 401, "unauthorized"),
        ("empty token", [("Authorization", "Bearer")], 401, "unauthorized"),
        (
            "two headers",
            [("Authorization", f"Bearer {token}"), ("Authorization", f"Bearer {token}")],
            400,
            "ambiguous_credentials",
        ),
    ]
    for result in schema.get_all_operations():
        operation = result.ok()
        path = operation.path.replace("{answer_id}", "0" * 32).replace("{stream}", "puts")
        for name, headers, status, code in attempts:
            response = _raw_with_headers(client, operation.label, operation.method, path, headers)
            if response is None:
                continue
            got = _error_code(response)
            if response.status_code != status or got != code:
                client.fail(
                    "auth",
                    operation.label,
                    f"auth: {name}",
                    response.status_code,
                    f"expected {status} {code}, got {response.status_code} {response.text[:300]}",
                    f"{operation.method.upper()} {path} with {headers}",
                )
            elif status == 401 and response.headers.get("www-authenticate") != "Bearer":
                client.fail(
                    "auth",
                    operation.label,
                    "auth: WWW-Authenticate",
                    401,
                    "a 401 without WWW-Authenticate: Bearer",
                    f"{operation.method.upper()} {path}",
                )


def _raw_with_headers(
    client: _Client, label: str, method: str, path: str, headers: list[tuple[str, str]]
) -> Any:
    """One request with exactly these header lines (repeated names kept, which ``requests``
    would merge), on a connection of its own; a :class:`_RawAnswer`, or None (counted)."""
    host, port = client.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        connection.putrequest(method.upper(), path)
        for name, value in headers:
            connection.putheader(name, value)
        connection.putheader("Content-Length", "0")
        connection.endheaders()
        answer = connection.getresponse()
        raw = _RawAnswer(answer.status, dict(answer.getheaders()), answer.read())
    except OSError as exc:
        client.report.transport_errors += 1
        client.fail("auth", label, "transport", None, repr(exc), f"{method} {path} {headers}")
        return None
    finally:
        connection.close()
    client.record("auth", label, raw.status_code)
    return raw


@dataclass
class _RawAnswer:
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


def _methods_phase(client: _Client, schema: Any, token: str) -> None:
    """Every undeclared method on every path: 405 ``method_not_allowed`` with ``Allow``."""
    declared: dict[str, set[str]] = defaultdict(set)
    for result in schema.get_all_operations():
        operation = result.ok()
        declared[operation.path].add(operation.method.upper())
    auth = {"Authorization": f"Bearer {token}"}
    for path, methods in sorted(declared.items()):
        concrete = path.replace("{answer_id}", "0" * 32).replace("{stream}", "puts")
        allowed = set(methods)
        for method in METHODS:
            if method in methods:
                continue
            label = f"{method} {path}"
            response = client.raw("methods", label, method, concrete, auth)
            if response is None:
                continue
            got = _error_code(response)
            allow = {m.strip() for m in response.headers.get("allow", "").split(",") if m.strip()}
            if (
                response.status_code != 405
                or (method != "HEAD" and got != "method_not_allowed")
                or allow != allowed
            ):
                client.fail(
                    "methods",
                    label,
                    "405 with Allow",
                    response.status_code,
                    f"expected 405 method_not_allowed with Allow {sorted(allowed)}, got "
                    f"{response.status_code} Allow={sorted(allow)} {response.text[:200]}",
                    f"{method} {concrete}",
                )


def _error_code(response: Any) -> Any:
    """The ``error.code`` of a JSON error answer, else None."""
    try:
        body = response.json()
    except ValueError:
        return None
    error = body.get("error") if isinstance(body, dict) else None
    return error.get("code") if isinstance(error, dict) else None


def _per_operation_phase(
    client: _Client, schema: Any, mode: str, budget: int, seed: int, deadline: float
) -> None:
    """``budget`` schemathesis cases spread over the operations, all of one generation mode."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hypothesis_seed
    from hypothesis.errors import Unsatisfiable
    from schemathesis import GenerationMode

    operations = [result.ok() for result in schema.get_all_operations()]
    each = max(1, budget // max(1, len(operations)))
    generation = GenerationMode.NEGATIVE if mode == "negative" else GenerationMode.POSITIVE
    for operation in operations:
        if time.monotonic() > deadline:
            return

        @hypothesis_seed(seed)
        @settings(
            max_examples=each,
            deadline=None,
            database=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy(generation_mode=generation))
        def send(case: Any) -> None:
            if time.monotonic() > deadline:
                return
            response = client.call_case(case, mode)
            if response is not None:
                _validate(client, case, response, mode)

        try:
            send()
        except ServiceStopped:
            raise
        except Unsatisfiable:
            pass  # an operation with nothing to negate (no parameters, no body)
        except Exception as exc:  # a generation problem is a finding about the description
            client.fail(mode, operation.label, "generation", None, repr(exc), "")


def _stateful_phase(client: _Client, schema: Any, budget: int, seed: int, deadline: float) -> None:
    """schemathesis' state machine over the OpenAPI links until ``budget`` requests are sent."""
    from hypothesis import HealthCheck, Phase, reject, settings
    from hypothesis.errors import Unsatisfiable
    from hypothesis.stateful import run_state_machine_as_test

    base = schema.as_state_machine()

    class Machine(base):  # type: ignore[misc, valid-type]
        def call(self, case: Any, **kwargs: Any) -> Any:
            response = client.call_case(case, "stateful")
            if response is None:
                reject()  # not sent (a known crash) or no answer: this scenario ends here
            return response

        def validate_response(self, response: Any, case: Any, **kwargs: Any) -> None:
            _validate(client, case, response, "stateful")

    start = client.report.by_phase["stateful"]
    round_ = 0
    while client.report.by_phase["stateful"] - start < budget and time.monotonic() < deadline:
        round_ += 1
        try:
            run_state_machine_as_test(
                Machine,
                settings=settings(
                    max_examples=50,
                    stateful_step_count=8,
                    deadline=None,
                    database=None,
                    phases=[Phase.generate],
                    suppress_health_check=list(HealthCheck),
                    derandomize=False,
                ),
            )
        except ServiceStopped:
            raise
        except Unsatisfiable:
            continue  # every scenario of this round met a request it does not send
        except Exception as exc:
            client.fail("stateful", "state machine", "stateful", None, repr(exc)[:2000], "")
            if round_ > 3 and client.report.by_phase["stateful"] == start:
                return  # the machine cannot run at all; reported once is enough


def _streams(schema: Any) -> set[str]:
    """The streams the push route takes (its ``stream`` parameter's enum)."""
    operation = schema["/streams/{stream}/events"]["POST"]
    for parameter in operation.definition.raw.get("parameters", []):
        if parameter.get("name") == "stream":
            return set(parameter.get("schema", {}).get("enum", []))
    return set()


def fuzz(
    url: str,
    *,
    token: str,
    requests: int,
    seed: int = 0,
    max_seconds: float | None = None,
    log: Path | None = None,
) -> FuzzReport:
    """Fuzz the service at ``url`` (its ``API__TOKEN`` is ``token``) with about ``requests``
    requests in the phases of the module docstring; stops early after ``max_seconds``.
    ``log``: the service's log, searched afterwards for internal errors."""
    import schemathesis

    report = FuzzReport()
    client = _Client(url, token, report)
    load_before = list(os.getloadavg())
    started = time.monotonic()
    deadline = started + (max_seconds if max_seconds is not None else 10**9)
    schema = schemathesis.openapi.from_url(
        f"{url}/openapi.json", headers={"Authorization": f"Bearer {token}"}
    )
    client.streams = _streams(schema)
    try:
        _auth_phase(client, schema, token)
        _methods_phase(client, schema, token)
        left = max(0, requests - report.requests)
        _per_operation_phase(
            client, schema, "positive", int(left * SHARES["positive"]), seed, deadline
        )
        _per_operation_phase(
            client, schema, "negative", int(left * SHARES["negative"]), seed + 1, deadline
        )
        _stateful_phase(client, schema, max(0, requests - report.requests), seed + 2, deadline)
    except ServiceStopped:
        pass  # reported in report.stopped
    report.seconds = time.monotonic() - started
    report.load_average = {"before": load_before, "after": list(os.getloadavg())}
    if log is not None:
        text = log.read_text(errors="replace")
        report.server_errors_logged = text.count("request failed error_id=") + text.count(
            "Exception in ASGI application"
        )
    return report


# -- the service under test ------------------------------------------------------------------------


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
                [sys.executable, "-m", "streamdi.cli", "serve", SPEC],
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


# -- the report ------------------------------------------------------------------------------------


def markdown(report: FuzzReport, *, budget: int) -> str:
    """The report for people: totals, per operation the answers by status, the failures."""
    data = report.as_dict()
    lines = [
        "# HTTP fuzz run",
        "",
        f"- requests: {data['requests']} (budget {budget}) in {data['seconds']} s "
        f"({data['requests_per_second']}/s)",
        f"- 5xx answers: {data['server_errors']}; connection resets: {data['resets']}; "
        f"transport errors: {data['transport_errors']}; internal errors in the serve log: "
        f"{data['server_errors_logged']}",
        f"- failed checks: {sum(report.failure_counts.values())} "
        f"({len(report.failure_counts)} distinct)",
        f"- load average (1, 5, 15 min) before {data['load_average'].get('before')}, after "
        f"{data['load_average'].get('after')}",
        f"- requests per phase: {data['by_phase']}",
        f"- not sent, known to stop the service (reported): {data['skipped_known_crashes']}",
        f"- service stopped: {'no' if report.stopped is None else 'YES'}",
        "",
        "| operation | requests | answers by status |",
        "|---|---:|---|",
    ]
    for operation, statuses in data["by_operation"].items():
        total = sum(statuses.values())
        spread = ", ".join(f"{s}: {n}" for s, n in statuses.items())
        lines.append(f"| `{operation}` | {total} | {spread} |")
    if report.stopped is not None:
        lines += ["", "## The service stopped", "", "```", report.stopped, "```"]
    if report.skipped_known:
        lines += ["", "## Known crashes (not sent)", ""]
        lines += [f"- `{key}`: {KNOWN_CRASHES[key]}" for key in sorted(report.skipped_known)]
    if report.failures:
        lines += ["", "## Failures (first examples of each)", ""]
        for failure in report.failures:
            lines += [
                f"### {failure.operation}: {failure.check} ({failure.status}, {failure.phase})",
                "",
                "```",
                failure.message,
                "```",
                "",
                "```",
                failure.reproduce,
                "```",
                "",
            ]
    return "\n".join(lines) + "\n"


def write_report(report: FuzzReport, out: Path, *, budget: int) -> tuple[Path, Path]:
    """``out``.json and ``out``.md."""
    out.parent.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out.with_suffix(".json"), out.with_suffix(".md")
    json_path.write_text(json.dumps({"budget": budget, **report.as_dict()}, indent=2) + "\n")
    md_path.write_text(markdown(report, budget=budget))
    return json_path, md_path


def main(argv: list[str] | None = None, *, run: Callable[..., FuzzReport] = fuzz) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.fuzz_api",
        description="Fuzz a fresh `streamdi serve` with schemathesis (every route, stateful "
        "links) and report requests per route and status; exit 1 on any finding.",
    )
    parser.add_argument("--requests", type=int, default=20_000, help="request budget")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-seconds", type=float, default=None, help="stop after this long")
    parser.add_argument(
        "--out", type=Path, default=Path("reports/fuzz-api"), help="report path (.json, .md)"
    )
    args = parser.parse_args(argv)
    with fuzz_target() as target:
        report = run(
            target.url,
            token=TOKEN,
            requests=args.requests,
            seed=args.seed,
            max_seconds=args.max_seconds,
            log=target.log,
        )
    json_path, md_path = write_report(report, args.out, budget=args.requests)
    print(markdown(report, budget=args.requests))
    print(f"reports: {json_path} {md_path}", file=sys.stderr)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
