"""``GET /status``, pause/resume without a hosted pipeline, and the scrape-time operations
metrics, on the query service over a real staging file and a DuckDB warehouse (no server)."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi.testclient import TestClient

from api.app import create_app
from api.service import QueryService
from migration.migrator import Migrator, build_targets
from migration.schema import WarehouseLayout
from staging.handoff import StagedDeltas
from streamdi.settings import load_settings
from tests.unit.api.harness import ShopStage


def test_status_and_metrics_report_staging_and_migration_lag(tmp_path: Path) -> None:
    stage = ShopStage(tmp_path / "staging.duckdb")
    settings = load_settings(
        streamdi={"state_dir": str(tmp_path)},
        # acknowledgements reach staging inline, so the lag below is exact
        migration={"targets": "duckdb", "max_batches_per_load": 4, "release_ms": 0},
    )
    layout = WarehouseLayout(stage.flow, settings.migration.schema_name)
    migrator = Migrator(
        StagedDeltas(stage.store), build_targets(settings, layout), settings.migration
    )
    service = QueryService(stage.store, settings, migrator=migrator)
    try:
        stage.stage_range(1, 4)
        migrator.migrate(via="push", merge="never")
        stage.stage_range(5, 6)
        with TestClient(create_app(service, settings)) as client:
            status = client.get("/status").json()
            assert status["pipeline"] == {"state": "absent", "error": None, "paused": False}
            assert status["staging"]["watermark"] == 6
            # the file, the state file beside it, their WALs and the segment files (the delta
            # logs and outputs)
            segments = sum(
                p.stat().st_size for p in (tmp_path / "staging.duckdb.segments").iterdir()
            )
            assert segments > 0
            files = [
                tmp_path / name
                for name in (
                    "staging.duckdb",
                    "staging.duckdb.wal",
                    "staging.duckdb.state",
                    "staging.duckdb.state.wal",
                )
            ]
            assert files[0].exists() and files[2].exists()
            on_disk = sum(f.stat().st_size for f in files if f.exists())
            assert status["staging"]["bytes"] == on_disk + segments
            lag = status["migration"]["duckdb"]
            assert lag["acknowledged"] == 4 and lag["lag_batches"] == 2
            assert lag["lag_seconds"] > 0
            assert status["streams"]["events"]["last_batch"] == 6
            text = client.get("/metrics").text
            assert 'streamdi_migration_lag_batches{target="duckdb"} 2.0' in text
            # acknowledged by every target and released: batches 1..4 left staging
            assert status["staging"]["released_through"] == 4
            assert "streamdi_staging_pending_batches 2.0" in text
            seconds = re.search(r'streamdi_migration_lag_seconds\{target="duckdb"\} (\S+)', text)
            assert seconds is not None and float(seconds.group(1)) > 0
            # no hosted pipeline: nothing to pause or resume
            for action in ("pause", "resume"):
                refused = client.post(f"/ingest/{action}")
                assert refused.status_code == 409
                assert refused.json()["error"]["code"] == "no_pipeline"
            migrator.migrate(via="push", merge="never")
            caught_up = client.get("/status").json()["migration"]["duckdb"]
            assert caught_up == {"acknowledged": 6, "lag_batches": 0, "lag_seconds": 0.0}
    finally:
        service.close()
        migrator.close()
        stage.store.close()
