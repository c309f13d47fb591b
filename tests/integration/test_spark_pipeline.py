"""``streamdi run --executor spark`` end to end: Kafka (the embedded broker) -> the engine with its
compiled step running in Spark tasks -> staging -> migration into DuckDB, with every staged and
migrated row identical to a run of the same topic with ``--executor local``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import pytest

from etl_dataflows.testing import ledger_dataflow
from ingest.broker import EmbeddedKafka
from ingest.ledger import ledger_events, write_ledger_file
from migration.schema import WarehouseLayout
from staging import connect as connect_staging
from tests.integration.conftest import REPO, run_streamdi, streamdi_env

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

SPEC = "tests.integration.ledger_run:run"
EVENTS = 20_000


def _staged(path: Path) -> dict[str, Any]:
    con = connect_staging(path)
    try:
        queries = {
            "accounts": "SELECT * FROM state.accounts ORDER BY id",
            "book": "SELECT * FROM state.book ORDER BY id",
            "sequences": "SELECT * FROM streamdi.sequences ORDER BY name",
            "dead": "SELECT step, pos, ts, reason, payload FROM streamdi.dead_letters "
            "ORDER BY pos, step",
            "aborts": "SELECT * EXCLUDE (batch_id) FROM streamdi.aborts ORDER BY pos, step",
        }
        return {k: con.execute(sql).fetchall() for k, sql in queries.items()}
    finally:
        con.close()


def _warehouse(path: Path) -> dict[str, Any]:
    layout = WarehouseLayout(ledger_dataflow().build())
    con = duckdb.connect(str(path), read_only=True)
    try:
        return {
            name: sorted(con.execute(layout.current_sql(name)).fetchall(), key=repr)
            for name in ("accounts", "book", "balances")
        }
    finally:
        con.close()


def test_a_run_on_spark_equals_a_local_run(broker: EmbeddedKafka, tmp_path: Path) -> None:
    ledger = tmp_path / "txns.txt"
    write_ledger_file(ledger, ledger_events(EVENTS, keys=2_000, seed=11))
    state = tmp_path / "state"
    common = {
        "STREAMDI_TEST_LEDGER_FILE": str(ledger),
        "INGEST__BATCH_EVENTS": "5000",
        "ENGINE__BATCH_SIZE": "5000",
        "MIGRATION__TARGETS": "duckdb",
    }
    log = tmp_path / "collect.log"
    assert run_streamdi(["collect", SPEC], streamdi_env(broker, state, **common), log) == 0, (
        log.read_text()
    )
    runs = {}
    for executor in ("local", "spark"):
        env = streamdi_env(
            broker,
            state,
            STAGING__PATH=str(tmp_path / f"{executor}.duckdb"),
            MIGRATION__DUCKDB_PATH=str(tmp_path / f"{executor}-warehouse.duckdb"),
            STREAMDI__LOG_LEVEL="INFO",
            SPARK__PLACEMENT="spark",  # every batch through Spark tasks, whatever its size
            **common,
        )
        args = ["run", SPEC, "--no-collect", "--no-progress", "--until-idle", "2"]
        args += ["--executor", executor]
        if executor == "spark":
            args += ["--spark-master", "local[2]"]
        done = subprocess.run(  # not -q: the log says where the batches ran
            [sys.executable, "-m", "cli.main", *args],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        runs[executor] = done.stdout + done.stderr
    assert "spark session started master=local[2]" in runs["spark"]
    assert "spark batch step=ledger strategy=" in runs["spark"]
    assert "spark session" not in runs["local"]
    local, spark = _staged(tmp_path / "local.duckdb"), _staged(tmp_path / "spark.duckdb")
    assert len(local["accounts"]) >= 2_000 and local["aborts"]
    for key in local:
        assert spark[key] == local[key], f"staged {key} differs"
    # Outputs left staging once migrated (retention 0): compare them in the warehouse.
    migrated = _warehouse(tmp_path / "local-warehouse.duckdb")
    assert len(migrated["balances"]) > EVENTS // 2
    assert _warehouse(tmp_path / "spark-warehouse.duckdb") == migrated
