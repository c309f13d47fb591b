"""The incremental dataflow's reference data read from a warehouse: its content digest (what the
dataflow's logic digest takes for it) is equal for equal contents whatever the order rows were
stored in, and differs when a value does; the lookups are the ones the rows say."""

from __future__ import annotations

import dataclasses
import datetime

import duckdb

from etl_dataflows.evolution.shape import describe_flow
from tpcdi.incremental import build_flow
from tpcdi.incremental.reference import Reference

FINANCIAL = [(1, 2016, 1, 0.5), (1, 2016, 2, 0.25), (1, 2016, 3, 1.0), (2, 2016, 4, 2.0)]


def warehouse(reverse: bool = False, eps_change: float = 0.0) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("CREATE TABLE statustype (st_id VARCHAR, st_name VARCHAR)")
    con.execute("CREATE TABLE tradetype (tt_id VARCHAR, tt_name VARCHAR)")
    con.execute("CREATE TABLE taxrate (tx_id VARCHAR, tx_name VARCHAR, tx_rate DOUBLE)")
    con.execute("CREATE TABLE dimsecurity (symbol VARCHAR, sk_companyid BIGINT, iscurrent BOOLEAN)")
    con.execute("CREATE TABLE dimcompany (sk_companyid BIGINT, companyid BIGINT)")
    con.execute(
        "CREATE TABLE financial (sk_companyid BIGINT, fi_year INTEGER, fi_qtr INTEGER, "
        "fi_basic_eps DOUBLE)"
    )
    rows = {
        "statustype": [("ACTV", "Active"), ("INAC", "Inactive")],
        "tradetype": [("TMB", "Market Buy"), ("TMS", "Market Sell")],
        "taxrate": [("US1", "US tax", 0.1), ("CN1", "CN tax", 0.2)],
        "dimsecurity": [("AAA", 1, True), ("BBB", 2, True), ("AAA", 2, False)],
        "dimcompany": [(1, 10), (2, 20)],
        "financial": [(k, y, q, e + (eps_change if k == 2 else 0.0)) for k, y, q, e in FINANCIAL],
    }
    for table, values in rows.items():
        for row in reversed(values) if reverse else values:
            marks = ", ".join("?" for _ in row)
            con.execute(f"INSERT INTO {table} VALUES ({marks})", list(row))
    return con


def reference(con: duckdb.DuckDBPyConnection) -> Reference:
    return Reference.from_warehouse(lambda sql: con.sql(sql).to_arrow_table())


def test_equal_contents_digest_equally_whatever_the_order() -> None:
    a, b = reference(warehouse()), reference(warehouse(reverse=True))
    assert a.content_digest is not None
    assert a.content_digest == b.content_digest
    assert (
        describe_flow(build_flow(a).build()).digest()
        == describe_flow(build_flow(b).build()).digest()
    )


def test_a_changed_value_changes_the_digest() -> None:
    a, b = reference(warehouse()), reference(warehouse(eps_change=0.5))
    assert a.content_digest != b.content_digest
    assert (
        describe_flow(build_flow(a).build()).digest()
        != describe_flow(build_flow(b).build()).digest()
    )


def test_lookups() -> None:
    ref = reference(warehouse(reverse=True))
    assert ref.status_names == {"ACTV": "Active", "INAC": "Inactive"}
    assert ref.tax_rates["CN1"] == ("CN tax", 0.2)
    # AAA's current version belongs to company 1: 0.5 + 0.25 + 1.0 before 2016's fourth quarter
    assert ref.eps4("AAA", datetime.date(2016, 11, 1)) == 1.75
    assert ref.eps4("BBB", datetime.date(2017, 1, 2)) == 2.0
    assert ref.eps4("BBB", datetime.date(2016, 1, 2)) is None


def test_the_logic_digest_takes_the_stated_digest() -> None:
    """(Not the dictionaries: at SF 100 going through them took ~15 s of every start.)"""
    a = reference(warehouse())
    emptied = dataclasses.replace(a, earnings={})
    assert (
        describe_flow(build_flow(a).build()).digest()
        == describe_flow(build_flow(emptied).build()).digest()
    )
