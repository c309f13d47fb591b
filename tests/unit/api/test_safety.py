"""The query checker: exactly one read-only SELECT over known tables; everything else is refused
with a stable code before anything runs it."""

from __future__ import annotations

import pytest

from api.exceptions import QueryRejected
from api.models import StructuredQuery
from api.safety import check_query

TABLES = {
    "accounts": ["aid", "sk_account", "balance", "opened"],
    "Orders": ["o_id", "Amount"],
    "activity": ["batch_id", "kind", "amount", "_ts"],
}


@pytest.mark.parametrize(
    ("sql", "code"),
    [
        ("", "sql_syntax"),
        ("SELECT FROM WHERE", "sql_syntax"),
        ("SELECT 1; SELECT 2", "multiple_statements"),
        ("SELECT * FROM accounts; DROP TABLE accounts", "multiple_statements"),
        ("DROP TABLE accounts", "not_a_query"),
        ("CREATE TABLE t AS SELECT 1", "not_a_query"),
        ("INSERT INTO accounts VALUES (1, 2, 3, NULL)", "not_a_query"),
        ("UPDATE accounts SET balance = 0", "not_a_query"),
        ("DELETE FROM accounts", "not_a_query"),
        ("COPY accounts TO '/tmp/out.csv'", "not_a_query"),
        ("COPY (SELECT 1) TO PROGRAM 'id'", "not_a_query"),
        ("ATTACH '/tmp/other.duckdb' AS o", "not_a_query"),
        ("INSTALL httpfs", "not_a_query"),
        ("LOAD httpfs", "not_a_query"),
        ("SET enable_external_access = true", "not_a_query"),
        ("PRAGMA database_list", "not_a_query"),
        ("CALL pragma_version()", "not_a_query"),
        ("EXPLAIN SELECT * FROM accounts", "not_a_query"),
        ("SELECT * FROM read_csv('/etc/passwd')", "forbidden_function"),
        ("SELECT * FROM read_csv_auto('/etc/passwd')", "forbidden_function"),
        ("SELECT * FROM read_parquet('s3://bucket/x.parquet')", "forbidden_function"),
        ("SELECT * FROM read_json('http://example.com/x.json')", "forbidden_function"),
        ("SELECT * FROM read_text('/etc/passwd')", "forbidden_function"),
        ("SELECT * FROM glob('/etc/*')", "forbidden_function"),
        ("SELECT * FROM parquet_scan('x.parquet')", "forbidden_function"),
        ("SELECT * FROM sqlite_scan('x.db', 't')", "forbidden_function"),
        ("SELECT * FROM postgres_scan('dbname=x', 'public', 't')", "forbidden_function"),
        ("SELECT query('SELECT 1')", "forbidden_function"),
        ("SELECT * FROM query_table('accounts')", "forbidden_function"),
        ("SELECT getenv('HOME')", "forbidden_function"),
        ("SELECT current_setting('enable_external_access')", "forbidden_function"),
        ("SELECT * FROM duckdb_settings()", "forbidden_function"),
        ("SELECT pg_read_file('/etc/passwd')", "forbidden_function"),
        ("SELECT pg_ls_dir('.')", "forbidden_function"),
        ("SELECT lo_import('/etc/passwd')", "forbidden_function"),
        ("SELECT * FROM dblink('host=x', 'SELECT 1') AS t(a int)", "forbidden_function"),
        ("SELECT query_to_xml('SELECT 1', true, true, '')", "forbidden_function"),
        ("SELECT set_config('role', 'postgres', false)", "forbidden_function"),
        ("SELECT nextval('s')", "forbidden_function"),
        (
            "SELECT count(*) FROM accounts WHERE aid IN (SELECT length(read_text('x')))",
            "forbidden_function",
        ),
        ("SELECT * FROM 'data.csv'", "unknown_table"),
        ('SELECT * FROM "/etc/passwd"', "unknown_table"),
        ("SELECT * FROM nope", "unknown_table"),
        ("SELECT * FROM main.accounts", "unknown_table"),
        ("SELECT * FROM information_schema.tables", "unknown_table"),
        ("SELECT * FROM pg_catalog.pg_authid", "unknown_table"),
        ("SELECT * FROM streamdi.batches", "unknown_table"),
        ("SELECT * INTO copy_of FROM accounts", "forbidden_clause"),
        ("SELECT * FROM accounts FOR UPDATE", "forbidden_clause"),
        ("WITH accounts AS (SELECT 1 AS aid) SELECT * FROM accounts", "forbidden_clause"),
    ],
)
def test_refused_with_its_code(sql: str, code: str) -> None:
    with pytest.raises(QueryRejected) as refused:
        check_query(sql, TABLES)
    assert refused.value.code == code
    assert refused.value.status == 400
    assert refused.value.reason


def test_postgres_dialect_refusals() -> None:
    with pytest.raises(QueryRejected) as refused:
        check_query("SELECT pg_read_binary_file('/etc/passwd')", TABLES, "postgres")
    assert refused.value.code == "forbidden_function"
    with pytest.raises(QueryRejected) as refused:
        check_query("COPY accounts TO STDOUT", TABLES, "postgres")
    assert refused.value.code == "not_a_query"


def test_accepted_queries_name_their_tables_and_columns() -> None:
    checked = check_query("SELECT balance FROM accounts a WHERE a.balance > 5", TABLES)
    assert checked.tables == ("accounts",)
    assert checked.columns["accounts"] == frozenset({"balance"})
    assert checked.filter_sql("postgres") == '"balance" > 5'

    star = check_query("SELECT * FROM accounts", TABLES)
    assert star.columns["accounts"] is None and star.filter is None

    counted = check_query("SELECT count(*) FROM activity", TABLES)
    assert counted.columns["activity"] == frozenset()

    joined = check_query(
        "WITH big AS (SELECT o_id FROM orders WHERE amount > 10) "
        "SELECT a.aid, b.o_id FROM accounts a JOIN big b ON a.aid = b.o_id",
        TABLES,
    )
    assert set(joined.tables) == {"accounts", "Orders"}  # names resolved case-insensitively
    assert joined.columns["Orders"] == frozenset({"o_id", "Amount"})
    assert joined.filter is None  # several tables: nothing pushed down


def test_filters_with_functions_or_subqueries_stay_in_the_union() -> None:
    assert check_query("SELECT * FROM accounts WHERE random() < 0.5", TABLES).filter is None
    assert check_query("SELECT * FROM accounts WHERE aid = (SELECT 1)", TABLES).filter is None
    pushed = check_query(
        "SELECT * FROM accounts WHERE aid IN (1, 2) AND opened IS NOT NULL AND balance "
        "BETWEEN 1 AND 2",
        TABLES,
    )
    assert pushed.filter is not None


def test_render_applies_the_row_limit_and_translates() -> None:
    checked = check_query("SELECT aid FROM accounts ORDER BY aid LIMIT 500", TABLES)
    assert checked.render("duckdb", limit=100).endswith("LIMIT 100")
    assert checked.render("duckdb", limit=1000).endswith("LIMIT 500")
    union = check_query("SELECT aid FROM accounts UNION ALL SELECT aid FROM accounts", TABLES)
    assert union.render("duckdb", limit=10).startswith("SELECT * FROM (")
    cast = check_query("SELECT aid::VARCHAR FROM accounts", TABLES)
    assert "CAST" in cast.render("postgres", limit=10)
    replaced = check_query("SELECT x.aid FROM accounts x", TABLES).render(
        "postgres", limit=5, relations={"accounts": 'SELECT "aid" FROM "s"."accounts"'}
    )
    assert replaced == 'SELECT "x"."aid" FROM (SELECT "aid" FROM "s"."accounts") AS "x" LIMIT 5'


def test_structured_queries_quote_names_and_values() -> None:
    query = StructuredQuery.model_validate(
        {
            "table": 'accounts"; DROP TABLE accounts; --',
            "where": [{"column": "aid", "op": "=", "value": "x'); DROP TABLE t; --"}],
        }
    )
    with pytest.raises(QueryRejected) as refused:
        check_query(query.to_sql(), TABLES)
    assert refused.value.code == "unknown_table"  # the whole name is one (unknown) table

    ok = StructuredQuery.model_validate(
        {
            "table": "accounts",
            "columns": ["aid", "balance"],
            "where": [
                {"column": "balance", "op": ">=", "value": 1.5},
                {"column": "aid", "op": "in", "value": [1, 2, 3]},
                {"column": "opened", "op": "not_null"},
            ],
            "order_by": [{"column": "aid", "descending": True}],
            "limit": 10,
        }
    )
    checked = check_query(ok.to_sql(), TABLES)
    assert checked.tables == ("accounts",)
    assert "'x''" not in ok.to_sql()
    assert checked.filter is not None
