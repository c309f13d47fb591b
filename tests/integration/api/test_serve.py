"""``streamdi serve`` for real (its own broker, embedded PostgreSQL and a DuckDB warehouse, the
pipeline and the migration in the same process): events pushed over HTTP while clients query
continuously with every plan on both warehouses, each answer checked against the ground truth at
its watermark; dead letters listed and replayed; migration control; SIGTERM; and schemathesis
over the OpenAPI description with zero server errors."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.api_flows import kv_truth
from tests.integration.api.conftest import ServedService

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

KEYS = 40


class Producer:
    """Pushes random put/del events over HTTP and remembers which logical batch carried which
    events (the receipts), so the truth at any batch is a replay."""

    def __init__(self, served: ServedService) -> None:
        self.served = served
        self.batches: dict[int, list[dict[str, Any]]] = {}
        self.lock = threading.Lock()
        self.seq = 0

    def push(self, events: list[dict[str, Any]]) -> dict[str, Any]:
        receipt = self.served.post("/streams/puts/events", {"events": events})
        assert receipt["events"] == len(events) and receipt["rejects"] == 0
        assert receipt["first_batch"] == receipt["last_batch"]
        with self.lock:
            self.batches[receipt["first_batch"]] = events
        return receipt

    def random_batch(self, rng: random.Random) -> list[dict[str, Any]]:
        events = []
        for _ in range(rng.randint(1, 30)):
            self.seq += 1
            op = "del" if rng.random() < 0.2 else "put"
            events.append(
                {"op": op, "key": rng.randrange(KEYS), "value": self.seq, "seq": self.seq}
            )
        return events

    def truth(self, last_batch: int, timeout: float = 30) -> dict[int, tuple[int, int]]:
        deadline = time.monotonic() + timeout
        while True:  # a receipt may arrive after its batch is already visible
            with self.lock:
                known = set(self.batches)
            missing = [b for b in range(1, last_batch + 1) if b not in known]
            if not missing or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        assert not missing, f"answers show batches {missing} that no receipt named"
        with self.lock:
            events = [e for b in sorted(self.batches) if b <= last_batch for e in self.batches[b]]
        return kv_truth(events)


def check_kv(producer: Producer, page: dict[str, Any]) -> None:
    rows = page["rows"]
    keys = [r[0] for r in rows]
    assert len(keys) == len(set(keys)), f"a key twice in {page['plan']}@{page['watermark']}"
    truth = producer.truth(page["streams"].get("puts", 0))
    got = {r[0]: (r[1], r[2]) for r in rows}
    assert got == truth, (
        f"{page['plan']} on {page['target']} at watermark {page['watermark']} (warehouse at "
        f"{page['warehouse_watermark']}): missing {sorted(set(truth) - set(got))[:5]}, extra "
        f"{sorted(set(got) - set(truth))[:5]}, stale "
        f"{[k for k in got if k in truth and got[k] != truth[k]][:5]}"
    )


def test_answers_match_the_truth_while_events_are_pushed_and_migrated(
    served: ServedService,
) -> None:
    producer = Producer(served)
    rng = random.Random(5)
    producer.push(producer.random_batch(rng))  # batch 1: the stream exists
    done = threading.Event()
    errors: list[BaseException] = []
    checked: dict[str, int] = {}
    lock = threading.Lock()

    def produce() -> None:
        try:
            local = random.Random(7)
            for _ in range(60):
                producer.push(producer.random_batch(local))
                time.sleep(local.uniform(0.0, 0.05))
        except BaseException as exc:
            errors.append(exc)
        finally:
            done.set()

    def query(seed: int) -> None:
        local = random.Random(seed)
        try:
            while not done.is_set():
                target = local.choice(["duckdb", "postgres"])
                kind = local.choice(["island", "migrate", "auto", "warehouse"])
                body: dict[str, Any] = {
                    "sql": "SELECT key, value, seq FROM kv ORDER BY key",
                    "target": target,
                    "page_size": 10_000,
                }
                if kind == "warehouse":
                    body["include_staged"] = False
                else:
                    body["plan"] = kind
                page = served.post("/query", body)
                check_kv(producer, page)
                with lock:
                    key = f"{page['plan']}/{target}"
                    checked[key] = checked.get(key, 0) + 1
        except BaseException as exc:
            errors.append(exc)
            done.set()

    threads = [threading.Thread(target=produce)]
    threads += [threading.Thread(target=query, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    if errors:
        raise errors[0]
    for plan in ("island", "migrate", "warehouse"):
        for target in ("duckdb", "postgres"):
            assert checked.get(f"{plan}/{target}", 0) > 0, checked
    # after the pushes, a final answer from each warehouse alone holds every batch
    served.post("/migration/push", {})
    top = max(producer.batches)
    for target in ("duckdb", "postgres"):
        page = served.post(
            "/query",
            {"sql": "SELECT key, value, seq FROM kv", "target": target, "include_staged": False},
        )
        assert page["streams"]["puts"] == top
        check_kv(producer, page)


def test_dead_letters_are_listed_and_replayed(served: ServedService) -> None:
    receipt = served.post(
        "/streams/puts/events",
        {"events": [{"op": "put", "key": "not-a-number", "value": 1, "seq": 10**9}]},
    )
    assert receipt["rejects"] == 1 and receipt["events"] == 0
    deadline = time.monotonic() + 30
    dead: list[dict[str, Any]] = []
    while time.monotonic() < deadline and not dead:
        dead = [
            d for d in served.get("/deadletters", pending=True) if d["pos"] == receipt["first_pos"]
        ]
        time.sleep(0.1)
    assert dead, "the rejected event never reached the dead letters"
    letter = dead[0]
    assert letter["stream"] == "puts" and "key" in letter["reason"]
    fixed = {"op": "put", "key": KEYS + 1, "value": 42, "seq": 10**9}
    replayed = served.post(
        "/deadletters/replay",
        {"entries": [{"id": letter["id"], "stream": "puts", "event": fixed}]},
    )
    assert replayed == {"sent": 1, "refused": []}
    deadline = time.monotonic() + 30
    rows: list[Any] = []
    while time.monotonic() < deadline and not rows:
        rows = served.post("/query", {"sql": f"SELECT value FROM kv WHERE key = {KEYS + 1}"})[
            "rows"
        ]
        time.sleep(0.1)
    assert rows == [[42]]
    pending = [d["id"] for d in served.get("/deadletters", pending=True)]
    assert letter["id"] not in pending


def test_migration_control_tables_and_metrics(served: ServedService) -> None:
    status = served.get("/migration")
    assert set(status["targets"]) == {"duckdb", "postgres"}
    assert all(t["reachable"] for t in status["targets"].values())
    pulled = served.post("/migration/pull", {"targets": ["postgres"]})
    assert pulled["targets"]["postgres"]["error"] is None
    tables = {t["name"]: t for t in served.get("/tables")}
    assert (
        tables["kv"]["targets"]["postgres"]["merged_through"]
        == pulled["targets"]["postgres"]["watermark"]
    )
    metrics = served.client.get("/metrics").text
    assert "streamdi_pushed_events_total" in metrics and "streamdi_pipeline_up 1.0" in metrics


def test_it_listens_on_loopback_only(served: ServedService) -> None:
    listening = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, state = fields[1], fields[3]
        address, port = local.split(":")
        if state == "0A" and int(port, 16) == served.port:
            listening.append(address)
    assert listening == ["0100007F"], listening  # 127.0.0.1, nothing else


def test_fuzzed_requests_never_get_a_server_error(served: ServedService) -> None:
    """Schemathesis draws requests for every operation of the OpenAPI description (valid and
    invalid bodies, parameters, content types): none gets a 5xx, every status code and body is
    one the description declares. Bounded: 25 examples per operation."""
    loaded = schemathesis.openapi.from_url(f"{served.url}/openapi.json")
    checks = [
        not_a_server_error,
        status_code_conformance,
        content_type_conformance,
        response_schema_conformance,
    ]
    operations = 0
    for result in loaded.get_all_operations():
        operation = result.ok()
        operations += 1

        @settings(
            max_examples=25,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy())
        def call(case: Any) -> None:
            case.call_and_validate(base_url=served.url, checks=checks, timeout=60)

        call()
    assert operations >= 12


def test_sigterm_stops_cleanly_after_a_final_push(served: ServedService, tmp_path: Path) -> None:
    top = served.get("/batches", after=0, limit=10_000)[-1]["batch_id"]
    assert served.stop() == 0, served.log.read_text()
    log = served.log.read_text()
    assert "Traceback" not in log, log
    from staging.store import StagingStore
    from tests.api_flows import kv_dataflow

    with StagingStore(served.state / "staging.duckdb", kv_dataflow(), read_only=True) as store:
        assert store.watermark >= top
        acks = store.query("SELECT target, batch_id FROM streamdi.migration_acks").to_pylist()
    assert {a["target"]: a["batch_id"] for a in acks} == {
        "duckdb": store.watermark,
        "postgres": store.watermark,
    }
