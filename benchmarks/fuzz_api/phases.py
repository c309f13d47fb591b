"""The phases of a fuzz run (see :mod:`benchmarks.fuzz_api`) and :func:`fuzz`, which runs them."""

from __future__ import annotations

import os
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks.fuzz_api.client import FuzzClient, ServiceStopped, send_raw
from benchmarks.fuzz_api.report import FuzzReport

#: The share of the request budget each schemathesis phase gets (the deterministic phases take
#: what they need first).
SHARES = {"positive": 0.3, "negative": 0.3, "stateful": 0.4}

#: Methods a client may send; those a path does not declare must get 405 with ``Allow``.
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


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


def _validate(client: FuzzClient, case: Any, response: Any, phase: str) -> None:
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


def _auth_phase(client: FuzzClient, schema: Any, token: str) -> None:
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
            response = send_raw(client, operation.label, operation.method, path, headers)
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


def _methods_phase(client: FuzzClient, schema: Any, token: str) -> None:
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
    client: FuzzClient, schema: Any, mode: str, budget: int, seed: int, deadline: float
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


def _stateful_phase(
    client: FuzzClient, schema: Any, budget: int, seed: int, deadline: float
) -> None:
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


def _link_phase(client: FuzzClient, token: str) -> None:
    """Follow the link from ``POST /query`` to ``GET /query/{answer_id}`` once on purpose: a
    one-row page of the first table, then its next page. The state machine follows links at
    random, and under load it may not reach a 200 page within its budget."""
    auth = {"Authorization": f"Bearer {token}"}
    tables = client.raw("links", "GET /tables", "GET", "/tables", auth)
    listed = tables.json() if tables is not None and tables.status_code == 200 else []
    names = [t["name"] for t in listed if isinstance(t, dict) and "name" in t]
    for name in names:
        first = client.raw(
            "links",
            "POST /query",
            "POST",
            "/query",
            auth,
            {"sql": f'SELECT * FROM "{name}"', "page_size": 1},
        )
        if first is None or first.status_code != 200:
            continue
        answer = first.json()
        if answer.get("next_offset") is None:
            continue
        client.raw(
            "links",
            "GET /query/{answer_id}",
            "GET",
            f"/query/{answer['answer_id']}?offset={answer['next_offset']}&limit=1",
            auth,
        )
        return


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
    client = FuzzClient(url, token, report)
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
        _link_phase(client, token)
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
