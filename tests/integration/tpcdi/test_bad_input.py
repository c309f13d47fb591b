"""Bad input through ``streamdi tpcdi run``: every damaged record ends in DImessages (Batch1:
rejected lines and alerts) or in the staging dead-letter table (Batch2/3: rejected lines), with
its file, line and reason; the run never crashes and never drops a record silently. A data set
that lacks files fails at start, naming them all.

The data set is generated (tiny) and then damaged, one kind of fault per record:

* Batch1: an unknown CustomerMgmt.xml action, an unknown FINWIRE record type, a Trade.txt line
  whose quantity is not a number, a trade of an unknown account;
* Batch2: a Trade.txt line whose bid price is not a number, a new trade of an unknown account,
  a cash transaction of an unknown account.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from tests.integration.tpcdi.test_run import SCHEMA, run_cli
from tpcdi.generator import generate

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

UNKNOWN = "99999999"


def _lines(path: Path) -> list[str]:
    return path.read_text().split("\n")


def _set_field(path: Path, line: int, field: int, value: str) -> str:
    """Replace field ``field`` (0-based) of line ``line`` (1-based) of a pipe-delimited file;
    returns the field's old value."""
    lines = _lines(path)
    fields = lines[line - 1].split("|")
    old = fields[field]
    fields[field] = value
    lines[line - 1] = "|".join(fields)
    path.write_text("\n".join(lines))
    return old


def _damage(root: Path) -> dict[str, int]:
    """Apply the faults of the module docstring; returns the lines they are on."""
    batch1, batch2 = root / "Batch1", root / "Batch2"
    xml = batch1 / "CustomerMgmt.xml"
    text = xml.read_text()
    second = text.index('<TPCDI:Action ActionType="', text.index("<TPCDI:Action ") + 1)
    start = second + len('<TPCDI:Action ActionType="')
    xml.write_text(text[:start] + "BOGUS" + text[text.index('"', start) :])
    finwire = sorted(p for p in batch1.glob("FINWIRE*") if not p.name.endswith(".csv"))[0]
    record = _lines(finwire)
    record[0] = record[0][:15] + "XYZ" + record[0][18:]
    finwire.write_text("\n".join(record))
    _set_field(batch1 / "Trade.txt", 6, 6, "many")  # T_QTY
    _set_field(batch1 / "Trade.txt", 8, 8, UNKNOWN)  # T_CA_ID
    _set_field(batch2 / "Trade.txt", 2, 9, "x.y")  # T_BID_PRICE
    trades = _lines(batch2 / "Trade.txt")
    new_trade = next(i for i, line in enumerate(trades[2:], start=3) if line.startswith("I|"))
    _set_field(batch2 / "Trade.txt", new_trade, 10, UNKNOWN)  # T_CA_ID
    _set_field(batch2 / "CashTransaction.txt", 2, 2, UNKNOWN)  # CT_CA_ID
    return {"new_trade": new_trade}


def test_damaged_records_land_in_dimessages_or_dead_letters(tmp_path: Path) -> None:
    data = tmp_path / "data"
    generate(data, 0.02)
    lines = _damage(data)
    finwire = sorted(p for p in (data / "Batch1").glob("FINWIRE*") if not p.name.endswith(".csv"))
    log = tmp_path / "run.log"
    work = tmp_path / "work"
    code = run_cli(
        ["tpcdi", "run", "--data", str(data), "--workdir", str(work), "--no-progress",
         "--json", str(tmp_path / "run.json")],
        tmp_path / "state",
        tmp_path / "cache",
        log,
    )  # fmt: skip
    # the run goes to its end; the audit then fails (the damaged records are not in the DW)
    assert code == 1, log.read_text()[-3000:]
    assert (tmp_path / "run.json").exists()
    dw = duckdb.connect(str(work / "warehouse.duckdb"), read_only=True)
    dw.execute(f"SET search_path = '{SCHEMA}'")

    def messages(batch: int, kind: str, source: str, like: str) -> list[str]:
        rows = dw.execute(
            "SELECT messagedata FROM dimessages WHERE batchid = ? AND messagetype = ? "
            "AND messagesource = ? AND messagedata LIKE ?",
            [batch, kind, source, like],
        ).fetchall()
        return [r[0] for r in rows]

    assert messages(1, "Reject", "CustomerMgmt.xml", "line %: unknown ActionType 'BOGUS'%")
    assert messages(1, "Reject", finwire[0].name, "line 1: unknown record type 'XYZ'%")
    assert messages(1, "Reject", "Trade.txt", "line 6: T_QTY%many%")
    assert messages(1, "Alert", "DimTrade", f"%T_CA_ID = {UNKNOWN}%(Trade.txt line 8)")
    assert messages(2, "Alert", "DimTrade", f"%T_CA_ID = {UNKNOWN}%line {lines['new_trade']})")
    assert messages(2, "Alert", "FactCashBalances", f"%{UNKNOWN} (CashTransaction.txt line 2)")
    # nothing silently dropped: every Batch1 trade is in DimTrade, an alert or a rejected line
    written = [line.split("|")[0] for line in _lines(data / "Batch1" / "Trade.txt") if line]
    con = duckdb.connect()
    con.execute(f"ATTACH '{work / 'warehouse.duckdb'}' AS dw (READ_ONLY)")
    con.register("written", pa.table({"t_id": written}))
    loaded, alerted, rejected = con.execute(
        f"SELECT (SELECT count(*) FROM dw.{SCHEMA}.dimtrade "
        "WHERE CAST(tradeid AS VARCHAR) IN (SELECT t_id FROM written)), "
        f"(SELECT count(*) FROM dw.{SCHEMA}.dimessages WHERE batchid = 1 "
        "AND messagesource = 'DimTrade' AND messagetext = 'Unknown account or security'), "
        f"(SELECT count(*) FROM dw.{SCHEMA}.dimessages WHERE batchid = 1 "
        "AND messagesource = 'Trade.txt')"
    ).fetchone()  # type: ignore[misc]
    assert alerted > 1 and rejected == 1  # the unknown account, and the customer never created
    assert loaded + alerted + rejected == len(written)
    staging = duckdb.connect(str(work / "staging.duckdb"), read_only=True)
    dead = staging.execute("SELECT reason, payload FROM streamdi.dead_letters").fetchall()
    assert any(r.startswith("Trade.txt line 2: T_BID_PRICE") and "x.y" in p for r, p in dead), dead


def test_a_data_set_missing_files_fails_at_start_listing_them(tmp_path: Path) -> None:
    data = tmp_path / "data"
    generate(data, 0.02)
    (data / "Batch2" / "Account.txt").unlink()
    (data / "Batch3" / "Trade.txt").unlink()
    (data / "Batch1" / "HR.csv").unlink()
    log = tmp_path / "run.log"
    code = run_cli(
        ["tpcdi", "run", "--data", str(data), "--workdir", str(tmp_path / "work"),
         "--no-progress"],
        tmp_path / "state",
        tmp_path / "cache",
        log,
        timeout=120,
    )  # fmt: skip
    out = log.read_text()
    assert code == 1, out[-3000:]
    assert "lacks 3 file(s)" in out, out[-3000:]
    for name in ("Batch1/HR.csv", "Batch2/Account.txt", "Batch3/Trade.txt"):
        assert name in out
    assert not (tmp_path / "work" / "warehouse.duckdb").exists()  # nothing started
