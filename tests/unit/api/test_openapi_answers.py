"""Every JSON answer is described: ``/openapi.json`` names a model for the 200 answer of every
JSON route, and what the routes send matches those models key for key (the wire as it was before
the answers were typed: same keys, explicit nulls kept, state-dependent keys only when set)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from tests.unit.api.harness import ShopStage, shop_service, shop_settings

METHODS = ("get", "put", "post", "delete", "patch")


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    stage = ShopStage(tmp_path / "staging.duckdb")
    settings = shop_settings(tmp_path)
    service, migrator = shop_service(stage, settings)
    stage.stage_range(1, 4)
    migrator.migrate(via="push", merge="force")
    stage.stage_range(5, 6)
    with TestClient(create_app(service, settings)) as served:
        yield served
    service.close()
    migrator.close()


def _resolve(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def _answer_schema(spec: dict[str, Any], path: str, method: str) -> dict[str, Any]:
    answer = spec["paths"][path][method]["responses"]["200"]
    schema: dict[str, Any] = answer["content"]["application/json"]["schema"]
    return schema


def _matches(spec: dict[str, Any], schema: dict[str, Any] | bool, value: Any, where: str) -> None:
    """``value`` has no key its (object) schema lacks and every key it requires, recursively
    through named models, lists and maps (``true``: anything)."""
    if isinstance(schema, bool):
        return
    schema = _resolve(spec, schema)
    if "anyOf" in schema:
        if value is None:
            return
        named = [s for s in schema["anyOf"] if s.get("type") != "null"]
        schema = _resolve(spec, named[0]) if len(named) == 1 else {}
    if schema.get("type") == "array" and isinstance(value, list):
        for i, item in enumerate(value):
            _matches(spec, schema.get("items", {}), item, f"{where}[{i}]")
    elif schema.get("type") == "object" and isinstance(value, dict):
        properties = schema.get("properties")
        if properties is None:  # a map: every value has the map's value schema
            for key, item in value.items():
                _matches(spec, schema.get("additionalProperties") or {}, item, f"{where}.{key}")
            return
        assert set(value) <= set(properties), (where, set(value) - set(properties))
        assert set(schema.get("required", [])) <= set(value), where
        for key, item in value.items():
            _matches(spec, properties[key], item, f"{where}.{key}")


def test_every_json_route_names_its_answer(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    seen = 0
    for path, item in spec["paths"].items():
        for method in METHODS:
            if method not in item:
                continue
            content = item[method]["responses"]["200"].get("content", {})
            if path == "/metrics":
                assert set(content) == {"text/plain"}
                continue
            schema = content["application/json"]["schema"]
            named = schema.get("items", schema) if schema.get("type") == "array" else schema
            assert "$ref" in named, f"{method.upper()} {path} answers an undescribed {schema}"
            seen += 1
    assert seen == 19


def test_answers_match_their_models(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    page = client.post("/query", json={"sql": "SELECT * FROM customers", "page_size": 3}).json()
    answers: list[tuple[str, str, Any]] = [
        ("/query", "post", page),
        ("/query/{answer_id}", "get", client.get(f"/query/{page['answer_id']}").json()),
        ("/tables", "get", client.get("/tables").json()),
        ("/batches", "get", client.get("/batches").json()),
        ("/migration", "get", client.get("/migration").json()),
        ("/migration/push", "post", client.post("/migration/push", json={}).json()),
        ("/migration/pull", "post", client.post("/migration/pull").json()),
        ("/deadletters", "get", client.get("/deadletters").json()),
        ("/status", "get", client.get("/status").json()),
        ("/health", "get", client.get("/health").json()),
        ("/ready", "get", client.get("/ready").json()),
        ("/console/overview", "get", client.get("/console/overview").json()),
        ("/console/batches", "get", client.get("/console/batches").json()),
        ("/console/dataflow", "get", client.get("/console/dataflow").json()),
    ]
    for path, method, answer in answers:
        _matches(spec, _answer_schema(spec, path, method), answer, f"{method.upper()} {path}")


def test_the_wire_keeps_its_keys(client: TestClient) -> None:
    migration = client.get("/migration").json()
    assert set(migration) == {"stream", "staged_watermark", "released_through", "targets"}
    assert set(migration["targets"]["duckdb"]) == {
        "acknowledged",
        "reachable",
        "watermark",
        "pending_batches",
        "merged_through",
        "merged_at",
        "unmerged_rows",
        "busy",
        "readable",
        "mode",
    }
    pushed = client.post("/migration/push", json={"merge": "never"}).json()
    assert set(pushed) == {"via", "staged_watermark", "released_through", "seconds", "targets"}
    assert set(pushed["targets"]["duckdb"]) == {
        "from",
        "watermark",
        "batches",
        "rows",
        "merged_rows",
        "error",
        "bootstrap",
    }
    assert pushed["targets"]["duckdb"]["error"] is None
    status = client.get("/status").json()
    assert set(status) == {
        "service",
        "pipeline",
        "staging",
        "streams",
        "migration",
        "engine",
        "broker",
    }
    assert status["broker"] is None  # no pipeline hosted, so no broker
    assert status["pipeline"] == {"state": "absent", "error": None, "paused": False}
    assert set(status["staging"]) == {
        "path",
        "watermark",
        "released_through",
        "bytes",
        "newest_batch_age_s",
    }
    assert status["streams"]["events"] == {"last_batch": 6, "lag_records": None}
    health = client.get("/health").json()
    assert set(health) == {"status", "pipeline", "error", "uptime_s"} and health["error"] is None
    ready = client.get("/ready").json()
    assert ready == {
        "status": "ready",
        "pipeline": "absent",
        "staged_watermark": 6,
        "targets": ["duckdb"],
        "reasons": [],
    }
    batch = client.get("/batches", params={"limit": 1}).json()[0]
    assert set(batch) == {
        "batch_id",
        "status",
        "events",
        "records",
        "committed_txns",
        "aborted_txns",
        "dead_letters",
        "output_rows",
        "arrived_at",
        "executed_ms",
        "committed_at",
        "streams",
    }
