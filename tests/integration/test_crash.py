"""Exactly once across crashes, with a real broker and real processes killed with SIGKILL.

100,000 ledger events are collected into the broker (the collector is killed mid-source and
restarted: no batch appears twice in the topic), then consumed by ``streamdi run`` twice: once
without crashes (the reference) and once killed again and again — inside the engine's work, inside
the staging transaction, right after a commit, right after a poll, and at random moments — and
restarted each time. The crashed run must end with exactly the reference's state, outputs, dead
letters and aborts, with every batch id committed once and none missing.
"""

from __future__ import annotations

import json
import random
import signal
import time
from pathlib import Path

import pyarrow as pa
import pytest

from ingest.broker import EmbeddedKafka, client_config
from ingest.ledger import ledger_events, write_ledger_file
from ingest.records import BATCH, LAST_POS, STREAM, from_ipc, header_map
from staging import connect as connect_staging
from streamdi.settings import load_settings
from tests.integration.conftest import run_streamdi, staged_watermark, start_streamdi, streamdi_env

pytestmark = pytest.mark.kafka

SPEC = "tests.integration.ledger_run:run"
EVENTS = 100_000


def _topic_batches(broker: EmbeddedKafka, topic: str) -> list[tuple[int, pa.Table]]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        **client_config(load_settings().kafka, broker.bootstrap_servers),
        group_id=None,
        enable_auto_commit=False,
        max_partition_fetch_bytes=16 * 1024 * 1024,
    )
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    out: list[tuple[int, pa.Table]] = []
    empty = 0
    while empty < 3:
        polled = consumer.poll(timeout_ms=300)
        if not polled:
            empty += 1
        for records in polled.values():
            for record in records:
                headers = header_map(record.headers)
                assert headers[STREAM] == "txns" and LAST_POS in headers
                out.append((int(headers[BATCH]), from_ipc(record.value)))
    consumer.close()
    return out


def _staged(path: Path) -> dict[str, object]:
    con = connect_staging(path)
    try:

        def rows(sql: str) -> list[tuple[object, ...]]:
            return [tuple(r) for r in con.execute(sql).fetchall()]

        return {
            "accounts": rows("SELECT * FROM state.accounts ORDER BY id"),
            "book": rows("SELECT * FROM state.book ORDER BY id"),
            "sequences": rows("SELECT * FROM streamdi.sequences ORDER BY name"),
            "outputs": rows("SELECT * EXCLUDE (batch_id) FROM outputs.balances ORDER BY _pos"),
            "dead": rows(
                'SELECT stream, step, topic, partition, "offset", pos, ts, reason, payload '
                "FROM streamdi.dead_letters ORDER BY pos, step"
            ),
            "aborts": rows("SELECT * EXCLUDE (batch_id) FROM streamdi.aborts ORDER BY pos, step"),
            "batch_ids": [r[0] for r in rows("SELECT batch_id FROM streamdi.batches ORDER BY 1")],
            "delta_batches": sorted(
                {r[0] for r in rows("SELECT DISTINCT batch_id FROM delta_log.accounts")}
            ),
            "events": rows("SELECT sum(events) FROM streamdi.batches")[0][0],
            "streams": rows("SELECT stream, last_batch, events, last_pos FROM streamdi.streams"),
        }
    finally:
        con.close()


def test_exactly_once_across_kill_9(broker: EmbeddedKafka, tmp_path: Path) -> None:
    rng = random.Random(20261122)
    ledger = tmp_path / "txns.txt"
    write_ledger_file(ledger, ledger_events(EVENTS, keys=1_000, seed=7))
    state = tmp_path / "state"
    common = {"STREAMDI_TEST_LEDGER_FILE": str(ledger), "INGEST__BATCH_EVENTS": "1000"}

    # -- the collector, killed mid-source and restarted ---------------------------------------
    log = tmp_path / "collect.log"
    env = streamdi_env(broker, state, **common)
    checkpoint = state / "collector" / "ledger" / "txns.json"
    process = start_streamdi(["collect", SPEC], env, log)
    deadline = time.monotonic() + 60
    while not checkpoint.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    assert process.poll() is None, (
        f"the collector ended before it could be killed: {log.read_text()}"
    )
    process.send_signal(signal.SIGKILL)
    assert process.wait(10) == -signal.SIGKILL
    killed_at = json.loads(checkpoint.read_text())["batch_id"]
    assert 0 < killed_at < EVENTS // 1000
    assert run_streamdi(["collect", SPEC], env, log) == 0, log.read_text()
    batches = _topic_batches(broker, "ledger.txns")
    ids = [b for b, _ in batches]
    assert ids == list(range(1, EVENTS // 1000 + 1)), "a batch is missing or produced twice"
    positions = pa.concat_tables([t for _, t in batches]).column("_pos").to_pylist()
    assert positions == list(range(EVENTS))

    # -- the reference: one run without crashes ----------------------------------------------------
    reference = tmp_path / "reference.duckdb"
    env_ref = streamdi_env(
        broker, state, STAGING__PATH=str(reference), ENGINE__BATCH_SIZE="1000", **common
    )
    log = tmp_path / "reference.log"
    assert run_streamdi(["run", SPEC, "--no-collect", "--until-idle", "1.5"], env_ref, log) == 0, (
        log.read_text()
    )
    expected = _staged(reference)
    rejected = sum(1 for d in expected["dead"] if d[1] == "ingest")  # type: ignore[attr-defined]
    assert expected["events"] == EVENTS - rejected
    assert expected["streams"] == [("txns", EVENTS // 1000, EVENTS - rejected, EVENTS - 1)]

    # -- the crashed run: killed at every kind of moment, restarted each time --------------------------
    crashed = tmp_path / "crashed.duckdb"
    env_crash = streamdi_env(
        broker, state, STAGING__PATH=str(crashed), ENGINE__BATCH_SIZE="1000", **common
    )
    log = tmp_path / "crashed.log"
    # 100 engine batches: room for every planned crash point even with the compiled engine,
    # which runs a batch in milliseconds (random kills then mostly land between batches).
    plan = ["execute", "commit", "committed", "poll"] * 3 + ["random"] * 4

    rng.shuffle(plan)
    kills = 0
    watermarks = []
    for phase in plan:
        watermark = staged_watermark(crashed)
        watermarks.append(watermark)
        args = ["run", SPEC, "--no-collect", "--until-idle", "1.5"]
        if phase != "random":
            args += ["--crash-at", f"{phase}:{watermark + rng.randint(1, 2)}"]
        # Random kills hit a run of the plain-Python oracle, which is slow enough to be mid-work
        # at any moment; the other restarts run the compiled executor: state written by one
        # executor is resumed by the other, which must not change the result.
        env = {**env_crash, "ENGINE__EXECUTOR": "serial"} if phase == "random" else env_crash
        process = start_streamdi(args, env, log)
        if phase == "random":
            time.sleep(rng.uniform(1.0, 3.0))
            process.send_signal(signal.SIGKILL)
        code = process.wait(120)
        if code == -signal.SIGKILL:
            kills += 1
        else:
            assert code == 0, log.read_text()
    assert kills >= 10, f"only {kills} kills landed (watermarks {watermarks})"
    assert (
        run_streamdi(["run", SPEC, "--no-collect", "--until-idle", "1.5"], env_crash, log) == 0
    ), log.read_text()
    actual = _staged(crashed)

    assert actual["batch_ids"] == list(range(1, len(actual["batch_ids"]) + 1))  # type: ignore[arg-type]
    assert set(actual["delta_batches"]) <= set(actual["batch_ids"])  # type: ignore[call-overload]
    outputs = actual["outputs"]
    assert len({row[-2] for row in outputs}) == len(outputs)  # type: ignore[union-attr]
    for key in ("accounts", "book", "sequences", "outputs", "dead", "aborts", "events", "streams"):
        assert actual[key] == expected[key], f"{key} differs from the run without crashes"
