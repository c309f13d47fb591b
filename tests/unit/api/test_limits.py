"""A query's size and shape are bounded before, while and after parsing: deep or huge queries answer
``query_too_complex`` (never a RecursionError), and what passes renders for both targets even
from a deep stack."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from api.exceptions import QueryRejected
from api.limits import QueryLimits
from api.safety import check_query

TABLES = {"kv": ["key", "value", "seq"]}
LIMITS = QueryLimits()


def code_of(sql: str, dialect: str = "duckdb", limits: QueryLimits = LIMITS) -> str:
    with pytest.raises(QueryRejected) as caught:
        check_query(sql, TABLES, dialect, limits)  # type: ignore[arg-type]
    assert caught.value.status == 400
    return caught.value.code


BOMBS: dict[str, str] = {
    "100 nested subqueries": "SELECT " + "(SELECT " * 100 + "1" + ")" * 100,
    "5,000 parentheses": "SELECT " + "(" * 5000 + "1" + ")" * 5000,
    "NOT x2000": "SELECT * FROM kv WHERE " + "NOT " * 2000 + "TRUE",
    "minus x3000": "SELECT " + "- " * 3000 + "1",
    "CASE x300": "SELECT " + "CASE WHEN key > 0 THEN " * 300 + "1" + " END" * 300 + " FROM kv",
    "abs( x500": "SELECT " + "abs(" * 500 + "key" + ")" * 500 + " FROM kv",
    "casts x3000": "SELECT key" + "::BIGINT" * 3000 + " FROM kv",
    "IN subqueries x200": "SELECT * FROM kv WHERE "
    + "key IN (SELECT key FROM kv WHERE " * 200
    + "TRUE"
    + ")" * 200,
    "FROM subqueries x200": "SELECT * FROM " + "(SELECT * FROM " * 200 + "kv" + ") a" * 200,
}


@pytest.mark.parametrize("dialect", ["duckdb", "postgres"])
@pytest.mark.parametrize("name", list(BOMBS))
def test_deep_queries_are_too_complex_never_a_recursion_error(name: str, dialect: str) -> None:
    assert code_of(BOMBS[name], dialect) == "query_too_complex"


def test_too_complex_from_a_deep_stack_too() -> None:
    """The request threads of the server start deeper than a test: a bomb still gets its code."""

    def deep(n: int, then: Callable[[], None]) -> None:
        if n:
            deep(n - 1, then)
        else:
            then()

    errors: list[BaseException] = []

    def run() -> None:
        for sql in BOMBS.values():
            try:
                check_query(sql, TABLES)
            except QueryRejected as exc:
                if exc.code != "query_too_complex":
                    errors.append(exc)
            except BaseException as exc:
                errors.append(exc)

    thread = threading.Thread(target=deep, args=(150, run))
    thread.start()
    thread.join()
    assert not errors, errors


def test_size_limits() -> None:
    assert code_of("SELECT 1 -- " + "x" * 70_000) == "query_too_complex"
    assert code_of("SELECT " + ", ".join(["key"] * 6000) + " FROM kv") == "query_too_complex"
    union = " UNION ALL ".join(["SELECT key FROM kv"] * 2000)
    assert code_of(union) == "query_too_complex"
    assert code_of(" UNION ALL ".join(["SELECT key FROM kv"] * 33)) == "query_too_complex"
    joins = "SELECT count(*) FROM " + ", ".join(f"kv t{i}" for i in range(33))
    assert code_of(joins) == "query_too_complex"
    selects = "SELECT " + " + ".join(["(SELECT 1)"] * 40)
    assert code_of(selects) == "query_too_complex"
    tight = QueryLimits(max_chars=100, max_nodes=50, max_depth=3, max_tables=2, max_selects=2)
    assert code_of("SELECT " + "1 + " * 60 + "1", limits=tight) == "query_too_complex"
    assert code_of("SELECT ((((1))))", limits=tight) == "query_too_complex"
    assert code_of("SELECT * FROM kv a, kv b, kv c", limits=tight) == "query_too_complex"


@pytest.mark.parametrize("dialect", ["duckdb", "postgres"])
def test_what_passes_renders_even_at_the_limits(dialect: str) -> None:
    nested = "SELECT " + "(" * 20 + "key" + ")" * 20 + " FROM kv"
    subqueries = "SELECT * FROM " + "(SELECT * FROM " * 10 + "kv" + ") a" * 10
    chain = "SELECT * FROM kv WHERE " + " OR ".join(f"key = {i}" for i in range(1500))
    arithmetic = "SELECT " + " + ".join(f"key * {i}" for i in range(1500)) + " FROM kv"
    unions = " UNION ALL ".join(["SELECT key FROM kv"] * 32)
    relation = 'SELECT "key", "value", "seq" FROM "w"."kv" WHERE batch_id <= 5'
    for sql in (nested, subqueries, chain, arithmetic, unions):
        checked = check_query(sql, TABLES, dialect)  # type: ignore[arg-type]
        for target in ("duckdb", "postgres"):
            text = checked.render(target, limit=100, relations={"kv": relation})
            assert "LIMIT" in text


def test_limits_come_from_settings() -> None:
    from api.service import query_limits
    from streamdi.settings import load_settings

    settings = load_settings(api={"max_query_tables": 3, "max_query_depth": 5})
    limits = query_limits(settings.api)
    assert (limits.max_tables, limits.max_depth) == (3, 5)
    with pytest.raises(Exception, match="API__MAX_QUERY_DEPTH"):
        load_settings(api={"max_query_depth": 1000})
