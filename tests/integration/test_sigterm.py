"""SIGTERM drains: the batch in hand is committed and ``streamdi run`` exits 0; a later run finishes
the stream and the total is every event exactly once."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import duckdb
import pytest

from ingest.broker import EmbeddedKafka
from ingest.ledger import ledger_events, write_ledger_file
from tests.integration.conftest import run_streamdi, start_streamdi, streamdi_env

pytestmark = pytest.mark.kafka


def test_sigterm_commits_the_batch_in_hand_and_exits_cleanly(
    broker: EmbeddedKafka, tmp_path: Path
) -> None:
    ledger = tmp_path / "txns.txt"
    write_ledger_file(ledger, ledger_events(80_000, keys=500, seed=3))
    env = streamdi_env(
        broker,
        tmp_path / "state",
        STREAMDI_TEST_LEDGER_FILE=str(ledger),
        ENGINE__BATCH_SIZE="2000",
        INGEST__BATCH_EVENTS="1000",
        # The plain-Python oracle keeps the stream in progress long enough for the signal to land
        # mid-stream (the compiled executor finishes 80,000 events in about a second).
        ENGINE__EXECUTOR="serial",
    )

    log = tmp_path / "run.log"
    process = start_streamdi(["run", "tests.integration.ledger_run:run"], env, log)
    staging = tmp_path / "state" / "staging.duckdb"
    # signal once the progress line shows committed batches (a busy machine starts slowly)
    deadline = time.monotonic() + 60
    while not re.search(r"batches [1-9]", log.read_text()) and time.monotonic() < deadline:
        assert process.poll() is None, log.read_text()
        time.sleep(0.1)
    process.send_signal(signal.SIGTERM)
    assert process.wait(60) == 0, log.read_text()
    con = duckdb.connect(str(staging), read_only=True)
    first = con.execute(
        "SELECT count(*), coalesce(sum(events), 0) FROM streamdi.batches"
    ).fetchall()[0]
    con.close()
    assert first[0] > 0 and 0 < first[1] < 80_000, f"stopped with {first} (not mid-stream)"
    assert (
        run_streamdi(["run", "tests.integration.ledger_run:run", "--until-idle", "1.5"], env, log)
        == 0
    )
    con = duckdb.connect(str(staging), read_only=True)
    events = con.execute("SELECT sum(events) FROM streamdi.batches").fetchall()[0][0]
    positions = con.execute(
        "SELECT count(*), count(DISTINCT _pos) FROM outputs.balances"
    ).fetchall()[0]
    con.close()
    assert events == 80_000
    assert positions[0] == positions[1]
