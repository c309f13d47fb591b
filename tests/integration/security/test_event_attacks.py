"""Attacks with events: poison event times and malformed payloads, over HTTP (JSON and Arrow) and
produced straight to the Kafka topic as an outside producer would. After each, every query plan
still answers, normal events are still accepted (not dead-lettered as late), and the poison is a
dead letter with its reason and the event kept in full; list -> fix -> replay works for every kind
that can be replayed. A kill -9 and a restart keep it so, and ``streamdi streams repair`` fixes a
high mark that an older version let an event poison."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from ingest.broker import EmbeddedKafka, client_config
from ingest.records import encode_batch, to_ipc
from streamdi.settings import load_settings
from tests.integration.api.conftest import REPO, SPEC, ServedService

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

ARROW = "application/vnd.apache.arrow.stream"
TOPIC = "kv.puts"
DAY_US = 86_400_000_000
PLANS: list[dict[str, Any]] = [
    {"plan": "island"},
    {"plan": "migrate"},
    {"plan": "auto"},
    {"include_staged": False},
]


def now_us() -> int:
    return time.time_ns() // 1000


def wait_for(what: str, check: Callable[[], Any], timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.1)


def value_of(service: ServedService, key: int) -> list[Any]:
    page = service.post("/query", {"sql": f"SELECT value FROM kv WHERE key = {key}"})
    rows: list[Any] = page["rows"]
    return rows


def dead_after(service: ServedService, after_id: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = service.get(
        "/deadletters", stream="puts", after_id=after_id, limit=10_000
    )
    return rows


def last_dead_id(service: ServedService) -> int:
    rows = service.get("/deadletters", limit=10_000)
    return max((r["id"] for r in rows), default=0)


def every_plan_answers(service: ServedService, targets: tuple[str, ...]) -> None:
    for target in targets:
        for plan in PLANS:
            body = {"sql": "SELECT key, value, seq FROM kv ORDER BY key", "target": target, **plan}
            response = service.client.post("/query", json=body)
            assert response.status_code == 200, f"{plan} on {target}: {response.text}"
            assert response.json()["freshness"] is not None


def normal_event_flows(service: ServedService, key: int) -> None:
    """A normal event (no ``_ts``: its arrival time) is accepted and applied, not late."""
    before = last_dead_id(service)
    receipt = service.post(
        "/streams/puts/events", {"events": [{"op": "put", "key": key, "value": key, "seq": key}]}
    )
    assert (receipt["events"], receipt["rejects"]) == (1, 0)
    wait_for(f"key {key} applied", lambda: value_of(service, key) == [[key]])
    late = [d for d in dead_after(service, before) if d["pos"] == receipt["first_pos"]]
    assert not late, late


def broker_of(service: ServedService) -> str:
    """The bootstrap address of the embedded broker ``streamdi serve`` started."""
    found = re.search(r"embedded Apache Kafka at (\S+)", service.log.read_text())
    assert found, service.log.read_text()
    return found.group(1)


def produce(bootstrap: str, records: list[tuple[bytes, list[tuple[str, bytes]]]]) -> None:
    """Write records straight to the stream's topic, as an outside producer would."""
    from kafka import KafkaProducer

    producer = KafkaProducer(
        **client_config(load_settings().kafka, bootstrap), acks="all", max_request_size=4 << 20
    )
    try:
        for value, headers in records:
            producer.send(TOPIC, value=value, headers=headers, partition=0)
        producer.flush(timeout=60)
    finally:
        producer.close(timeout=30)


def single(key: int, ts: Any) -> bytes:
    return json.dumps({"op": "put", "key": key, "value": key, "seq": key, "_ts": ts}).encode()


# -- poison event times ---------------------------------------------------------------------------

JSON_POISON: list[Any] = [2**62, -(2**62), -1, now_us() + DAY_US, 2**70, "soon", True, 1.5, None]


def test_poison_event_times_pushed_as_json_are_dead_letters(target: ServedService) -> None:
    before = last_dead_id(target)
    events = [
        {"op": "put", "key": 10_000 + i, "value": 1, "seq": 1, "_ts": ts}
        for i, ts in enumerate([*JSON_POISON, 0])
    ]
    receipt = target.post("/streams/puts/events", {"events": events})
    # 0 (1970) is in range but far behind the high mark: the consumer dead-letters it as late
    assert (receipt["events"], receipt["rejects"]) == (1, len(JSON_POISON))
    first = receipt["first_pos"]
    assert [r["pos"] - first for r in receipt["rejected"]] == list(range(len(JSON_POISON)))
    dead = wait_for(
        "the poison in the dead letters",
        lambda: (d := dead_after(target, before)) and len(d) == len(events) and d,
    )
    by_pos = {d["pos"] - first: d for d in dead}
    for i, event in enumerate(events):
        letter = by_pos[i]
        expected = "late" if i == len(JSON_POISON) else ("event time out of range", "_ts must")
        assert letter["reason"].startswith(expected), letter
        assert letter["event"] == event and letter["encoding"] == "json"
    every_plan_answers(target, ("duckdb", "postgres"))
    normal_event_flows(target, 10_100)


def test_poison_event_times_pushed_as_arrow_are_dead_letters(target: ServedService) -> None:
    before = last_dead_id(target)
    poison = [2**62, -(2**62), -1, now_us() + DAY_US, None]
    table = pa.table(
        {
            "op": ["put"] * (len(poison) + 1),
            "key": list(range(10_200, 10_200 + len(poison) + 1)),
            "value": [2] * (len(poison) + 1),
            "seq": [2] * (len(poison) + 1),
            "_ts": pa.array([*poison, now_us()], pa.int64()),
        }
    )
    response = target.client.post(
        "/streams/puts/events", content=to_ipc(table), headers={"content-type": ARROW}
    )
    assert response.status_code == 200, response.text
    receipt = response.json()
    assert (receipt["events"], receipt["rejects"]) == (1, len(poison))
    dead = wait_for(
        "the Arrow poison in the dead letters",
        lambda: (d := dead_after(target, before)) and len(d) == len(poison) and d,
    )
    assert sorted(d["pos"] - receipt["first_pos"] for d in dead) == list(range(len(poison)))
    for letter in dead:
        row = table.slice(letter["pos"] - receipt["first_pos"], 1).to_pylist()[0]
        assert letter["event"] == row, letter
    for kind in (pa.string(), pa.float64(), pa.bool_()):
        bad = pa.table({"op": ["put"], "key": [10_299], "_ts": pa.array([None], kind)})
        refused = target.client.post(
            "/streams/puts/events", content=to_ipc(bad), headers={"content-type": ARROW}
        )
        assert refused.status_code == 400, (kind, refused.text)
    wait_for("the good Arrow row", lambda: value_of(target, 10_200 + len(poison)) == [[2]])
    every_plan_answers(target, ("duckdb", "postgres"))
    normal_event_flows(target, 10_300)


def test_poison_event_times_produced_to_kafka_are_dead_letters(target: ServedService) -> None:
    before = last_dead_id(target)
    values = [single(10_400 + i, ts) for i, ts in enumerate(JSON_POISON)]
    values.append(b'{"op": "put", "key": 10499, "value": 1, "seq": 1, "_ts": NaN}')
    produce(broker_of(target), [(v, []) for v in values])
    dead = wait_for(
        "the produced poison in the dead letters",
        lambda: (d := dead_after(target, before)) and len(d) == len(values) and d,
    )
    for letter, value in zip(sorted(dead, key=lambda d: d["offset"]), values, strict=True):
        assert letter["reason"].startswith(("event time out of range", "_ts must")), letter
        assert letter["encoding"] == "json" and letter["payload_bytes"] == len(value)
        if b"NaN" in value:  # not standard JSON: shown as the text it is, to be fixed
            assert letter["event"] is None and letter["payload"] == value.decode()
        else:
            assert letter["event"] == json.loads(value)
    every_plan_answers(target, ("duckdb", "postgres"))
    normal_event_flows(target, 10_500)


# -- malformed payloads, and list -> fix -> replay ------------------------------------------------


def test_malformed_pushes_are_refused_whole(target: ServedService) -> None:
    client = target.client
    path = "/streams/puts/events"
    cases = [
        (
            client.post(
                path, content=b'{"events": [', headers={"content-type": "application/json"}
            ),
            (400, 422),
        ),
        (client.post(path, json={"events": [[1, 2]]}), (400, 422)),
        (client.post(path, json={"events": [{"op": "put", "key": 1, "colour": "red"}]}), (400,)),
        (client.post(path, content=b"", headers={"content-type": ARROW}), (400,)),
        (client.post(path, content=b"\x00\x01garbage", headers={"content-type": ARROW}), (400,)),
        (client.post(path, content=b'{"events": [{}]}'), (415,)),
        (
            client.post(path, content=b'{"events": [{}]}', headers={"content-type": "text/plain"}),
            (415,),
        ),
        (client.post(path, json={"events": [{"op": "x" * 1_000_000, "key": 1}]}), (413,)),
        (
            client.post(
                path,
                content=to_ipc(pa.table({"op": ["x" * 1_000_000]})),
                headers={"content-type": ARROW},
            ),
            (413,),
        ),
    ]
    for response, statuses in cases:
        assert response.status_code in statuses, response.text
        assert response.json()["error"]["code"]
    zero = to_ipc(pa.table({"op": pa.array([], pa.string())}))
    empty = client.post(path, content=zero, headers={"content-type": ARROW})
    assert empty.status_code == 400 and empty.json()["error"]["code"] == "no_events"
    normal_event_flows(target, 10_600)


def test_wrong_types_are_listed_fixed_and_replayed(target: ServedService) -> None:
    before = last_dead_id(target)
    event = {"op": "put", "key": "ten thousand", "value": 7, "seq": 7}
    receipt = target.post("/streams/puts/events", {"events": [event]})
    assert receipt["rejects"] == 1
    [letter] = wait_for("the wrong type", lambda: dead_after(target, before))
    assert letter["event"] == event and "cannot read 'ten thousand'" in letter["reason"]
    # by id: re-offered unchanged, so it is a dead letter again with the same event
    again = target.post("/deadletters/replay", {"ids": [letter["id"]]})
    assert again == {"sent": 1, "refused": []}
    [echo] = wait_for("the unchanged replay", lambda: dead_after(target, letter["id"]))
    assert echo["event"] == event
    # fixed: applied, and the dead letter is marked replayed
    fixed = {**event, "key": 10_700}
    assert target.post(
        "/deadletters/replay", {"entries": [{"id": letter["id"], "stream": "puts", "event": fixed}]}
    ) == {"sent": 1, "refused": []}
    wait_for("the fixed event", lambda: value_of(target, 10_700) == [[7]])
    pending = {d["id"] for d in target.get("/deadletters", pending=True, limit=10_000)}
    assert letter["id"] not in pending


def test_out_of_range_events_replay_by_id_unchanged_and_by_entry_fixed(
    target: ServedService,
) -> None:
    before = last_dead_id(target)
    event = {"op": "put", "key": 10_800, "value": 8, "seq": 8, "_ts": 2**62}
    target.post("/streams/puts/events", {"events": [event]})
    [letter] = wait_for("the poison", lambda: dead_after(target, before))
    assert target.post("/deadletters/replay", {"ids": [letter["id"]]})["sent"] == 1
    [echo] = wait_for("the unchanged replay", lambda: dead_after(target, letter["id"]))
    assert echo["event"] == event and echo["reason"].startswith("event time out of range")
    fixed = {k: v for k, v in event.items() if k != "_ts"}
    target.post(
        "/deadletters/replay", {"entries": [{"id": letter["id"], "stream": "puts", "event": fixed}]}
    )
    wait_for("the fixed event", lambda: value_of(target, 10_800) == [[8]])
    every_plan_answers(target, ("duckdb", "postgres"))


def test_raw_records_are_kept_whole_and_replay_through_a_fixed_entry(
    target: ServedService,
) -> None:
    before = last_dead_id(target)
    oversize = b'{"op": "put", "key": 1, "pad": "' + b"p" * 905_000 + b'"}'
    raws = [
        (b'{"op": "put", "key": 10900, "value": ', "bad JSON", "utf8"),
        (b"\xff\xfe" + b"\x00" * 100, "bad encoding", "base64"),
        (b'[{"op": "put", "key": 10901}]', "must be a JSON object", "json"),
        (oversize, "oversize payload", "utf8"),
    ]
    produce(broker_of(target), [(value, []) for value, _, _ in raws])
    dead = wait_for(
        "the raw records",
        lambda: (d := dead_after(target, before)) and len(d) == len(raws) and d,
    )
    dead.sort(key=lambda d: d["offset"])
    for letter, (value, fragment, encoding) in zip(dead, raws, strict=True):
        assert fragment in letter["reason"] and letter["encoding"] == encoding, letter["reason"]
        stored = letter["payload"]
        kept = base64.b64decode(stored) if encoding == "base64" else stored.encode()
        assert kept == value and letter["payload_bytes"] == len(value)
        assert letter["event"] is None
    ids = [d["id"] for d in dead]
    refused = target.post("/deadletters/replay", {"ids": ids})
    assert refused["sent"] == 0 and [r["id"] for r in refused["refused"]] == ids
    assert all("entry" in r["reason"] for r in refused["refused"])
    fixed = {"op": "put", "key": 10_900, "value": 9, "seq": 9}
    result = target.post(
        "/deadletters/replay", {"entries": [{"id": ids[0], "stream": "puts", "event": fixed}]}
    )
    assert result == {"sent": 1, "refused": []}
    wait_for("the fixed bad JSON", lambda: value_of(target, 10_900) == [[9]])
    every_plan_answers(target, ("duckdb", "postgres"))
    normal_event_flows(target, 10_950)


# -- restarts, the repair of an old poisoned high mark, batch records from outside ----------------


@pytest.fixture(scope="module")
def own_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedKafka]:
    """A broker that outlives the services (``streamdi serve``'s own would die with a kill)."""
    embedded = EmbeddedKafka(tmp_path_factory.mktemp("broker"))
    embedded.start()
    try:
        yield embedded
    finally:
        embedded.stop()


def _serve(state: Path, broker: EmbeddedKafka) -> ServedService:
    service = ServedService(
        state,
        KAFKA__BOOTSTRAP_SERVERS=broker.bootstrap_servers,
        MIGRATION__TARGETS="duckdb",
        MIGRATION__PUSH_BATCHES="4",
        MIGRATION__PUSH_MS="300",
        ENGINE__BATCH_TIMEOUT_MS="50",
    )
    service.wait_ready()
    return service


def _repair(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(REPO),
        "STREAMDI__STATE_DIR": str(state),
        "STREAMDI__LOG_LEVEL": "WARNING",
    }
    return subprocess.run(
        [sys.executable, "-m", "cli.main", "streams", "repair", SPEC, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_kill_restart_and_an_old_poisoned_high_mark(
    own_broker: EmbeddedKafka, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    service = _serve(state, own_broker)
    try:
        normal_event_flows(service, 1)
        before = last_dead_id(service)
        service.post(
            "/streams/puts/events",
            {"events": [{"op": "put", "key": 2, "value": 2, "seq": 2, "_ts": 2**62}]},
        )
        produce(own_broker.bootstrap_servers, [(single(3, 2**62), [])])
        wait_for("the poison", lambda: len(dead_after(service, before)) == 2)
        service.process.kill()  # kill -9
        service.process.wait(30)
        service.client.close()

        service = _serve(state, own_broker)
        assert len(dead_after(service, before)) == 2  # kept, nothing applied twice
        every_plan_answers(service, ("duckdb",))
        normal_event_flows(service, 4)
        assert service.stop() == 0

        # an older version stored the poison as the high mark; write it as it would have
        staging = state / "staging.duckdb"
        con = duckdb.connect(str(staging))
        con.execute("UPDATE streamdi.streams SET max_ts = ? WHERE stream = 'puts'", [2**62])
        con.close()
        service = _serve(state, own_broker)
        every_plan_answers(service, ("duckdb",))  # the year 148108 renders; no 500
        before = last_dead_id(service)
        receipt = service.post(
            "/streams/puts/events", {"events": [{"op": "put", "key": 5, "value": 5, "seq": 5}]}
        )
        [late] = wait_for("the poisoned stream's victim", lambda: dead_after(service, before))
        assert late["pos"] == receipt["first_pos"] and late["reason"].startswith("late")
        assert "streams repair" in service.log.read_text()  # the service said what to do
        running = _repair(state, "--stream", "puts")
        assert running.returncode == 1 and "in use" in running.stderr, running
        assert service.stop() == 0

        dry = _repair(state, "--stream", "puts", "--dry-run")
        assert dry.returncode == 0 and "--dry-run" in dry.stdout, dry
        done = _repair(state, "--stream", "puts")
        assert done.returncode == 0, done
        assert "stream puts: high mark 4611686018427387904 µs -> " in done.stdout, done.stdout
        con = duckdb.connect(str(staging), read_only=True)
        [(high,)] = con.execute(
            "SELECT max_ts FROM streamdi.streams WHERE stream = 'puts'"
        ).fetchall()
        con.close()
        assert high is None or high <= now_us()
        service = _serve(state, own_broker)
        normal_event_flows(service, 6)
        every_plan_answers(service, ("duckdb",))

        # batch records an outside producer writes (last: a batch id of its own takes the
        # collector's numbering, so only single-event records are used after it)
        status = service.get("/status")
        next_batch = status["streams"]["puts"]["last_batch"] + 1
        before = last_dead_id(service)
        table = pa.table(
            {
                "op": ["put", "put"],
                "key": pa.array([7, 8], pa.int64()),
                "value": pa.array([7, 8], pa.int64()),
                "seq": pa.array([7, 8], pa.int64()),
                "_ts": pa.array([2**62, now_us()], pa.int64()),
                "_pos": pa.array([0, 1], pa.int64()),
            }
        )
        [record] = encode_batch("puts", next_batch, table, [], cap=900_000, last_pos=1)
        corrupt = b"ARROW1" + b"\x00" * 200
        corrupt_headers = [
            ("sdi-kind", b"batch"),
            ("sdi-stream", b"puts"),
            ("sdi-batch", str(next_batch + 1).encode()),
            ("sdi-part", b"0/1"),
        ]
        produce(
            own_broker.bootstrap_servers,
            [(record.value, record.headers), (corrupt, corrupt_headers)],
        )
        dead = wait_for(
            "the outside batch records",
            lambda: (d := dead_after(service, before)) and len(d) == 2 and d,
        )
        poison, broken = sorted(dead, key=lambda d: d["offset"])
        assert poison["reason"].startswith("event time out of range")
        assert poison["event"]["_ts"] == 2**62
        assert broken["reason"].startswith("corrupt Arrow payload")
        assert base64.b64decode(broken["payload"]) == corrupt
        wait_for("the good row of the batch record", lambda: value_of(service, 8) == [[8]])
        produce(own_broker.bootstrap_servers, [(single(9, now_us()), [])])
        wait_for("a normal produced event", lambda: value_of(service, 9) == [[9]])
        every_plan_answers(service, ("duckdb",))
    finally:
        if service.process.poll() is None:
            service.stop()
        else:
            service.client.close()
