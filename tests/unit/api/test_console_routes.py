"""The console's JSON over HTTP (FastAPI's test client, no server), on a real staging store fed
through the pipeline's own committer (:class:`runtime.committer.StagingCommitter`, the service's
observers on it) and a real DuckDB warehouse: the overview, the batch timeline with the targets'
acknowledgement times, the dataflow graph with its counts, the run report, the dead letters'
reason filter, and the token gate on every console route."""

from __future__ import annotations

import io
import math
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.service import QueryService
from etl_dataflows import Dataflow, col
from migration.migrator import Migrator
from runtime.committer import PipelineReport, StagingCommitter
from runtime.faults import PipelineFaults
from tests.migration_shop import shop_dead_letters
from tests.unit.api.harness import ShopStage, shop_service, shop_settings

CONSOLE_ROUTES = ("/console/overview", "/console/batches", "/console/dataflow", "/console/report")


@dataclass
class Served:
    client: TestClient
    stage: ShopStage
    service: QueryService
    migrator: Migrator
    committer: StagingCommitter


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    stage = ShopStage(tmp_path / "staging.duckdb")
    settings = shop_settings(tmp_path)
    service, migrator = shop_service(stage, settings)
    committer = StagingCommitter(
        stage.store,
        PipelineReport(),
        group=1,
        observers=[service.metrics.observe_batch, service.console.observe_batch],
        faults=PipelineFaults(),
    )
    stop = threading.Event()
    committer.start(stop)
    for batch_id in range(1, 5):
        dead = shop_dead_letters(batch_id) if batch_id == 2 else None
        stage.stage(batch_id, committer=committer, dead_letters=dead)
    migrator.migrate(via="push", merge="force")
    stage.stage(5, committer=committer)
    stage.stage(6, committer=committer)
    try:
        with TestClient(create_app(service, settings)) as client:
            yield Served(client, stage, service, migrator, committer)
    finally:
        committer.close()
        service.close()
        migrator.close()


def get(client: TestClient, path: str, **params: Any) -> Any:
    response = client.get(path, params=params)
    assert response.status_code == 200, response.text
    return response.json()


def test_overview(served: Served) -> None:
    events = served.stage.events
    body = get(served.client, "/console/overview")
    assert body["pipeline"] == {"state": "absent", "error": None, "paused": False}
    assert body["report"] is False  # no TPC-DI run served: no report (test_the_run_report)
    assert body["at"] == pytest.approx(time.time(), abs=5)
    assert body["events_total"] == 6 * events
    assert body["staged_watermark"] == 6
    assert body["streams"] == {
        "events": {"last_batch": 6, "lag_records": None, "events": 6 * events}
    }
    duckdb = body["targets"]["duckdb"]
    assert duckdb["acknowledged"] == 4 and duckdb["merged_through"] == 4
    assert duckdb["lag_batches"] == 2 and duckdb["lag_seconds"] >= 0
    assert duckdb["reachable"] is True and duckdb["error"] is None
    assert duckdb["readable"] is True and duckdb["mode"] == "push"
    assert duckdb["acknowledged_at"] == pytest.approx(time.time(), abs=60)
    recent = body["recent_batches"]
    assert [b["batch_id"] for b in recent] == [1, 2, 3, 4, 5, 6]
    assert [b["targets"]["duckdb"] is not None for b in recent] == [True] * 4 + [False] * 2
    # the series leaves the second under way out: once the commits' seconds have ended, the
    # points hold every event, each second's batches and the watermark it reached
    last = max(b["committed_at"] for b in recent)
    time.sleep(max(0.0, math.floor(last) + 1.05 - time.time()))
    series = get(served.client, "/console/overview")["series"]
    assert sum(p["events"] for p in series) == 6 * events
    assert sum(p["batches"] for p in series) == 6
    assert series[-1]["staged_watermark"] == 6
    assert all(p["t"] == int(p["t"]) for p in series)
    assert [p["t"] for p in series] == sorted(p["t"] for p in series)
    busy = [p for p in series if p["batches"]]
    assert all(0 <= p["freshness_p50_s"] <= p["freshness_p99_s"] for p in busy)
    assert all(p["freshness_p50_s"] is None for p in series if not p["batches"])
    assert get(served.client, "/console/overview")["events_per_second"] > 0


def test_the_batch_timeline(served: Served) -> None:
    page = get(served.client, "/console/batches", after=2, limit=3)
    assert [b["batch_id"] for b in page] == [3, 4, 5]
    everything = get(served.client, "/console/batches")
    assert [b["batch_id"] for b in everything] == [1, 2, 3, 4, 5, 6]
    for entry in everything:
        assert entry["events"] == served.stage.events and entry["records"] == 1
        assert entry["committed_at"] >= entry["arrived_at"]
        assert entry["freshness_s"] >= 0 and entry["commit_ms"] > 0
        assert entry["executed_ms"] == pytest.approx(1.0)  # what the harness's commit says
        assert entry["committed_txns"] + entry["aborted_txns"] > 0
        # the serial executor decides nothing: its step says so and runs interpreted
        (step,) = entry["steps"]
        assert step["step"] == "apply" and step["strategy"] == "serial"
        assert step["compiled"] is False and "serial executor" in step["why"]
        assert step["transactions"] == entry["committed_txns"] + entry["aborted_txns"]
    assert [b["dead_letters"] for b in everything] == [0, 2, 0, 0, 0, 0]
    acked = [b["targets"]["duckdb"] for b in everything]
    assert all(a is not None for a in acked[:4]) and acked[4:] == [None, None]
    assert all(acked[i] >= everything[i]["committed_at"] for i in range(4))
    # a push through the API is a migration round too: it stamps the rest
    served.client.post("/migration/push", json={"merge": "never"})
    after = get(served.client, "/console/batches", after=4)
    assert all(b["targets"]["duckdb"] >= b["committed_at"] for b in after)
    assert acked[:4] == [b["targets"]["duckdb"] for b in get(served.client, "/console/batches")][:4]
    overview = get(served.client, "/console/overview")["targets"]["duckdb"]
    assert overview["acknowledged"] == 6 and overview["lag_batches"] == 0
    assert overview["lag_seconds"] == 0.0
    refused = served.client.get("/console/batches", params={"limit": 1001})
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "invalid_request"


def test_the_dataflow_graph(served: Served) -> None:
    graph = get(served.client, "/console/dataflow")
    assert graph["name"] == "shop" and graph["staged_watermark"] == 6
    nodes = {n["id"]: n for n in graph["nodes"]}
    assert set(nodes) == {
        "source:events",
        "step:apply",
        "table:customers",
        "table:accounts",
        "table:prices",
        "sink:activity",
    }
    assert nodes["source:events"]["kind"] == "source"
    assert nodes["source:events"]["columns"]["amount"] == "float64"
    assert "_ts" not in nodes["source:events"]["columns"]
    apply = nodes["step:apply"]
    timeline = get(served.client, "/console/batches")
    assert apply["step_kind"] == "transact" and apply["batches"] == 6
    assert apply["events"] == 6 * served.stage.events
    assert apply["committed_txns"] == sum(b["committed_txns"] for b in timeline)
    assert apply["compiled"] is None and apply["last_strategy"] is None  # serial: no decision
    truth = served.stage.truth[6]
    for table, kind in (("customers", "history"), ("accounts", "table"), ("prices", "window")):
        node = nodes[f"table:{table}"]
        assert node["table_kind"] == kind
        assert node["staged_rows"] == sum(truth[table].values())
    sink = nodes["sink:activity"]
    assert sink["rows"] == sum(truth["activity"].values()) == apply["rows_out"]
    assert 0 < sink["staged_rows"] <= sink["rows"]
    edges = {(e["from"], e["to"], e["kind"]) for e in graph["edges"]}
    assert edges == {
        ("source:events", "step:apply", "input"),
        ("step:apply", "table:customers", "writes"),
        ("step:apply", "table:accounts", "writes"),
        ("step:apply", "table:prices", "writes"),
        ("step:apply", "sink:activity", "emits"),
    }


def test_a_graph_shows_stateless_steps_and_tables_only_read() -> None:
    from api.console_graph import dataflow_graph
    from api.console_recorder import StepTotals

    flow = Dataflow("orders")
    rates = flow.table("rates", key={"cur": "string"}, columns={"rate": "float64"})
    totals = flow.table("totals", key={"cur": "string"}, columns={"sum": "float64"})
    flow.source("orders", schema={"cur": "string", "amount": "float64"})
    flow.validate("check", {"amount must be positive": col("amount") > 0})
    t = flow.transact("convert")
    rate = t.read(rates, "cur")
    t.update(totals, "cur", set={"sum": col("amount") * rate["rate"]}, if_missing="skip")
    t.emit(cur=col("cur"))
    flow.sink("converted")
    graph = dataflow_graph(
        flow.build(),
        {"check": StepTotals(batches=1, events=5, rows_out=4, dead_letters=1)},
        table_rows={"rates": 3},
        sink_rows={},
        staged_watermark=1,
    ).model_dump()
    edges = {(e["from"], e["to"], e["kind"]) for e in graph["edges"]}
    assert edges == {
        ("source:orders", "step:check", "input"),
        ("step:check", "step:convert", "input"),
        ("table:rates", "step:convert", "reads"),
        ("step:convert", "table:totals", "writes"),
        ("step:convert", "sink:converted", "emits"),
    }
    nodes = {n["id"]: n for n in graph["nodes"]}
    assert nodes["step:check"]["step_kind"] == "validate"
    assert nodes["step:check"]["dead_letters"] == 1 and nodes["step:check"]["compiled"] is None
    assert nodes["step:convert"]["events"] == 0  # no batch yet
    assert nodes["table:rates"]["staged_rows"] == 3 and nodes["table:totals"]["staged_rows"] == 0


def test_the_run_report(tmp_path: Path) -> None:
    from tpcdi.audit.checks import AuditResult
    from tpcdi.audit.checks.base import CheckResult
    from tpcdi.audit.metric import compute_metric
    from tpcdi.audit.report import PhaseFigures, RunFigures, write_run_report
    from tpcdi.run.report_file import forget_report, load_report, save_report

    stage = ShopStage(tmp_path / "staging.duckdb")
    stage.stage_range(1, 2)
    settings = shop_settings(tmp_path)
    service, migrator = shop_service(stage, settings)
    with TestClient(create_app(service, settings)) as client:
        missing = client.get("/console/report")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    service.close()
    # the report as `streamdi tpcdi run` makes and saves it, read back as `--serve` does
    document = write_run_report(
        RunFigures(
            phases={
                "historical": PhaseFigures(12.5, 1000),
                "incremental1": PhaseFigures(3.0, 90, freshness_s=0.8),
            },
            peak_mem_mb=512.0,
            sf=0.1,
            target="duckdb",
            metric=compute_metric(1000, 90, 80, 12.5, 3.0, 2.0),
            audit=AuditResult([CheckResult("DimAccount rows", True, "5 = 5", "3.2.1", 0.01)]),
            extra={"run": {"executor": "local"}},
        ),
        stream=io.StringIO(),
    )
    workdir = tmp_path / "tpcdi"
    save_report(workdir, document)
    service = QueryService(
        stage.store, settings, migrator=migrator, run_report=load_report(workdir)
    )
    with TestClient(create_app(service, settings)) as client:
        report = get(client, "/console/report")
        assert get(client, "/console/overview")["report"] is True
    assert report["tpc_di_rps"] == document["tpc_di_rps"] and report["tpc_di_rps"] > 0
    assert report["phases"]["incremental1"]["freshness_s"] == 0.8
    assert report["audit"]["ok"] == 1 and report["audit"]["checks"][0]["clause"] == "3.2.1"
    assert report["metric"]["th"] == document["metric"]["th"]
    assert report["run"] == {"executor": "local"} and report["sf"] == 0.1
    service.close()
    migrator.close()
    forget_report(workdir)
    assert load_report(workdir) is None


def test_dead_letters_filter_by_reason_in_any_case(served: Served) -> None:
    client = served.client
    everything = get(client, "/deadletters")
    assert len(everything) == 2
    late = get(client, "/deadletters", reason="TOO OLD")
    assert [d["reason"] for d in late] == ['late event, batch 2: "too old"']
    assert [d["id"] for d in get(client, "/deadletters", reason="Line Two")] == [
        d["id"] for d in everything if "line two" in d["reason"]
    ]
    assert get(client, "/deadletters", reason="%") == []  # a substring, not a LIKE pattern
    assert get(client, "/deadletters", reason="_") == []
    assert len(get(client, "/deadletters", reason="", stream="events")) == 2
    assert get(client, "/deadletters", reason="bad", stream="nope") == []
    assert len(get(client, "/deadletters", reason="E")) == 2


def test_every_console_route_wants_the_token(tmp_path: Path) -> None:
    stage = ShopStage(tmp_path / "staging.duckdb")
    stage.stage_range(1, 2)
    settings = shop_settings(tmp_path, token="s3cret")
    service, migrator = shop_service(stage, settings)
    with TestClient(create_app(service, settings)) as client:
        for path in (*CONSOLE_ROUTES, "/deadletters?reason=x"):
            refused = client.get(path)
            assert refused.status_code == 401, path
            assert refused.json()["error"]["code"] == "unauthorized"
            wrong = client.get(path, headers={"Authorization": "Bearer nope"})
            assert wrong.status_code == 401, path
            allowed = client.get(path, headers={"Authorization": "Bearer s3cret"})
            expected = 404 if path == "/console/report" else 200
            assert allowed.status_code == expected, (path, allowed.text)
    service.close()
    migrator.close()
