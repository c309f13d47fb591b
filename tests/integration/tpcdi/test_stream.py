"""``streamdi tpcdi stream`` on a tiny generated data set: Batch1's trades, cash transactions and
holdings go through the whole path as one event stream, and what the warehouse then holds is what
the files say (every trade in its final state, one cash balance row per account and day, one
holding row per holding record)."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from tests.integration.tpcdi.test_run import SCHEMA, run_cli
from tpcdi.generator import generate
from tpcdi.readers import read_file

pytestmark = [pytest.mark.kafka]


def test_batch1_facts_streamed_end_in_the_warehouse(tmp_path: Path) -> None:
    data = tmp_path / "data"
    generate(data, 0.02)
    work = tmp_path / "work"
    log = tmp_path / "stream.log"
    code = run_cli(
        ["tpcdi", "stream", "--data", str(data), "--workdir", str(work), "--no-progress",
         "--json", str(tmp_path / "stream.json")],
        tmp_path / "state",
        tmp_path / "cache",
        log,
    )  # fmt: skip
    assert code == 0, log.read_text()[-3000:]
    report = json.loads((tmp_path / "stream.json").read_text())
    batch1 = data / "Batch1"
    history = read_file(batch1 / "TradeHistory.txt").table.num_rows
    cash = read_file(batch1 / "CashTransaction.txt").table
    holdings = read_file(batch1 / "HoldingHistory.txt").table.num_rows
    trades = read_file(batch1 / "Trade.txt").table
    assert report["events"] == history + cash.num_rows + holdings
    assert report["trades"] == history
    assert report["events_per_s"] > 0
    assert 0 <= report["latency_ms"]["p50"] <= report["latency_ms"]["p99"]
    dw = duckdb.connect(str(work / "warehouse.duckdb"), read_only=True)
    dw.execute(f"SET search_path = '{SCHEMA}'")
    found = dw.execute(
        "SELECT (SELECT count(*) FROM dimtrade), "
        "(SELECT count(*) FROM dimtrade WHERE status IN ('Completed', 'Canceled')), "
        "(SELECT count(*) FROM factholdings), "
        "(SELECT count(DISTINCT (accountid, sk_dateid)) = count(*) FROM factcashbalances)"
    ).fetchone()
    closed = sum(1 for s in trades["T_ST_ID"].to_pylist() if s in ("CMPT", "CNCL"))
    assert found == (trades.num_rows, closed, holdings, True)
