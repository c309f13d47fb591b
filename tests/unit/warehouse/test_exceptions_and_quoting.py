"""The warehouse layer's one set of errors and its dialect-independent SQL text."""

from __future__ import annotations

import pytest

from streamdi.errors import TerminalError, TransientError
from warehouse.base import quote_identifier, quote_literal
from warehouse.exceptions import (
    EmbeddedPostgresFailed,
    WarehouseError,
    WarehouseQueryFailed,
    WarehouseQueryOutOfMemory,
    WarehouseQueryTimeout,
    WarehouseQueryTooLarge,
    WarehouseUnavailable,
    first_line,
)
from warehouse.postgres import to_pyformat


def test_unavailable_is_transient_and_everything_else_terminal() -> None:
    gone = WarehouseUnavailable("postgres", "connection refused")
    assert isinstance(gone, WarehouseError) and isinstance(gone, TransientError)
    assert not isinstance(gone, TerminalError)
    assert (gone.target, gone.dialect, gone.detail) == (
        "postgres",
        "postgres",
        "connection refused",
    )
    assert "unavailable" in str(gone)
    terminal = [
        WarehouseQueryFailed("duckdb", "no such column"),
        WarehouseQueryTimeout("duckdb", 1.5),
        WarehouseQueryTooLarge("postgres", 1024),
        WarehouseQueryOutOfMemory("duckdb", "out of memory"),
        EmbeddedPostgresFailed("/tmp/pg", "initdb failed"),
    ]
    for error in terminal:
        assert isinstance(error, WarehouseError) and isinstance(error, TerminalError), error
        assert not isinstance(error, TransientError), error


def test_a_failed_query_names_its_warehouse_and_its_statement() -> None:
    failed = WarehouseQueryFailed("postgres", 'column "nope" does not exist', sql="SELECT nope")
    assert (failed.target, failed.dialect, failed.sql) == ("postgres", "postgres", "SELECT nope")
    assert str(failed) == 'postgres: column "nope" does not exist (in: SELECT nope)'
    assert str(WarehouseQueryFailed("duckdb", "bad")) == "duckdb: bad"
    assert WarehouseQueryTimeout("duckdb", 0.25).seconds == 0.25
    assert WarehouseQueryTooLarge("postgres", 2048).limit_bytes == 2048


def test_first_line_of_a_driver_message() -> None:
    assert first_line(RuntimeError("  first\nsecond ")) == "first"
    assert first_line(RuntimeError("")) == "RuntimeError"


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT ? WHERE a LIKE 'x%?' AND b = ?", "SELECT %s WHERE a LIKE 'x%%?' AND b = %s"),
        ('SELECT "col?" FROM t WHERE c = ?', 'SELECT "col?" FROM t WHERE c = %s'),
        ("SELECT 1", "SELECT 1"),
    ],
)
def test_placeholders_become_pyformat_outside_quotes(sql: str, expected: str) -> None:
    assert to_pyformat(sql) == expected


def test_quoting_doubles_the_quote_character() -> None:
    assert quote_identifier('we"ird') == '"we""ird"'
    assert quote_literal("it's") == "'it''s'"
