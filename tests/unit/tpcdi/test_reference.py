"""The incremental dataflow's reference data read from a warehouse: its content digest (what the
dataflow's logic digest takes for it) is equal for equal contents whatever the order rows were
stored in, and differs when a value does; the lookups are the ones the rows say."""

from __future__ import annotations

import dataclasses
import datetime
import random
import struct
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from etl_dataflows.evolution.shape import describe_flow
from tpcdi.incremental import build_flow
from tpcdi.incremental.reference import (
    EARNINGS_SCHEMA,
    LISTINGS_SCHEMA,
    Reference,
    quarter_index,
)

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
    symbols = pa.array(["AAA", "BBB", "BBB", "CCC", None, "AAA"])
    days = pa.array(
        [
            datetime.date(2016, 11, 1),
            datetime.date(2017, 1, 2),
            datetime.date(2016, 1, 2),
            datetime.date(2017, 1, 2),
            datetime.date(2017, 1, 2),
            None,
        ]
    )
    assert ref.eps4(symbols, days).to_pylist() == [1.75, 2.0, None, None, None, None]


def row_by_row(earnings: dict[str, dict[int, float]], symbol: str | None, day: Any) -> Any:
    """Clause 4.6.10.1 one row at a time: the sum of the four quarters before the day's."""
    if symbol is None or day is None or not earnings.get(symbol):
        return None
    q = quarter_index(day.year, (day.month - 1) // 3 + 1)
    values = [earnings[symbol][i] for i in range(q - 4, q) if i in earnings[symbol]]
    return float(sum(values)) if values else None


@pytest.mark.parametrize("seed", range(5))
def test_the_column_lookup_equals_the_row_by_row_sums_bit_for_bit(seed: int) -> None:
    rng = random.Random(seed)
    by_company: dict[int, dict[int, float]] = {}
    for company in rng.sample(range(10**9, 10**10), rng.randint(1, 30)):
        quarters = rng.sample(
            range(quarter_index(2010, 1), quarter_index(2018, 1)), rng.randint(0, 12)
        )
        by_company[company] = {
            q: rng.choice([rng.uniform(-3, 3), 0.1, -0.0, 1e-17]) for q in quarters
        }
    # several symbols per company, and symbols of companies that reported nothing
    owners = [*by_company, 7, 8]
    listed = {f"S{n}": rng.choice(owners) for n in range(60)}
    earnings = pa.table(
        {
            "companyid": [c for c, qs in by_company.items() for _ in qs],
            "quarter": [q for qs in by_company.values() for q in qs],
            "eps": [e for qs in by_company.values() for e in qs.values()],
        },
        schema=EARNINGS_SCHEMA,
    )
    rows = list(listed.items())
    rng.shuffle(rows)  # neither table needs an order
    order = list(range(earnings.num_rows))
    rng.shuffle(order)
    ref = Reference(
        earnings=earnings.take(pa.array(order, pa.int64())),
        listings=pa.table(
            {"symbol": [s for s, _ in rows], "companyid": [c for _, c in rows]},
            schema=LISTINGS_SCHEMA,
        ),
    )
    per_symbol = {s: by_company.get(c, {}) for s, c in listed.items()}
    names = [*listed, "NONE", None]
    symbols = [rng.choice(names) for _ in range(2_000)]
    start = datetime.date(2009, 1, 1)
    days = [
        None if rng.random() < 0.02 else start + datetime.timedelta(rng.randrange(3_600))
        for _ in range(2_000)
    ]
    got = ref.eps4(pa.array(symbols, pa.string()), pa.array(days, pa.date32())).to_pylist()
    expected = [row_by_row(per_symbol, s, d) for s, d in zip(symbols, days, strict=True)]
    assert [None if v is None else struct.pack("<d", v) for v in got] == [
        None if v is None else struct.pack("<d", v) for v in expected
    ]
    assert sum(v is not None for v in expected) > 100


def test_a_reference_built_by_hand_digests_its_contents() -> None:
    def earning(eps: float) -> pa.Table:
        return pa.table({"companyid": [1], "quarter": [8000], "eps": [eps]}, schema=EARNINGS_SCHEMA)

    assert Reference(earnings=earning(1.0)).content_digest == (
        Reference(earnings=earning(1.0)).content_digest
    )
    assert Reference(earnings=earning(1.0)).content_digest != (
        Reference(earnings=earning(2.0)).content_digest
    )
    assert Reference().content_digest != Reference(status_names={"A": "x"}).content_digest


def test_the_logic_digest_takes_the_stated_digest() -> None:
    """(Not the dictionaries: at SF 100 going through them took ~15 s of every start.)"""
    a = reference(warehouse())
    emptied = dataclasses.replace(a, earnings=EARNINGS_SCHEMA.empty_table())
    assert (
        describe_flow(build_flow(a).build()).digest()
        == describe_flow(build_flow(emptied).build()).digest()
    )
