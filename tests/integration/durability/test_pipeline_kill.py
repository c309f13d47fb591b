"""kill -9 of ``streamdi collect`` and of ``streamdi run`` when each runs its *own* embedded Kafka
(no ``KAFKA__BOOTSTRAP_SERVERS``): the killed process leaves its broker running; the next one on
the state directory adopts it (no new start in the broker's log, the same pid) and stops it when
it ends cleanly. Every source event reaches the topic in exactly one batch, and staging exactly
once. (test_crash.py kills the pipeline many more times, on a broker the test owns.)"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from ingest.broker import EmbeddedKafka
from ingest.ledger import ledger_events, write_ledger_file
from tests.integration.conftest import REPO, run_streamdi, start_streamdi
from tests.integration.durability.helpers import broker_pid, kafka_jvms
from tests.integration.test_crash import _topic_batches

pytestmark = pytest.mark.kafka

SPEC = "tests.integration.ledger_run:run"
EVENTS = 100_000
BATCH = 1_000


def own_broker_env(state: Path, **extra: str) -> dict[str, str]:
    """The environment of a ``streamdi`` that runs the state directory's embedded Kafka."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("KAFKA__", "STAGING__", "INGEST__", "ENGINE__", "STREAMDI__"))
    }
    env.update(STREAMDI__STATE_DIR=str(state), STREAMDI__LOG_LEVEL="INFO", PYTHONPATH=str(REPO))
    env.update(extra)
    return env


def broker_starts(state: Path) -> int:
    """How many times a Kafka started on the state directory's log (its own log says)."""
    log = state / "kafka" / "broker.log"
    return log.read_text(errors="replace").count("Kafka Server started") if log.exists() else 0


def staged(path: Path) -> dict[str, object]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return {
            "batch_ids": [
                r[0]
                for r in con.execute("SELECT batch_id FROM streamdi.batches ORDER BY 1").fetchall()
            ],
            "events": con.execute("SELECT sum(events) FROM streamdi.batches").fetchall()[0][0],
            "streams": con.execute(
                "SELECT stream, last_batch, events, last_pos FROM streamdi.streams"
            ).fetchall(),
            "rejected": con.execute(
                "SELECT count(*) FROM streamdi.dead_letters WHERE step = 'ingest'"
            ).fetchall()[0][0],
            "outputs": con.execute(
                "SELECT count(*), count(DISTINCT _pos) FROM outputs.balances"
            ).fetchall()[0],
        }
    finally:
        con.close()


def _ledger_env(tmp_path: Path, state: Path) -> dict[str, str]:
    ledger = tmp_path / "txns.txt"
    write_ledger_file(ledger, ledger_events(EVENTS, keys=1_000, seed=11))
    return own_broker_env(
        state,
        STREAMDI_TEST_LEDGER_FILE=str(ledger),
        INGEST__BATCH_EVENTS=str(BATCH),
        ENGINE__BATCH_SIZE=str(BATCH),
    )


def test_kill_9_collect_with_its_own_broker(tmp_path: Path) -> None:
    state = tmp_path / "state"
    env = _ledger_env(tmp_path, state)
    log = tmp_path / "streamdi.log"
    try:
        checkpoint = state / "collector" / "ledger" / "txns.json"
        process = start_streamdi(["collect", SPEC], env, log)
        deadline = time.monotonic() + 90
        while not checkpoint.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        assert process.poll() is None, f"the collector ended before the kill: {log.read_text()}"
        process.send_signal(signal.SIGKILL)
        assert process.wait(10) == -signal.SIGKILL
        orphan = broker_pid(state)
        assert kafka_jvms(state) == [orphan], "the killed collector's broker should live on"
        assert 0 < json.loads(checkpoint.read_text())["batch_id"] < EVENTS // BATCH
        assert run_streamdi(["collect", SPEC], env, log) == 0, log.read_text()
        assert broker_starts(state) == 1, "the restarted collector started a second Kafka"
        assert not kafka_jvms(state), "the adopted broker was not stopped at the end"

        with EmbeddedKafka(state) as broker:  # the same log, started again: read the topic
            batches = _topic_batches(broker, "ledger.txns")
    finally:
        for pid in kafka_jvms(state):
            os.kill(pid, signal.SIGKILL)
    assert [b for b, _ in batches] == list(range(1, EVENTS // BATCH + 1)), "a batch twice or lost"
    positions = pa.concat_tables([t for _, t in batches]).column("_pos").to_pylist()
    assert positions == list(range(EVENTS))


@pytest.mark.slow
def test_kill_9_run_with_its_own_broker(tmp_path: Path) -> None:
    rng = random.Random(20261124)
    state = tmp_path / "state"
    env = _ledger_env(tmp_path, state)
    log = tmp_path / "streamdi.log"
    try:
        assert run_streamdi(["collect", SPEC], env, log) == 0, log.read_text()
        starts = broker_starts(state)
        run = ["run", SPEC, "--no-collect", "--until-idle", "1.5"]
        orphan = 0
        for crash in (["--crash-at", "commit:3"], ["--crash-at", "committed:9"], None):
            if crash is not None:
                process = start_streamdi(run + crash, env, log)
            else:  # at a random moment of a run of the (slow) oracle executor
                process = start_streamdi(run, {**env, "ENGINE__EXECUTOR": "serial"}, log)
                time.sleep(rng.uniform(3.0, 5.0))
                process.send_signal(signal.SIGKILL)
            assert process.wait(120) == -signal.SIGKILL, log.read_text()[-3000:]
            pid = broker_pid(state)
            assert kafka_jvms(state) == [pid], "the killed run's broker should live on"
            assert orphan in (0, pid), "a restarted run did not adopt the orphaned broker"
            orphan = pid
        assert broker_starts(state) == starts + 1, "a restarted run started a new Kafka"
        assert run_streamdi(run, env, log) == 0, log.read_text()[-3000:]
        assert broker_starts(state) == starts + 1
        assert not kafka_jvms(state), "the adopted broker was not stopped at the end"
    finally:
        for pid in kafka_jvms(state):
            os.kill(pid, signal.SIGKILL)

    result = staged(state / "staging.duckdb")
    rejected = result["rejected"]
    assert result["batch_ids"] == list(range(1, len(result["batch_ids"]) + 1))  # type: ignore[arg-type]
    assert result["events"] == EVENTS - rejected  # type: ignore[operator]
    assert result["streams"] == [("txns", EVENTS // BATCH, EVENTS - rejected, EVENTS - 1)]  # type: ignore[operator]
    count, distinct = result["outputs"]  # type: ignore[misc]
    assert count == distinct
