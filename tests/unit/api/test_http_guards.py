"""The HTTP layer in front of the routes (FastAPI's test client, no server): bearer tokens,
405 with ``Allow``, request body limits, strict JSON, errors that render whatever they echo, a
bug answered as a JSON 500, and the OpenAPI description of all of it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from api.app import create_app
from api.openapi import LINKS
from api.routes import ROUTERS
from api.service import QueryService
from streamdi.errors import ConfigurationError
from tests.unit.api.harness import ShopStage, shop_service, shop_settings

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def stage(tmp_path: Path) -> Iterator[ShopStage]:
    stage = ShopStage(tmp_path / "staging.duckdb")
    stage.stage_range(1, 2)
    yield stage
    stage.store.close()


def client_for(stage: ShopStage, tmp: Path, **api: Any) -> tuple[TestClient, QueryService]:
    settings = shop_settings(tmp, **api)
    service, _ = shop_service(stage, settings)
    return TestClient(create_app(service, settings), raise_server_exceptions=False), service


@pytest.fixture
def guarded(stage: ShopStage, tmp_path: Path) -> Iterator[TestClient]:
    client, service = client_for(stage, tmp_path, token=TOKEN, max_body_mb=0.01)
    with client:
        yield client
    service.close()


def error_of(response: Any) -> tuple[int, str]:
    body = response.json()
    assert set(body) == {"error"} and body["error"]["reason"], body
    return response.status_code, body["error"]["code"]


@pytest.mark.parametrize(
    ("headers", "status", "code"),
    [
        ([], 401, "unauthorized"),
        ([("Authorization", f"Bearer {TOKEN}x")], 401, "unauthorized"),
        ([("Authorization", f"Bearer {TOKEN[:-1]}")], 401, "unauthorized"),
        ([("Authorization", f"Basic {TOKEN}")], 401, "unauthorized"),
        ([("Authorization", TOKEN)], 401, "unauthorized"),
        ([("Authorization", "Bearer")], 401, "unauthorized"),
        ([("Authorization", f"Bearer{TOKEN}")], 401, "unauthorized"),
        ([("Authorization", f"Token {TOKEN}")], 401, "unauthorized"),
        ([("Authorization", f"Bearer {TOKEN}"), ("Authorization", f"Bearer {TOKEN}")], 400, ""),
        ([("Authorization", f"Bearer {TOKEN}"), ("authorization", "Bearer nope")], 400, ""),
    ],
)
def test_only_one_valid_bearer_token_passes(
    guarded: TestClient, headers: list[tuple[str, str]], status: int, code: str
) -> None:
    for method, path in (("GET", "/health"), ("GET", "/metrics"), ("POST", "/query")):
        response = guarded.request(method, path, headers=headers, json={"sql": "SELECT 1"})
        assert error_of(response) == (status, code or "ambiguous_credentials"), response.text
        if status == 401:
            assert response.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER"])
def test_the_scheme_is_case_insensitive(guarded: TestClient, scheme: str) -> None:
    assert guarded.get("/health", headers={"Authorization": f"{scheme} {TOKEN}"}).status_code == 200


def test_refusals_are_counted_as_unauthorized(guarded: TestClient) -> None:
    guarded.get("/tables")
    metrics = guarded.get("/metrics", headers=AUTH).text
    assert 'streamdi_http_requests_total{method="GET",route="unauthorized",status="401"}' in metrics


def test_an_empty_or_unsendable_token_is_refused_at_startup(tmp_path: Path) -> None:
    for token in ("", "two words", "naïve"):
        with pytest.raises(ConfigurationError, match="API__TOKEN"):
            shop_settings(tmp_path, token=token)


def test_every_undeclared_method_is_405_with_allow(guarded: TestClient) -> None:
    app: Any = guarded.app
    # the app's own routes and those of its routers (FastAPI includes a router as one entry)
    declared = [*app.routes, *(route for router in ROUTERS for route in router.routes)]
    routes = [r for r in declared if isinstance(r, APIRoute)]
    assert len(routes) >= 16
    for route in routes:
        path = route.path.replace("{answer_id}", "0" * 32).replace("{stream}", "events")
        for method in ("GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"):
            if method in route.methods:
                continue
            response = guarded.request(method, path, headers=AUTH)
            assert error_of(response) == (405, "method_not_allowed"), (method, path)
            assert set(response.headers["allow"].split(", ")) == route.methods, (method, path)


def test_a_body_over_the_limit_is_413_and_closes(guarded: TestClient) -> None:
    big = b'{"sql": "' + b"x" * 20_000 + b'"}'
    declared = guarded.post(
        "/query", content=big, headers={**AUTH, "content-type": "application/json"}
    )
    assert error_of(declared) == (413, "body_too_large")
    assert declared.headers["connection"] == "close"

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        yield b'{"sql": "'
        for _ in range(20):
            yield b"x" * 1000
        yield b'"}'

    streamed = guarded.post(
        "/query", content=chunks(), headers={**AUTH, "content-type": "application/json"}
    )
    assert error_of(streamed) == (413, "body_too_large")
    pushed = guarded.post("/streams/events/events", content=big, headers=AUTH)
    assert error_of(pushed) == (413, "body_too_large")
    small = guarded.post("/query", json={"sql": "SELECT count(*) FROM accounts"}, headers=AUTH)
    assert small.status_code == 200, small.text


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        (b'{"sql": "SELECT 1", "sql": "DROP TABLE accounts"}', 422, "duplicate key 'sql'"),
        (b'{"structured": {"table": "accounts", "table": "prices"}}', 422, "duplicate key"),
        (b"[" * 5000 + b"]" * 5000, 400, "RecursionError"),
        (b'{"sql": "\xff\xfe"}', 400, "UnicodeDecodeError"),
        (b'{"sql": "SELECT 1", "watermark": ' + b"9" * 5000 + b"}", 400, "digits"),
        (b'{"sql": "SELECT 1", "watermark": 1180591620717411303424}', 422, "watermark"),
        (b'{"sql": "SELECT 1", "page_size": NaN}', 422, "page_size"),
        (b'{"sql": "SELECT 1", "x\\udc00": 1}', 422, ""),
        (b'{"sql": "SELECT \\ud800"}', 422, "valid Unicode"),
        (b'{"sql": "SELECT \\u0000"}', 422, "NUL"),
        (b'{"sql": 1}', 422, "sql"),
        (b'"SELECT 1"', 422, "body"),
        (b"null", 422, "body"),
        (b"", 422, "body"),
        (b"{not json", 422, "JSON decode error"),
    ],
)
def test_malformed_json_is_a_4xx_with_a_reason(
    guarded: TestClient, body: bytes, status: int, fragment: str
) -> None:
    response = guarded.post(
        "/query", content=body, headers={**AUTH, "content-type": "application/json"}
    )
    assert error_of(response) == (status, "invalid_request"), response.text
    assert fragment in response.json()["error"]["reason"]


def test_an_error_echoing_a_lone_surrogate_still_renders(guarded: TestClient) -> None:
    response = guarded.get("/query/" + "%ED%B3%80" * 3, headers=AUTH)
    assert error_of(response) == (404, "answer_not_found")
    unknown = guarded.post(
        "/query",
        content=b'{"structured": {"table": "accounts", "where": [{"column": "x", "op": "\\udc00"}]}}',
        headers={**AUTH, "content-type": "application/json"},
    )
    assert error_of(unknown) == (422, "invalid_request")


def test_a_bug_is_a_json_500_naming_an_error_id_not_the_exception_text(
    stage: ShopStage, tmp_path: Path
) -> None:
    client, service = client_for(stage, tmp_path)
    with client:
        stage.store.close()  # every read of staging now fails: a state no request should meet
        response = client.get("/status")
        assert error_of(response) == (500, "internal_error")
        error = response.json()["error"]
        assert error["detail"]["error_id"] in error["reason"]
        assert "closed" not in error["reason"].lower()
        assert client.get("/health").status_code == 200
    service.close()


def test_the_description_documents_the_http_layer(guarded: TestClient) -> None:
    spec = guarded.get("/openapi.json", headers=AUTH).json()
    assert spec["security"] == [{"bearer": []}]
    operations = [
        (f"{method.upper()} {path}", op)
        for path, item in spec["paths"].items()
        for method, op in item.items()
    ]
    assert len(operations) >= 16
    for label, operation in operations:
        responses = operation["responses"]
        assert {"400", "401"} <= set(responses), label
        if "requestBody" in operation:
            assert {"408", "413"} <= set(responses), label
    ids = {op["operationId"] for _, op in operations}
    links = [
        link
        for _, op in operations
        for answer in op["responses"].values()
        for link in answer.get("links", {}).values()
    ]
    assert len(links) == len(LINKS)
    assert all(link["operationId"] in ids for link in links)


def test_without_a_token_nothing_asks_for_one(stage: ShopStage, tmp_path: Path) -> None:
    client, service = client_for(stage, tmp_path)
    with client:
        spec = client.get("/openapi.json").json()
        assert "security" not in spec
        assert "401" not in spec["paths"]["/health"]["get"]["responses"]
        two = [("Authorization", "x"), ("Authorization", "y")]
        assert client.get("/health", headers=two).status_code == 200
    service.close()


def test_binding_beyond_loopback_without_a_token_is_warned_about(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from runtime.serve import warn_if_exposed

    open_settings = shop_settings(tmp_path)
    assert not warn_if_exposed("127.0.0.1", open_settings)
    assert not warn_if_exposed("::1", open_settings)
    assert not warn_if_exposed("localhost", open_settings)
    assert not warn_if_exposed("0.0.0.0", shop_settings(tmp_path, token=TOKEN))
    assert capsys.readouterr().err == ""
    assert warn_if_exposed("0.0.0.0", open_settings)
    assert warn_if_exposed("10.1.2.3", open_settings)
    assert "without API__TOKEN" in capsys.readouterr().err
