"""``streamdi upgrade plan`` and ``apply`` on a real staging file and DuckDB warehouse: the plan
lists the typed changes (text and JSON) and exits 1 when a change cannot apply in place; apply
switches staging and the warehouse; a second apply finds nothing to do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli.main import main
from etl_dataflows.executors import create_executor
from staging import StagingStore
from streamdi.settings import load_settings
from tests.unit.cli import upgrade_flows
from tests.unit.staging.helpers import simple_commit
from tests.unit.staging.test_upgrade import batches


@pytest.fixture
def staged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("STREAMDI__STATE_DIR", str(tmp_path))
    monkeypatch.setenv("MIGRATION__TARGETS", "duckdb")
    path = load_settings().staging_path
    oracle = create_executor("serial", upgrade_flows.v1)
    with StagingStore(path, upgrade_flows.v1, background_merge=False) as store:
        for batch in batches(upgrade_flows.v1, 1, 3, seed=4):
            store.commit([simple_commit(batch.batch_id, oracle.run_batch(batch))])
    return path


def test_plan_then_apply(staged: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = "tests.unit.cli.upgrade_flows:v2"
    out = tmp_path / "plan.json"
    assert main(["upgrade", "plan", spec, "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "column_added" in text and "accounts.tier" in text and "in place" in text
    assert "warehouse duckdb: holds nothing of the dataflow yet" in text
    plan = json.loads(out.read_text())
    assert plan["applicable"] is True and plan["staging_version"] == 1
    assert {"kind": "table_added", "subject": "moves"}.items() <= {
        k: v for c in plan["changes"] if c["subject"] == "moves" for k, v in c.items()
    }.items()

    assert main(["upgrade", "apply", spec]) == 0
    text = capsys.readouterr().out
    assert "staging: switched to version 2 after batch 3" in text
    assert "warehouse duckdb: at version 2, through batch 3" in text
    assert main(["upgrade", "apply", spec]) == 0
    assert "already at this version" in capsys.readouterr().out
    with StagingStore(staged, upgrade_flows.v2, background_merge=False) as store:
        assert store.version == 2


def test_a_plan_that_cannot_apply_exits_1_and_apply_is_refused(
    staged: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["upgrade", "plan", "tests.unit.cli.upgrade_flows:v1"]) == 0
    assert "no changes" in capsys.readouterr().out
    assert main(["upgrade", "plan", "tests.unit.cli.upgrade_flows:rekeyed"]) == 1
    text = capsys.readouterr().out
    assert "REPROCESS key_changed" in text and "flow.migrate('accounts', fn)" in text
    assert main(["upgrade", "apply", "tests.unit.cli.upgrade_flows:rekeyed"]) == 1
    assert "refused" in capsys.readouterr().err
    with StagingStore(staged, upgrade_flows.v1, background_merge=False) as store:
        assert store.version == 1
