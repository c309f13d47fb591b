"""The README's tour, step 2: its ``bank.py`` runs through the embedded broker into staging with
``streamdi run`` and does what the README says (101,000 events, the 2,000 deposits of 13 dead
letters, every other event applied once)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from ingest.broker import EmbeddedKafka
from staging import connect as connect_staging
from tests.compose_file import REPO
from tests.integration.conftest import run_streamdi, streamdi_env

pytestmark = pytest.mark.kafka


def test_the_readme_bank_module_runs_into_staging(broker: EmbeddedKafka, tmp_path: Path) -> None:
    blocks = re.findall(
        r"```python\n(.*?)```", (REPO / "README.md").read_text(encoding="utf-8"), re.S
    )
    bank = next(b for b in blocks if b.startswith("# bank.py"))
    (tmp_path / "bank.py").write_text(bank, encoding="utf-8")
    state = tmp_path / "state"
    env = streamdi_env(broker, state, PYTHONPATH=f"{tmp_path}{os.pathsep}{REPO}")
    report = tmp_path / "report.json"
    log = tmp_path / "run.log"
    args = ["run", "bank:run", "--until-idle", "3", "--no-progress", "--json", str(report)]
    assert run_streamdi(args, env, log) == 0, log.read_text()
    result = json.loads(report.read_text())
    assert result["events"] == 101_000
    with connect_staging(state / "staging.duckdb") as con:
        (dead,) = con.execute("SELECT count(*) FROM streamdi.dead_letters").fetchone() or (0,)
        balances = con.execute('SELECT sum(balance) FROM state."accounts"').fetchone()
    assert dead == 2_000
    # 1,000 accounts opened with 0; every deposit k adds amount + bonus(amount) (amount = k % 50;
    # bonus = amount // 10, and it raises for 13: those are the dead letters)
    applied = sum(a + a // 10 for a in (k % 50 for k in range(100_000)) if a != 13)
    assert balances == (applied,)
