"""``streamdi tpcdi audit`` on a DuckDB warehouse file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli.main import main
from tests.unit.tpcdi.audit.tiny_dw import build
from tpcdi.audit.checks import ALL_CHECKS
from tpcdi.audit.connection import WarehouseConnection


def test_the_command_prints_every_check_and_exits_by_the_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    warehouse = tmp_path / "warehouse.duckdb"
    with WarehouseConnection.duckdb(str(warehouse), schema="tpcdi") as conn:
        build(conn, tmp_path / "keys")
    args = ["tpcdi", "audit", "--duckdb", str(warehouse), "--schema", "tpcdi"]
    code = main([*args, "--data", str(tmp_path / "keys"), "--json", str(tmp_path / "a.json")])
    out = capsys.readouterr().out
    assert code == 0, out
    lines = sum(len(p.read_text().splitlines()) - 1 for p in (tmp_path / "keys").rglob("*.csv"))
    assert f"loaded {lines} answer-key rows" in out
    assert f"audit: {len(ALL_CHECKS)} OK, 0 FAIL" in out and "every check OK" in out
    verdicts = json.loads((tmp_path / "a.json").read_text())
    assert verdicts["ok"] == len(ALL_CHECKS) and verdicts["fail"] == 0

    with WarehouseConnection.duckdb(str(warehouse), schema="tpcdi") as conn:
        conn.execute("UPDATE {dimtrade} SET status = 'Done' WHERE tradeid = 1000")
        conn.commit()
    assert main([*args, "--failures-only"]) == 1
    out = capsys.readouterr().out
    assert "FAIL  DimTrade Status" in out and "OK  " not in out


def test_a_missing_staging_area_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["tpcdi", "audit", "--duckdb", str(tmp_path / "w.duckdb"), "--data", "/nope"])
    assert code == 1
    assert "no staging area /nope" in capsys.readouterr().err
