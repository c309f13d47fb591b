"""``streamdi run`` pushes into both warehouses from its own process while it runs (a real broker,
a real PostgreSQL); ``streamdi migrate`` refuses while that pipeline holds staging; after SIGTERM
(a final push) the warehouses hold every staged batch once and, merged, equal staging, and hold
its rejects (lines that do not parse, transactions the ledger aborts) once each."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import psycopg2
import pytest

from etl_dataflows.testing import ledger_dataflow
from ingest.broker import EmbeddedKafka
from ingest.ledger import ledger_events, write_ledger_file
from migration.migrator import build_targets
from migration.schema import WarehouseLayout
from staging.handoff import StagedDeltas
from staging.store import StagingStore
from streamdi.settings import load_settings
from tests.integration.conftest import start_streamdi, streamdi_env
from tests.integration.migration.conftest import PostgresServer, run_migrate
from tests.unit.migration.test_duckdb_target import assert_target_equals_staging
from tests.unit.migration.test_rejects import assert_rejects_equal_staging, staged_rejects

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

SPEC = "tests.integration.ledger_run:run"


def _ledger_batches(dsn: str) -> int:
    try:
        con = psycopg2.connect(dsn)
    except psycopg2.Error:
        return 0
    try:
        with con.cursor() as cur:
            cur.execute("SELECT count(*) FROM streamdi_migration.ledger")
            return int(cur.fetchone()[0])
    except psycopg2.Error:
        return 0
    finally:
        con.close()


def test_pipeline_pushes_and_the_command_waits_its_turn(
    broker: EmbeddedKafka, postgres: PostgresServer, tmp_path: Path
) -> None:
    ledger = tmp_path / "txns.txt"
    write_ledger_file(ledger, ledger_events(30_000, keys=500, seed=3))
    lines = ledger.read_text().splitlines(keepends=True)
    for at in (20_000, 5_000):  # lines with a wrong field count: dead letters
        lines.insert(at, 'deposit|1|"bad, line"\n')
    ledger.write_text("".join(lines))
    dsn = postgres.database()
    state = tmp_path / "state"
    env = streamdi_env(
        broker,
        state,
        STREAMDI_TEST_LEDGER_FILE=str(ledger),
        INGEST__BATCH_EVENTS="1000",
        ENGINE__BATCH_SIZE="1000",
        POSTGRES__DSN=dsn,
        MIGRATION__TARGETS="duckdb,postgres",
        MIGRATION__PUSH_BATCHES="2",
        MIGRATION__MERGE_ROWS="5000",
    )
    log = tmp_path / "run.log"
    process = start_streamdi(["run", SPEC, "--no-progress"], env, log)
    try:
        deadline = time.monotonic() + 90
        while _ledger_batches(dsn) < 4 and time.monotonic() < deadline:
            assert process.poll() is None, log.read_text()
            time.sleep(0.1)
        assert _ledger_batches(dsn) >= 4, "the pipeline pushed nothing"
        refused = run_migrate(["migrate", "status", SPEC], env)
        assert refused.returncode == 1
        assert "held by a running pipeline" in refused.stderr
        # let it finish the file, then stop it cleanly
        last, still = -1, 0
        while still < 3 and time.monotonic() < deadline:
            now = _ledger_batches(dsn)
            still = still + 1 if now == last else 0
            last = now
            time.sleep(1.0)
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0, log.read_text()

    settings = load_settings(
        streamdi={"state_dir": str(state)},
        postgres={"dsn": dsn},
        migration={"targets": "duckdb,postgres"},
    )
    store = StagingStore(settings.staging_path, ledger_dataflow())
    staged = StagedDeltas(store)
    top = store.watermark
    assert top >= 30
    assert staged.acks() == {"duckdb": top, "postgres": top}  # the final push got everything
    assert staged.released_through() == top
    targets = build_targets(settings, WarehouseLayout(store.flow))
    state_tables = store.load_state().tables
    dead, aborts = staged_rejects(store)
    assert len(dead) == 2 and sum(aborts.values()) > 0
    for target in targets.values():
        target.open()
        assert [b for b, _, _ in target.ledger_rows()] == list(range(1, top + 1))
        target.merge()
        assert_target_equals_staging(target, state_tables, {}, current=False)
        staged_outputs = store.query("SELECT sum(output_rows) AS n FROM streamdi.batches")
        assert len(target.table_rows("balances")) == staged_outputs.column("n")[0].as_py() > 0
        assert_rejects_equal_staging(target, store)
        target.close()
    store.close()
