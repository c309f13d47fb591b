"""kill -9 during ``streamdi upgrade apply`` (a real process killed with SIGKILL at each dangerous
point of the staging and the warehouse switch): each store is left on the old or the new version,
never half, and running the upgrade again finishes it with every row equal to the oracle."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from etl_dataflows.evolution import describe_flow
from etl_dataflows.evolution.convert import convert_image
from etl_dataflows.executors import BaseExecutor, create_executor
from migration.migrator import Migrator, build_targets
from migration.schema import WarehouseLayout
from staging import StagingStore
from staging.handoff import StagedDeltas
from streamdi.settings import StreamdiSettings, load_settings
from tests.integration.conftest import run_streamdi
from tests.unit.cli import upgrade_flows
from tests.unit.staging.helpers import simple_commit
from tests.unit.staging.test_upgrade import batches

SPEC = "tests.unit.cli.upgrade_flows:v2"
REPO = Path(__file__).resolve().parents[3]


def _env(state: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if "__" not in k}
    env.update(
        STREAMDI__STATE_DIR=str(state),
        STREAMDI__LOG_LEVEL="WARNING",
        MIGRATION__TARGETS="duckdb",
        PYTHONPATH=str(REPO),
    )
    return env


def _stage(state: Path) -> tuple[StreamdiSettings, BaseExecutor]:
    """Version 1 staged (6 batches) and batches 1-4 in the DuckDB warehouse."""
    settings = load_settings(
        streamdi={"state_dir": str(state)}, migration={"targets": "duckdb", "release_ms": 0}
    )
    oracle = create_executor("serial", upgrade_flows.v1)
    with StagingStore(settings.staging_path, upgrade_flows.v1, background_merge=False) as store:
        for batch in batches(upgrade_flows.v1, 1, 6, seed=9):
            store.commit([simple_commit(batch.batch_id, oracle.run_batch(batch))])
            if batch.batch_id == 4:
                layout = WarehouseLayout(
                    store.flow, settings.migration.schema_name, history=store.history
                )
                migrator = Migrator(
                    StagedDeltas(store), build_targets(settings, layout), settings.migration
                )
                migrator.migrate(merge="force")
                migrator.close()
    return settings, oracle


def _warehouse_fingerprint(settings: StreamdiSettings) -> str | None:
    layout = WarehouseLayout(upgrade_flows.v2, settings.migration.schema_name)
    target = build_targets(settings, layout)["duckdb"]
    try:
        return target.recorded()[0]
    finally:
        target.close()


@pytest.mark.parametrize("phase", ["converted", "switching", "switched", "target-switching"])
def test_a_killed_upgrade_leaves_old_or_new_and_finishes_on_rerun(
    tmp_path: Path, phase: str
) -> None:
    settings, oracle = _stage(tmp_path)
    v1_fingerprint = describe_flow(upgrade_flows.v1).fingerprint()
    v2_fingerprint = describe_flow(upgrade_flows.v2).fingerprint()
    log = tmp_path / "upgrade.log"

    code = run_streamdi(["upgrade", "apply", SPEC, "--crash-at", phase], _env(tmp_path), log)
    assert code == -signal.SIGKILL, log.read_text()

    switched = phase in ("switched", "target-switching")
    flow = upgrade_flows.v2 if switched else upgrade_flows.v1
    expected = (
        convert_image(oracle.state_image(), describe_flow(upgrade_flows.v1), upgrade_flows.v2)
        if switched
        else oracle.state_image()
    )
    with StagingStore(settings.staging_path, flow, background_merge=False) as store:
        assert store.version == (2 if switched else 1)
        assert store.load_state().equals(expected)
    # the warehouse is never half switched: still version 1's layout, through batch 4
    assert _warehouse_fingerprint(settings) == v1_fingerprint

    assert run_streamdi(["upgrade", "apply", SPEC], _env(tmp_path), log) == 0, log.read_text()
    assert _warehouse_fingerprint(settings) == v2_fingerprint
    converted = convert_image(
        oracle.state_image(), describe_flow(upgrade_flows.v1), upgrade_flows.v2
    )
    with StagingStore(settings.staging_path, upgrade_flows.v2, background_merge=False) as store:
        assert store.version == 2
        assert store.load_state().equals(converted)
    layout = WarehouseLayout(upgrade_flows.v2, settings.migration.schema_name)
    target = build_targets(settings, layout)["duckdb"]
    target.open()
    try:
        assert target.watermark() == 6
        rows = converted.tables["accounts"]
        expected_rows = sorted(
            zip(*(rows.column(n).to_pylist() for n in rows.column_names), strict=True), key=repr
        )
        assert sorted(target.table_rows("accounts", current=True), key=repr) == expected_rows
        history = target.fetch(
            f"SELECT version, watermark FROM {layout.layouts_name} ORDER BY version"
        )
        assert [(int(v), int(w)) for v, w in history] == [(1, 0), (2, 4)]
    finally:
        target.close()
