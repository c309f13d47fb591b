"""The console's JSON on a real ``streamdi serve`` (its own embedded broker, embedded PostgreSQL
and a DuckDB warehouse, the kv dataflow fed over HTTP, the engine's default executor): while
events are pushed the overview's events total rises; the timeline shows every batch with the
engine's decision for ``apply`` and the times both warehouses acknowledged it; the dataflow's
counts are the events pushed; the series holds them once their seconds have ended."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.api_flows import kv_truth
from tests.integration.api.conftest import ServedService

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]


def wait_for(what: str, check: Callable[[], Any], timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what} not within {timeout} s"
        time.sleep(0.1)


def test_the_console_follows_pushed_events(served: ServedService) -> None:
    before = served.get("/console/overview")
    assert before["pipeline"]["state"] == "running" and before["pipeline"]["paused"] is False
    assert set(before["targets"]) == {"duckdb", "postgres"}
    start = before["events_total"]

    def seen(pushed: int) -> int:
        total: int = served.get("/console/overview")["events_total"]
        return total if total >= start + pushed else 0

    events: list[dict[str, Any]] = []
    totals = []
    for push in range(8):
        batch = [
            {
                "op": "del" if i % 7 == 3 else "put",
                "key": i % 13,
                "value": push,
                "seq": 20 * push + i,
            }
            for i in range(20)
        ]
        served.post("/streams/puts/events", {"events": batch})
        events.extend(batch)
        totals.append(wait_for(f"the events of push {push}", lambda n=len(events): seen(n)))
    assert totals == sorted(totals) and totals[-1] == start + len(events)  # it rose with each

    overview = served.get("/console/overview")
    watermark = overview["staged_watermark"]
    assert overview["streams"]["puts"]["events"] >= len(events)
    timeline = served.get("/console/batches", limit=1000)
    assert sum(b["events"] for b in timeline) == overview["events_total"]
    assert [b["batch_id"] for b in timeline] == sorted(b["batch_id"] for b in timeline)
    assert timeline[-1]["batch_id"] == watermark
    for entry in timeline:
        assert entry["committed_at"] >= entry["arrived_at"] and entry["freshness_s"] >= 0
        steps = {s["step"]: s for s in entry["steps"]}
        assert set(steps) == {"apply"}, entry["steps"]
        apply = steps["apply"]
        assert apply["strategy"] and apply["why"] and isinstance(apply["compiled"], bool)
        assert apply["transactions"] == entry["events"]

    # the migration pushes every few batches: both warehouses acknowledge every batch, after it
    # committed, and the overview's targets catch up with staging
    def acknowledged() -> list[dict[str, Any]] | None:
        entries = served.get("/console/batches", limit=1000)
        done = all(
            all(entry["targets"].get(t) is not None for t in ("duckdb", "postgres"))
            for entry in entries
        )
        return entries if done else None

    timeline = wait_for("both warehouses' acknowledgements", acknowledged)
    for entry in timeline:
        for target in ("duckdb", "postgres"):
            assert entry["targets"][target] >= entry["committed_at"], (target, entry)

    def caught_up() -> dict[str, Any] | None:
        targets: dict[str, Any] = served.get("/console/overview")["targets"]
        behind = [t for t in targets.values() if t["acknowledged"] < watermark or t["lag_batches"]]
        return None if behind else targets

    targets = wait_for("the targets at the staged watermark", caught_up)
    assert all(t["reachable"] is True and t["error"] is None for t in targets.values())

    graph = served.get("/console/dataflow")
    nodes = {n["id"]: n for n in graph["nodes"]}
    apply_node = nodes["step:apply"]
    assert apply_node["events"] == overview["events_total"]
    assert apply_node["committed_txns"] == sum(b["committed_txns"] for b in timeline)
    assert apply_node["last_strategy"] == timeline[-1]["steps"][0]["strategy"]
    assert apply_node["compiled"] is timeline[-1]["steps"][0]["compiled"]
    assert nodes["sink:log"]["rows"] == overview["events_total"]
    if start == 0:  # the only pushes to this service: the table holds exactly their keys
        assert nodes["table:kv"]["staged_rows"] == len(kv_truth(events))
    edges = {(e["from"], e["to"], e["kind"]) for e in graph["edges"]}
    assert ("source:puts", "step:apply", "input") in edges
    assert ("step:apply", "table:kv", "writes") in edges
    assert ("step:apply", "sink:log", "emits") in edges

    last = timeline[-1]["committed_at"]
    time.sleep(max(0.0, math.floor(last) + 1.05 - time.time()))
    series = served.get("/console/overview")["series"]
    assert sum(p["events"] for p in series) == overview["events_total"]
    assert series[-1]["staged_watermark"] == watermark
    busy = [p for p in series if p["batches"]]
    assert busy and all(0 <= p["freshness_p50_s"] <= p["freshness_p99_s"] for p in busy)
    assert served.client.get("/console/report").status_code == 404
