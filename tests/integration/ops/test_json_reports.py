"""``--json`` for scripts on the ingest commands: ``streamdi run --json -`` writes its report as
JSON on stdout (the human line goes to stderr), ``streamdi collect --json PATH`` writes its
per-stream reports to a file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ingest.broker import EmbeddedKafka
from ingest.ledger import ledger_events, write_ledger_file
from tests.integration.conftest import REPO, streamdi_env

pytestmark = pytest.mark.kafka


def test_run_and_collect_write_json_reports(broker: EmbeddedKafka, tmp_path: Path) -> None:
    ledger = tmp_path / "txns.txt"
    write_ledger_file(ledger, ledger_events(3_000, keys=50, seed=5))
    env = streamdi_env(broker, tmp_path / "state", STREAMDI_TEST_LEDGER_FILE=str(ledger))
    collect_json = tmp_path / "collect.json"
    collected = subprocess.run(
        [sys.executable, "-m", "cli.main", "-q", "collect", "tests.integration.ledger_run:run",
         "--json", str(collect_json)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert collected.returncode == 0, collected.stderr
    reports = json.loads(collect_json.read_text())
    assert [r["stream"] for r in reports] == ["txns"] and reports[0]["events"] == 3_000
    ran = subprocess.run(
        [sys.executable, "-m", "cli.main", "-q", "run", "tests.integration.ledger_run:run",
         "--no-collect", "--no-progress", "--until-idle", "1.5", "--json", "-"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    report = json.loads(ran.stdout)  # stdout is the JSON alone
    assert report["dataflow"] == "ledger" and report["events"] == 3_000
    assert report["batches"] >= 1 and report["commit_p99_ms"] >= report["commit_p50_ms"]
    assert "streamdi run:" in ran.stderr
