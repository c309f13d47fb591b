"""Clause 4's column rules: the Arrow versions (incremental steps) on hand-computed cases, and the
same cases through the SQL versions (historical load, DuckDB) — both must agree."""

from __future__ import annotations

import datetime

import duckdb
import pyarrow as pa
import pytest

from tpcdi.historical import sql_dims
from tpcdi.incremental import rules

PHONES = [
    # country, area, local, extension -> phone
    ("1", "555", "123-4567", None, "+1 (555) 123-4567"),
    ("1", "555", "123-4567", "89", "+1 (555) 123-456789"),
    (None, "555", "123-4567", None, "(555) 123-4567"),
    ("1", None, "123-4567", None, "123-4567"),
    (None, None, "123-4567", "12", "123-456712"),
    ("1", "555", None, "12", None),
    (None, None, None, None, None),
    ("", "", "", "", None),  # DIGen's empty elements read as empty strings: treated as null
]


def test_phone_rule() -> None:
    parts = list(zip(*[p[:4] for p in PHONES], strict=True))
    got = rules.phone(*[pa.array(list(column), pa.string()) for column in parts]).to_pylist()
    assert got == [p[4] for p in PHONES]


def test_phone_rule_in_sql_agrees() -> None:
    rows = [p for p in PHONES if "" not in p[:4]]  # the readers turn empty fields into nulls
    phones = pa.table(
        {
            "C_CTRY_1": [p[0] for p in rows],
            "C_AREA_1": [p[1] for p in rows],
            "C_LOCAL_1": [p[2] for p in rows],
            "C_EXT_1": [p[3] for p in rows],
        },
        schema=pa.schema(
            [(n, pa.string()) for n in ("C_CTRY_1", "C_AREA_1", "C_LOCAL_1", "C_EXT_1")]
        ),
    )
    con = duckdb.connect()
    con.register("phones", phones)
    got = con.sql(f"SELECT {sql_dims.phone(1)} AS p FROM phones").fetchall()
    assert [r[0] for r in got] == [p[4] for p in rows]


def test_gender_rule() -> None:
    got = rules.gender(pa.array(["m", "F", "x", None, "U"])).to_pylist()
    assert got == ["M", "F", "U", "U", "U"]


NAMEPLATE_CASES = [
    # networth, income, children, cards, age, credit, cars -> nameplate
    (2_000_000, 10_000, 0, 0, 30, 700, 0, "HighValue+MoneyAlert"),
    (500_000, 250_000, 4, 0, 50, 700, 4, "HighValue+Expenses+Boomer+Spender"),
    (2_000_000, 100_000, 0, 8, 20, 700, 1, "HighValue+Expenses+Spender+Inherited"),
    (200_000, 100_000, 0, 0, 30, 700, 0, None),
    (None, None, None, None, None, None, None, None),
    (50_000, None, None, None, None, None, None, "MoneyAlert"),
]


@pytest.fixture
def nameplates() -> pa.Table:
    names = ["NetWorth", "Income", "NumberChildren", "NumberCreditCards", "Age", "CreditRating",
             "NumberCars"]  # fmt: skip
    return pa.table(
        {n: pa.array([c[i] for c in NAMEPLATE_CASES], pa.int64()) for i, n in enumerate(names)}
    )


def test_nameplate_rule(nameplates: pa.Table) -> None:
    t = nameplates
    got = rules.nameplate(
        networth=t["NetWorth"],
        income=t["Income"],
        children=t["NumberChildren"],
        cards=t["NumberCreditCards"],
        age=t["Age"],
        credit=t["CreditRating"],
        cars=t["NumberCars"],
    ).to_pylist()
    assert got == [c[7] for c in NAMEPLATE_CASES]


def test_nameplate_rule_in_sql_agrees(nameplates: pa.Table) -> None:
    got = duckdb.sql(f"SELECT {sql_dims.nameplate()} AS n FROM nameplates").fetchall()
    assert [r[0] for r in got] == [c[7] for c in NAMEPLATE_CASES]


def test_matchkey_rule_in_both() -> None:
    t = pa.table(
        {
            "f": ["Ann", "Bob", None],
            "l": ["Lee", "Ray", "X"],
            "a1": ["1 Main St", "2 Elm", "3 Oak"],
            "a2": [None, "Apt 4", None],
            "p": ["12345", "54321", "00000"],
        }
    )
    arrow = rules.matchkey(t["f"], t["l"], t["a1"], t["a2"], t["p"]).to_pylist()
    sql = duckdb.sql(
        f"SELECT {sql_dims.matchkey('f', 'l', 'a1', 'a2', 'p')} AS k FROM t"
    ).fetchall()
    assert arrow == ["ANNLEE1 MAIN ST12345", "BOBRAY2 ELMAPT 454321", None]
    assert [r[0] for r in sql] == arrow


def test_surrogate_date_and_time_ids() -> None:
    stamps = pa.array(
        [datetime.datetime(2017, 7, 8, 9, 5, 7), datetime.datetime(1999, 12, 31, 23, 59, 59)]
    )
    assert rules.sk_dateid(stamps).to_pylist() == [20170708, 19991231]
    assert rules.sk_timeid(stamps).to_pylist() == [90507, 235959]
    days = pa.array([datetime.date(1950, 1, 1)], pa.date32())
    assert rules.sk_dateid(days).to_pylist() == [19500101]


def test_lookup_and_known() -> None:
    codes = pa.array(["ACTV", "INAC", "XXXX", None])
    got = rules.lookup(codes, {"ACTV": "Active", "INAC": "Inactive"}, pa.string()).to_pylist()
    assert got == ["Active", "Inactive", None, None]
    assert rules.known(codes, ["ACTV"]).to_pylist() == [True, False, False, False]
