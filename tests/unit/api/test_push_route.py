"""The push route over a real push source (a thread stands in for the collector): content types
other than JSON and Arrow are 415, unknown fields and empty Arrow are 400 with their own codes, an
event too large for a record is 413, and the receipt lists rejects and warnings. Values stored by a
version that checked nothing (a high mark in year 148108, dates and timestamps far out) never make
a query fail."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from fastapi.testclient import TestClient

from api.answers import json_rows
from api.app import create_app
from api.service import QueryService
from ingest.push import HttpPushSource
from ingest.records import to_ipc
from runtime.push_sink import PushSink
from staging.highmark import set_high_mark
from tests.unit.api.harness import ShopStage, shop_settings

ARROW = "application/vnd.apache.arrow.stream"


def _acknowledge(source: HttpPushSource) -> None:
    batch = 1
    for chunk in source.read(0):
        if chunk.on_produced is not None:
            chunk.on_produced(batch, batch)
            batch += 1


@pytest.fixture
def pushed(tmp_path: Path) -> Iterator[tuple[TestClient, ShopStage]]:
    stage = ShopStage(tmp_path / "staging.duckdb")
    stage.stage(1)
    settings = shop_settings(tmp_path, targets="")
    columns = {c: t or "string" for c, t in stage.flow.schemas["events"].items()}
    source = HttpPushSource("shop.events", columns, heartbeat_s=0.01)
    reader = threading.Thread(target=_acknowledge, args=(source,), daemon=True)
    reader.start()
    service = QueryService(
        stage.store, settings, push_sources={"events": PushSink("events", source)}
    )
    with TestClient(create_app(service, settings)) as client:
        yield client, stage
    source.close()
    reader.join(5)
    service.close()


def _code(response: Any) -> str:
    code: str = response.json()["error"]["code"]
    return code


def test_content_types_other_than_json_and_arrow_are_refused(
    pushed: tuple[TestClient, ShopStage],
) -> None:
    client, _ = pushed
    body = b'{"events": [{"kind": "price", "symbol": "A", "price": 1.0}]}'
    for headers in ({}, {"content-type": "text/plain"}, {"content-type": "application/xml"}):
        response = client.post("/streams/events/events", content=body, headers=headers)
        assert response.status_code == 415 and _code(response) == "unsupported_media_type"
        assert response.json()["error"]["detail"]["accepted"] == ["application/json", ARROW]
    ok = client.post(
        "/streams/events/events",
        content=body,
        headers={"content-type": "application/json; charset=utf-8"},
    )
    assert ok.status_code == 200, ok.text
    assert ok.json()["first_batch"] == ok.json()["last_batch"]


def test_refused_pushes_have_stable_codes(pushed: tuple[TestClient, ShopStage]) -> None:
    client, _ = pushed
    unknown = client.post(
        "/streams/events/events", json={"events": [{"kind": "price", "colour": "red"}]}
    )
    assert unknown.status_code == 400 and _code(unknown) == "unknown_fields"
    assert unknown.json()["error"]["detail"]["fields"] == ["colour"]
    arrow_unknown = client.post(
        "/streams/events/events",
        content=to_ipc(pa.table({"colour": ["red"]})),
        headers={"content-type": ARROW},
    )
    assert arrow_unknown.status_code == 400 and _code(arrow_unknown) == "unknown_fields"
    for body in (b"", to_ipc(pa.table({"kind": pa.array([], pa.string())}))):
        empty = client.post("/streams/events/events", content=body, headers={"content-type": ARROW})
        assert empty.status_code == 400 and _code(empty) == "no_events", empty.text
    corrupt = client.post(
        "/streams/events/events", content=b"\x00" * 64, headers={"content-type": ARROW}
    )
    assert corrupt.status_code == 400 and _code(corrupt) == "invalid_request"
    huge = client.post(
        "/streams/events/events", json={"events": [{"kind": "x", "name": "n" * 1_000_000}]}
    )
    assert huge.status_code == 413 and _code(huge) == "event_too_large"
    spec = client.get("/openapi.json").json()
    responses = spec["paths"]["/streams/{stream}/events"]["post"]["responses"]
    assert {"413", "415"} <= set(responses)
    receipt = spec["components"]["schemas"]["PushReceiptBody"]["properties"]
    assert {"rejected", "warnings"} <= set(receipt)


def test_a_conditional_push_is_taken_once(pushed: tuple[TestClient, ShopStage]) -> None:
    client, _ = pushed
    body = {"events": [{"kind": "price", "symbol": "A", "price": 1.0}] * 3}
    first = client.post("/streams/events/events", json=body)
    assert first.status_code == 200, first.text
    nxt = first.json()["last_pos"] + 1
    taken = client.post(f"/streams/events/events?expect_pos={nxt}", json=body)
    assert taken.status_code == 200 and taken.json()["first_pos"] == nxt, taken.text
    again = client.post(f"/streams/events/events?expect_pos={nxt}", json=body)  # a retry
    assert again.status_code == 409 and _code(again) == "position_conflict", again.text
    assert again.json()["error"]["detail"] == {
        "stream": "events",
        "expected": nxt,
        "next_pos": nxt + 3,
    }
    bad = client.post("/streams/events/events?expect_pos=-1", json=body)
    assert bad.status_code in (400, 422), bad.text
    responses = client.get("/openapi.json").json()["paths"]["/streams/{stream}/events"]["post"]
    assert "409" in responses["responses"]
    assert any(p["name"] == "expect_pos" for p in responses["parameters"])


def test_the_receipt_lists_rejects_and_warnings(pushed: tuple[TestClient, ShopStage]) -> None:
    client, _ = pushed
    response = client.post(
        "/streams/events/events",
        json={
            "events": [
                {"kind": "price", "symbol": "A", "price": 1.0, "_ts": 2**62},
                {"kind": "price", "symbol": "B", "price": 2.0},
                {"kind": "price", "symbol": "C", "price": 3.0, "_ts": 1_700_000_000_000_000},
                {"kind": "price", "symbol": "D", "price": 4.0, "_ts": "later"},
            ]
        },
    )
    assert response.status_code == 200, response.text
    receipt = response.json()
    assert (receipt["events"], receipt["rejects"]) == (2, 2)
    assert [r["pos"] - receipt["first_pos"] for r in receipt["rejected"]] == [0, 3]
    assert receipt["rejected"][0]["reason"].startswith("event time out of range")
    assert receipt["warnings"] == [
        "1 of 4 events have no _ts: their event time is the time they arrived"
    ]
    assert receipt["first_batch"] <= receipt["last_batch"]


def test_values_stored_unchecked_never_fail_a_query(pushed: tuple[TestClient, ShopStage]) -> None:
    client, stage = pushed
    assert set_high_mark(stage.store, "events", 2**62)  # as an old version stored it
    page = client.post("/query", json={"sql": "SELECT 1 AS one", "plan": "island"})
    assert page.status_code == 200, page.text
    assert page.json()["freshness"]["newest_event_time"] == "+148108-07-06T14:00:27.387904+00:00"
    extremes = pa.table(
        {
            "t": pa.array([2**62, -(2**62), 0, None], pa.timestamp("us")),
            "d": pa.array([2**31 - 1, -(2**31), 0, None], pa.date32()),
            "f": pa.array([float("inf"), float("nan"), 1.5, None]),
        }
    )
    assert json_rows(extremes) == [
        ["+148108-07-06T14:00:27.387904", "+5881580-07-11", None],
        ["-144169-06-28T09:59:32.612096", "-5877641-06-23", None],
        ["1970-01-01T00:00:00.000000", "1970-01-01", 1.5],
        [None, None, None],
    ]
