"""Answer keys into ``audit``, and the connection wrapper's dialect handling."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from streamdi.settings import TpcdiSettings
from tests.unit.tpcdi.audit.tiny_dw import tiny_spec, write_answer_keys
from tpcdi.audit.checks import run_audit
from tpcdi.audit.checks.base import AnswerKeys
from tpcdi.audit.checks.messages import CHECKS as MESSAGE_CHECKS
from tpcdi.audit.connection import WarehouseConnection
from tpcdi.audit.ddl import ensure_audit_tables
from tpcdi.audit.exceptions import AnswerKeysInvalid
from tpcdi.audit.keys import load_audit_files
from tpcdi.datasets import locate_digen
from tpcdi.exceptions import SourceNotFound
from warehouse.exceptions import WarehouseQueryFailed
from warehouse.postgres import to_pyformat


def keyed(tmp_path: Path) -> tuple[WarehouseConnection, Path]:
    conn = WarehouseConnection.duckdb(":memory:")
    ensure_audit_tables(conn)
    return conn, write_answer_keys(tmp_path / "staging", tiny_spec().keys)


def test_every_answer_key_line_is_loaded_once(tmp_path: Path) -> None:
    conn, root = keyed(tmp_path)
    lines = sum(len(p.read_text().splitlines()) - 1 for p in root.rglob("*_audit.csv"))
    assert load_audit_files(conn, root) == lines
    assert load_audit_files(conn, root) == lines  # replaced, not appended
    assert conn.scalar("SELECT count(*) FROM {audit}") == lines
    keys = AnswerKeys.load(conn)
    assert keys.value("DimTrade", "T_NEW", 3) == 2
    assert keys.upto("DimTrade", "T_NEW", 3) == 7
    assert keys.window(2) == (datetime.date(2017, 7, 8), datetime.date(2017, 7, 8))
    assert "Generator" in keys.datasets


def test_an_unreadable_key_file_loads_nothing(tmp_path: Path) -> None:
    conn, root = keyed(tmp_path)
    load_audit_files(conn, root)
    before = conn.scalar("SELECT count(*) FROM {audit}")
    bad = root / "Batch2" / "Broken_audit.csv"
    bad.write_text("DataSet, BatchID ,Date , Attribute , Value, DValue\r\nDimTrade,x,,T_NEW,1,\r\n")
    with pytest.raises(AnswerKeysInvalid, match=r"Broken_audit\.csv:2"):
        load_audit_files(conn, root)
    assert conn.scalar("SELECT count(*) FROM {audit}") == before
    with pytest.raises(SourceNotFound):
        load_audit_files(conn, tmp_path / "nowhere")


def test_real_digen_answer_keys_pass_the_audit_table_checks(tmp_path: Path) -> None:
    root = locate_digen(TpcdiSettings())
    if root is None:
        pytest.skip("no DIGen data set in ../shared/tpcdi")
    conn = WarehouseConnection.duckdb(":memory:")
    ensure_audit_tables(conn)
    assert load_audit_files(conn, root) > 1000
    keys = AnswerKeys.load(conn)
    assert keys.value("DimBroker", "HR_BROKERS", 1) == 4293
    assert keys.upto("DimTrade", "T_NEW", 3) == 391406
    assert keys.total("Financial", "FW_FIN") == 98576
    audit_checks = tuple(c for c in MESSAGE_CHECKS if c.name.startswith("Audit "))
    result = run_audit(conn, audit_checks)
    assert result.fail == 0 and result.ok == 3, result.checks


def test_placeholders_for_psycopg2() -> None:
    assert to_pyformat("SELECT ? WHERE a LIKE 'x%?' AND b = ?") == (
        "SELECT %s WHERE a LIKE 'x%%?' AND b = %s"
    )


def test_tables_are_qualified_with_the_schema() -> None:
    plain = WarehouseConnection.duckdb(":memory:")
    assert plain.sql("SELECT * FROM {dimtrade} t") == "SELECT * FROM dimtrade t"
    dw = WarehouseConnection.duckdb(":memory:", schema="dw")
    assert dw.sql("SELECT * FROM {dimtrade}") == 'SELECT * FROM "memory"."dw".dimtrade'
    pg = WarehouseConnection("unused", "postgres", "wh.dw", owned=False)
    assert pg.sql("{audit}") == '"wh"."dw".audit'
    assert pg.full_match("phone1", "[0-9]+") == "(phone1 ~ ('^(?:' || '[0-9]+' || ')$'))"


def test_errors_name_the_statement_and_the_catalogue_is_read() -> None:
    conn = WarehouseConnection.duckdb(":memory:", schema="dw")
    ensure_audit_tables(conn)
    assert {"audit", "dimessages"} <= conn.existing_tables()
    assert conn.missing_tables(["Audit", "DimTrade"]) == ["DimTrade"]
    with pytest.raises(WarehouseQueryFailed) as info:
        conn.query("SELECT nope FROM {audit}")
    assert "SELECT nope FROM" in info.value.sql
    assert conn.scalar(f"SELECT {conn.full_match(repr('555-0101'), '[0-9]{3}-[0-9]{4}')}") is True
    assert conn.query_arrow("SELECT 1 AS one").column("one").to_pylist() == [1]
