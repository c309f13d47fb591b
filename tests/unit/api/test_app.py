"""The HTTP surface (FastAPI's test client, no server): answers and pages, errors as JSON with a
stable code, tables, batches, migration control, metrics, health, the OpenAPI description and
bearer-token auth."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.service import QueryService
from migration.migrator import Migrator
from tests.unit.api.harness import ShopStage, shop_service, shop_settings


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[TestClient, ShopStage, QueryService, Migrator]]:
    stage = ShopStage(tmp_path / "staging.duckdb")
    settings = shop_settings(tmp_path)
    service, migrator = shop_service(stage, settings)
    stage.stage_range(1, 4)
    migrator.migrate(via="push", merge="force")
    stage.stage_range(5, 6)
    with TestClient(create_app(service, settings)) as client:
        yield client, stage, service, migrator
    service.close()
    migrator.close()


def error_code(response: object) -> str:
    body = response.json()  # type: ignore[attr-defined]
    assert set(body) == {"error"} and body["error"]["reason"]
    code: str = body["error"]["code"]
    return code


def test_queries_and_pages(served: tuple[TestClient, ShopStage, QueryService, Migrator]) -> None:
    client, stage, _, _ = served
    first = client.post("/query", json={"sql": "SELECT * FROM customers", "page_size": 7})
    assert first.status_code == 200, first.text
    body = first.json()
    assert body["watermark"] == 6 and body["warehouse_watermark"] == 4
    assert body["plan"] in ("island", "migrate") and body["requested_plan"] == "auto"
    assert body["freshness"]["committed_at"] and body["freshness"]["committed_age_ms"] >= 0
    assert body["streams"] == {"events": 6}
    assert [c["name"] for c in body["columns"]][:2] == ["cid", "sk_customer"]
    assert len(body["rows"]) == 7 and body["next_offset"] == 7
    rows = list(body["rows"])
    offset = body["next_offset"]
    while offset is not None:
        page = client.get(f"/query/{body['answer_id']}", params={"offset": offset, "limit": 50})
        assert page.status_code == 200
        assert page.json()["watermark"] == 6
        rows.extend(page.json()["rows"])
        offset = page.json()["next_offset"]
    assert len(rows) == body["total_rows"] == sum(stage.truth[6]["customers"].values())
    structured = client.post(
        "/query",
        json={
            "structured": {
                "table": "accounts",
                "columns": ["aid", "balance"],
                "where": [{"column": "balance", "op": ">", "value": 50}],
                "order_by": [{"column": "aid"}],
            },
            "plan": "island",
        },
    )
    assert structured.status_code == 200, structured.text
    aids = [r[0] for r in structured.json()["rows"]]
    assert aids == sorted(aids) and all(r[1] > 50 for r in structured.json()["rows"])
    warehouse = client.post(
        "/query", json={"sql": "SELECT count(*) AS n FROM activity", "include_staged": False}
    ).json()
    assert warehouse["plan"] == "warehouse" and warehouse["watermark"] == 4


def test_errors_are_json_with_stable_codes(
    served: tuple[TestClient, ShopStage, QueryService, Migrator],
) -> None:
    client = served[0]
    cases = [
        (client.post("/query", json={"sql": "DROP TABLE accounts"}), 400, "not_a_query"),
        (client.post("/query", json={"sql": "SELECT * FROM nope"}), 400, "unknown_table"),
        (client.post("/query", json={"sql": "SELECT 1; SELECT 2"}), 400, "multiple_statements"),
        (
            client.post("/query", json={"sql": "SELECT * FROM read_csv('/etc/passwd')"}),
            400,
            "forbidden_function",
        ),
        (client.post("/query", json={"sql": "SELECT nope FROM accounts"}), 400, "query_failed"),
        (client.post("/query", json={}), 422, "invalid_request"),
        (
            client.post("/query", json={"sql": "SELECT 1", "plan": "fastest"}),
            422,
            "invalid_request",
        ),
        (
            client.post("/query", json={"sql": "SELECT 1", "structured": {"table": "accounts"}}),
            422,
            "invalid_request",
        ),
        (
            client.post(
                "/query", content=b"{not json", headers={"content-type": "application/json"}
            ),
            422,
            "invalid_request",
        ),
        (
            client.post("/query", json={"sql": "SELECT * FROM accounts", "watermark": 99}),
            409,
            "watermark_not_reached",
        ),
        (
            client.post("/query", json={"sql": "SELECT 1", "target": "postgres"}),
            400,
            "unknown_target",
        ),
        (client.get("/query/0123456789abcdef"), 404, "answer_not_found"),
        (client.get("/nowhere"), 404, "not_found"),
        (client.delete("/tables"), 405, "method_not_allowed"),
        (client.post("/streams/nope/events", json={"events": [{}]}), 404, "unknown_stream"),
        (
            client.post("/streams/events/events", json={"events": [{"kind": "x"}]}),
            503,
            "push_unavailable",
        ),
        (client.post("/streams/events/events", json={"events": "x"}), 400, "invalid_request"),
        (client.post("/deadletters/replay", json={}), 422, "invalid_request"),
        (client.post("/deadletters/replay", json={"ids": [1]}), 503, "push_unavailable"),
    ]
    for response, status, code in cases:
        assert (response.status_code, error_code(response)) == (status, code), response.text


def test_tables_batches_migration_and_metrics(
    served: tuple[TestClient, ShopStage, QueryService, Migrator],
) -> None:
    client, stage, _, _ = served
    tables = {t["name"]: t for t in client.get("/tables").json()}
    assert set(tables) == {"customers", "accounts", "prices", "activity"}
    accounts = tables["accounts"]
    assert accounts["kind"] == "table" and accounts["row_id"] == ["aid"]
    assert accounts["staged_rows"] == sum(stage.truth[6]["accounts"].values())
    assert accounts["pending_changes"] > 0
    assert accounts["targets"]["duckdb"]["watermark"] == 4
    assert tables["customers"]["kind"] == "history"
    assert tables["activity"]["kind"] == "output" and tables["activity"]["staged_rows"] is None
    batches = client.get("/batches", params={"after": 2, "limit": 3}).json()
    assert [b["batch_id"] for b in batches] == [3, 4, 5]
    assert batches[0]["streams"] == {"events": 3}
    status = client.get("/migration").json()
    assert status["targets"]["duckdb"]["watermark"] == 4
    assert status["targets"]["duckdb"]["mode"] == "push"
    pushed = client.post("/migration/push", json={"merge": "never"}).json()
    assert pushed["targets"]["duckdb"]["watermark"] == 6
    assert pushed["targets"]["duckdb"]["merged_rows"] is None
    pulled = client.post("/migration/pull").json()
    assert pulled["targets"]["duckdb"]["merged_rows"] > 0
    assert client.get("/migration").json()["targets"]["duckdb"]["merged_through"] == 6
    assert client.get("/deadletters").json() == []
    client.post("/query", json={"sql": "SELECT * FROM accounts", "plan": "island"})
    metrics = client.get("/metrics")
    assert metrics.status_code == 200
    text = metrics.text
    assert 'streamdi_queries_total{outcome="ok",plan="island",target="duckdb"}' in text
    assert "streamdi_staged_watermark 6.0" in text
    assert 'streamdi_target_acknowledged{target="duckdb"} 6.0' in text
    assert client.get("/health").json()["status"] == "ok"
    assert client.get("/ready").status_code == 200
    spec = client.get("/openapi.json").json()
    assert {"/query", "/query/{answer_id}", "/tables", "/streams/{stream}/events"} <= set(
        spec["paths"]
    )
    assert client.get("/docs").status_code == 200


def test_a_round_naming_a_target_twice_is_refused_naming_it(
    served: tuple[TestClient, ShopStage, QueryService, Migrator],
) -> None:
    client, _, _, migrator = served
    before = client.get("/migration").json()
    for route in ("/migration/pull", "/migration/push"):
        for targets, twice in (
            (["postgres", "postgres"], "postgres"),
            (["duckdb", "duckdb"], "duckdb"),
        ):
            refused = client.post(route, json={"targets": targets, "merge": "force"})
            assert refused.status_code == 422, refused.text
            error = refused.json()["error"]
            assert error["code"] == "invalid_request"
            assert error["reason"].startswith("body.targets: ")
            assert f"named more than once: {twice}" in error["reason"]
    assert client.get("/migration").json() == before  # no round ran
    # the migrator's own guard stays: called directly, it takes a name given twice once
    assert list(migrator.migrate(["duckdb", "duckdb"], via="pull").targets) == ["duckdb"]
    once = client.post("/migration/pull", json={"targets": ["duckdb"]})
    assert once.status_code == 200 and list(once.json()["targets"]) == ["duckdb"]


def test_bearer_token(tmp_path: Path) -> None:
    stage = ShopStage(tmp_path / "staging.duckdb")
    stage.stage_range(1, 2)
    settings = shop_settings(tmp_path, token="s3cret")
    service, migrator = shop_service(stage, settings)
    with TestClient(create_app(service, settings)) as client:
        refused = client.post("/query", json={"sql": "SELECT * FROM accounts"})
        assert refused.status_code == 401 and error_code(refused) == "unauthorized"
        assert refused.headers["www-authenticate"] == "Bearer"
        wrong = client.get("/tables", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        assert client.get("/metrics").status_code == 401
        ok = client.post(
            "/query",
            json={"sql": "SELECT * FROM accounts"},
            headers={"Authorization": "Bearer s3cret"},
        )
        assert ok.status_code == 200 and ok.json()["watermark"] == 2
    service.close()
    migrator.close()
