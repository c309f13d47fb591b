"""Batch validation, phase completion records and visibility rows on the tiny warehouse."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from tests.unit.tpcdi.audit.tiny_dw import T0, build
from tpcdi.audit.connection import WarehouseConnection
from tpcdi.audit.exceptions import WarehouseTablesMissing
from tpcdi.audit.pcr import completion_times, write_pcr
from tpcdi.audit.validation import VALIDATION_PAIRS, write_batch_validation
from tpcdi.audit.visibility import write_visibility

#: The warehouse after batch 3, counted by hand from tiny_dw.
FINAL = {
    ("DimAccount", "Row count"): 9,
    ("DimBroker", "Row count"): 2,
    ("DimCompany", "Row count"): 3,
    ("DimCustomer", "Row count"): 6,
    ("DimDate", "Row count"): 731,
    ("DimSecurity", "Row count"): 3,
    ("DimTime", "Row count"): 5,
    ("DimTrade", "Row count"): 7,
    ("FactCashBalances", "Row count"): 4,
    ("FactHoldings", "Row count"): 5,
    ("FactMarketHistory", "Row count"): 7,
    ("FactWatches", "Row count"): 4,
    ("Financial", "Row count"): 2,
    ("Industry", "Row count"): 2,
    ("Prospect", "Row count"): 3,
    ("StatusType", "Row count"): 6,
    ("TaxRate", "Row count"): 3,
    ("TradeType", "Row count"): 5,
    ("FactCashBalances", "Row count joined"): 4,
    ("FactHoldings", "Row count joined"): 5,
    ("FactMarketHistory", "Row count joined"): 7,
    ("FactWatches", "Row count joined"): 4,
    ("DimCustomer", "Inactive customers"): 2,
    ("FactWatches", "Inactive watches"): 2,
}
#: Batch 1's rows that differ from the final ones.
AFTER_BATCH_1 = {
    ("DimAccount", "Row count"): 4,
    ("DimCustomer", "Row count"): 3,
    ("DimTrade", "Row count"): 4,
    ("FactCashBalances", "Row count"): 2,
    ("FactHoldings", "Row count"): 2,
    ("FactMarketHistory", "Row count"): 3,
    ("FactWatches", "Row count"): 2,
    ("Prospect", "Row count"): 2,
    ("FactCashBalances", "Row count joined"): 2,
    ("FactHoldings", "Row count joined"): 2,
    ("FactMarketHistory", "Row count joined"): 3,
    ("FactWatches", "Row count joined"): 2,
    ("DimCustomer", "Inactive customers"): 1,
    ("FactWatches", "Inactive watches"): 1,
}


@pytest.fixture()
def conn(tmp_path: Path) -> WarehouseConnection:
    c = WarehouseConnection.duckdb(":memory:")
    build(c, tmp_path / "keys")
    return c


def recorded(conn: WarehouseConnection, batch: int) -> dict[tuple[str, str], int]:
    rows = conn.query(
        "SELECT messagesource, messagetext, messagedata FROM {dimessages} "
        "WHERE messagetype = 'Validation' AND batchid = ?",
        [batch],
    )
    return {(s, t): int(d) for s, t, d in rows}


def test_the_24_rows_have_the_warehouse_counts(conn: WarehouseConnection) -> None:
    when = datetime.datetime(2025, 1, 1, 8, 0, 0)
    rows = write_batch_validation(conn, 4, when)
    assert len(rows) == 24 == len(VALIDATION_PAIRS)
    assert {(r.source, r.text): r.count for r in rows} == FINAL
    assert recorded(conn, 4) == FINAL
    stamps = conn.query("SELECT DISTINCT messagedateandtime FROM {dimessages} WHERE batchid = 4")
    assert stamps == [(when,)]


def test_each_phase_recorded_the_warehouse_as_it_was(conn: WarehouseConnection) -> None:
    assert recorded(conn, 0) == {pair: 0 for pair in FINAL}
    assert recorded(conn, 1) == {**FINAL, **AFTER_BATCH_1}
    assert recorded(conn, 3) == FINAL


def test_a_dangling_key_makes_the_joined_count_smaller(conn: WarehouseConnection) -> None:
    conn.execute("UPDATE {factwatches} SET sk_customerid = 999 WHERE sk_customerid = 5")
    counts = {(r.source, r.text): r.count for r in write_batch_validation(conn, 5)}
    assert counts[("FactWatches", "Row count")] == 4
    assert counts[("FactWatches", "Row count joined")] == 3


def test_missing_tables_are_named(tmp_path: Path) -> None:
    conn = WarehouseConnection.duckdb(":memory:")
    conn.execute("CREATE TABLE dimbroker (sk_brokerid BIGINT)")
    with pytest.raises(WarehouseTablesMissing) as info:
        write_batch_validation(conn, 0)
    assert "dimaccount" in info.value.tables and "dimessages" in info.value.tables
    assert "dimbroker" not in info.value.tables
    with pytest.raises(ValueError, match="batch_id"):
        write_batch_validation(conn, -1)


def test_pcr_rows_give_the_completion_times(conn: WarehouseConnection) -> None:
    assert completion_times(conn) == {b: T0 + datetime.timedelta(seconds=10 * b) for b in range(4)}
    stamp = write_pcr(conn, 4, datetime.datetime(2025, 1, 1))
    row = conn.query(
        "SELECT messagesource, messagetext, messagetype, messagedata FROM {dimessages} "
        "WHERE batchid = 4"
    )
    assert row == [("Phase Complete Record", "Batch Complete", "PCR", None)]
    assert completion_times(conn)[4] == stamp


def test_visibility_queries(conn: WarehouseConnection) -> None:
    first = write_visibility(conn, 1, 3)
    second = write_visibility(conn, 2, 3)
    assert len(first) == 12 and len(second) == 8
    assert {(r.source, r.text): r.count for r in first} == {
        k: v for k, v in FINAL.items() if k[1] != "Inactive customers" and k[1] != "Inactive watches"
        and k[0] in {"DimAccount", "DimCustomer", "DimTrade", "FactCashBalances", "FactHoldings",
                     "FactMarketHistory", "FactWatches", "Prospect"}
    }  # fmt: skip
    kinds = conn.query(
        "SELECT messagetype, count(*) FROM {dimessages} WHERE messagetype LIKE 'Visibility%' "
        "GROUP BY 1 ORDER BY 1"
    )
    assert kinds == [("Visibility_1", 12 + 12 + 12), ("Visibility_2", 8 + 8 + 8)]
    with pytest.raises(ValueError):
        write_visibility(conn, 3, 3)  # type: ignore[arg-type]
