"""Bad input through a real broker: every kind of bad record lands in the dead-letter table with its
topic, partition, offset and reason; the good records around it are applied; and a fixed dead
letter re-offered with ``streamdi deadletters replay`` is applied and marked replayed."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from ingest.broker import EmbeddedKafka, client_config, ensure_topics
from ingest.records import encode_batch, to_ipc
from staging import connect as connect_staging
from streamdi.settings import load_settings
from tests.integration.conftest import run_streamdi, streamdi_env

pytestmark = pytest.mark.kafka

SPEC = "tests.integration.ledger_run:run"
TOPIC = "ledger.txns"


def _event(kind: str, src: int, amount: int | None, ts: int, pos: int) -> dict[str, object]:
    return {
        "kind": kind,
        "src": src,
        "dst": None,
        "amount": amount,
        "amount2": None,
        "_ts": ts,
        "_pos": pos,
    }


def test_bad_records_become_dead_letters_and_fixed_ones_replay(
    broker: EmbeddedKafka, tmp_path: Path
) -> None:
    from kafka import KafkaProducer

    kafka = load_settings().kafka
    ensure_topics(kafka, broker.bootstrap_servers, {TOPIC: 1})
    ledger = tmp_path / "txns.txt"
    # The file: two good opens, a wrong field count, a bad number, bad encoding, one more good line.
    ledger.write_bytes(
        b"open|1||100||1000\n"
        b"open|2||100||2000\n"
        b"open|3|100||3000\n"
        b"deposit|1||ten||4000\n"
        b"deposit|1||\xff\xfe||5000\n"
        b"deposit|2||5||6000\n"
    )
    state = tmp_path / "state"
    env = streamdi_env(
        broker, state, STREAMDI_TEST_LEDGER_FILE=str(ledger), INGEST__ALLOWED_LATENESS_MS="1"
    )
    log = tmp_path / "run.log"
    assert run_streamdi(["collect", SPEC], env, log) == 0, log.read_text()

    producer = KafkaProducer(**client_config(kafka, broker.bootstrap_servers), acks="all")
    sends: list[tuple[bytes, list[tuple[str, bytes]]]] = [
        (json.dumps(_event("deposit", 1, 7, 10_000, 100)).encode(), []),  # good single event
        (b'{"kind": "deposit", "src": ', []),  # bad JSON
        (b"\xff\xfe\xfd", []),  # bad encoding
        (json.dumps(_event("deposit", 1, 7, 11_000, 101)).encode(), [("sdi-stream", b"nope")]),
        (json.dumps({**_event("deposit", 1, 7, 12_000, 102), "amount": "x7"}).encode(), []),
        (b"x" * (kafka.max_record_bytes + 10), []),  # oversize payload
        (
            b"not arrow at all",
            [
                ("sdi-kind", b"batch"),
                ("sdi-stream", b"txns"),
                ("sdi-batch", b"50"),
                ("sdi-part", b"0/1"),
            ],
        ),
        (json.dumps(_event("deposit", 2, 9, 500, 103)).encode(), []),  # late: 11.5 ms behind
    ]
    good = pa.table(
        {
            "kind": ["deposit"],
            "src": pa.array([2], pa.int64()),
            "dst": pa.array([None], pa.int64()),
            "amount": pa.array([3], pa.int64()),
            "amount2": pa.array([None], pa.int64()),
            "_ts": pa.array([13_000], pa.int64()),
            "_pos": pa.array([200], pa.int64()),
        }
    )
    wrong_schema = to_ipc(pa.table({"other": [1]}))
    sends.append(
        (
            wrong_schema,
            [
                ("sdi-kind", b"batch"),
                ("sdi-stream", b"txns"),
                ("sdi-batch", b"60"),
                ("sdi-part", b"0/1"),
            ],
        )
    )
    for record in encode_batch("txns", 61, good, [], cap=kafka.max_record_bytes, last_pos=200):
        sends.append((record.value, record.headers))
    for value, headers in sends:
        producer.send(TOPIC, value=value, headers=headers, partition=0)
    producer.flush()
    producer.close()

    assert run_streamdi(["run", SPEC, "--no-collect", "--until-idle", "1.5"], env, log) == 0, (
        log.read_text()
    )
    staging = state / "staging.duckdb"
    con = connect_staging(staging)
    dead = con.execute(
        'SELECT id, step, topic, partition, "offset", pos, reason FROM streamdi.dead_letters ORDER BY id'
    ).fetchall()
    balances = dict(con.execute("SELECT id, balance FROM state.accounts").fetchall())
    con.close()
    reasons = [r[6] for r in dead]
    expected_fragments = [
        "wrong field count",
        "cannot read 'ten' as int64",
        "bad encoding",
        "bad JSON",
        "bad encoding",
        "unknown stream 'nope'",
        "cannot read 'x7' as int64",
        "oversize payload",
        "corrupt Arrow payload",
        "late: event time",
        "corrupt Arrow payload",  # a payload that lacks the stream's columns
    ]
    for fragment in expected_fragments:
        assert any(fragment in r for r in reasons), f"no dead letter with {fragment!r}: {reasons}"
    assert len(dead) == len(expected_fragments), "\n".join(reasons)
    assert all(r[2] == TOPIC and r[3] == 0 and r[4] is not None and r[4] >= 0 for r in dead)
    # The good events went through: opens, the file's deposit, the single event, the last batch.
    assert balances == {1: 100 + 7 + 0, 2: 100 + 5 + 3}

    out = tmp_path / "dead.jsonl"
    assert run_streamdi(["deadletters", "list", SPEC, "--json", str(out)], env, log) == 0
    entries = [json.loads(line) for line in out.read_text().splitlines()]
    fixable = next(e for e in entries if "'x7'" in e["reason"])
    fixable["event"]["amount"] = 70
    fixed = tmp_path / "fixed.jsonl"
    fixed.write_text(json.dumps(fixable) + "\n")
    assert run_streamdi(["deadletters", "replay", SPEC, "--file", str(fixed)], env, log) == 0, (
        log.read_text()
    )
    env_late_ok = {**env, "INGEST__ALLOWED_LATENESS_MS": ""}
    assert run_streamdi(["run", SPEC, "--no-collect", "--until-idle", "1.5"], env_late_ok, log) == 0
    con = connect_staging(staging)
    replayed = con.execute(
        "SELECT replayed_in FROM streamdi.dead_letters WHERE id = ?", [fixable["id"]]
    ).fetchall()[0][0]
    balance = con.execute("SELECT balance FROM state.accounts WHERE id = 1").fetchall()[0][0]
    con.close()
    assert replayed is not None
    assert balance == 107 + 70 + 7  # the deposit of 70 plus its bonus of 7
