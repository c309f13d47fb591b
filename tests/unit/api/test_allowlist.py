"""The allowlist: what the existing tests, benchmarks and the TPC-DI audit ask still passes; functions
that run SQL text, reach files, the network, settings or the catalog, or make values far larger
than their inputs are refused in both dialects; bounded functions pass within their bound only."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
import sqlglot
from sqlglot import exp

from api.allowlist import CONSTRUCTS, FUNCTIONS, MAX_PAD_WIDTH, NAMED_FUNCTIONS, Dialect
from api.exceptions import QueryRejected
from api.safety import check_query

TABLES = {
    "kv": ["key", "value", "seq", "name"],
    "accounts": ["aid", "balance", "opened", "note"],
}
DIALECTS: tuple[Dialect, ...] = ("duckdb", "postgres")


def refused(sql: str, dialect: Dialect = "duckdb") -> str:
    with pytest.raises(QueryRejected) as caught:
        check_query(sql, TABLES, dialect)
    assert caught.value.status == 400
    return caught.value.code


#: Queries of the existing tests, benchmarks and README, and everyday analytical SQL.
EVERYDAY = [
    "SELECT * FROM kv",
    "SELECT key, value, seq FROM kv ORDER BY key",
    "SELECT max(seq) FROM kv",
    "SELECT count(*), sum(balance) FROM accounts",
    "SELECT * FROM accounts WHERE aid = 17",
    "SELECT key, value FROM kv WHERE key IN (1, 2, 3) AND value BETWEEN 1 AND 100",
    "SELECT k.key, a.balance FROM kv k JOIN accounts a ON a.aid = k.key WHERE a.note LIKE 'x%'",
    "SELECT key, row_number() OVER (PARTITION BY value ORDER BY seq DESC) AS rn FROM kv",
    "WITH big AS (SELECT aid FROM accounts WHERE balance > 10) SELECT count(*) FROM big",
    "SELECT key FROM kv UNION ALL SELECT aid FROM accounts EXCEPT SELECT 1",
    "SELECT CASE WHEN value > 10 THEN 'big' ELSE 'small' END AS size, count(*) FROM kv GROUP BY 1",
    "SELECT coalesce(note, '') || '-' || lower(trim(note)) FROM accounts",
    "SELECT date_trunc('day', opened), avg(balance), stddev(balance) FROM accounts GROUP BY 1",
    "SELECT extract(year FROM opened), round(sum(balance), 2) FROM accounts GROUP BY 1 HAVING "
    "count(*) > 1",
    "SELECT CAST(key AS VARCHAR), key::BIGINT, CAST(value AS DECIMAL(12, 2)) FROM kv",
    "SELECT * FROM kv WHERE EXISTS (SELECT 1 FROM accounts WHERE aid = kv.key)",
    "SELECT replace(note, ',', ''), lpad(CAST(aid AS VARCHAR), 8, '0') FROM accounts",
    "SELECT regexp_replace(note, '[0-9]+', '', 'g'), substring(note, 1, 3) FROM accounts",
    "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY balance) FROM accounts",
    "SELECT count(*) FILTER (WHERE balance > 0) FROM accounts",
    "SELECT DISTINCT value FROM kv ORDER BY value NULLS LAST LIMIT 10 OFFSET 5",
    "SELECT opened + INTERVAL '1 day', greatest(balance, 0), abs(balance) FROM accounts",
    "SELECT * FROM kv WHERE name ~ '^a' OR name ILIKE 'b%'",
    "SELECT lag(value) OVER (ORDER BY seq), sum(value) OVER (ORDER BY seq ROWS BETWEEN 2 "
    "PRECEDING AND CURRENT ROW) FROM kv",
]


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("sql", EVERYDAY)
def test_everyday_queries_pass_and_render_for_both_targets(sql: str, dialect: Dialect) -> None:
    checked = check_query(sql, TABLES, dialect)
    for target in DIALECTS:
        assert checked.render(target, limit=10).startswith(("SELECT", "WITH"))


def test_duckdb_idioms_pass() -> None:
    for sql in [
        "SELECT * EXCLUDE (name) FROM kv",
        "SELECT key, value FROM kv QUALIFY row_number() OVER (PARTITION BY value ORDER BY key) = 1",
        "SELECT median(value), arg_max(key, value), count_if(value > 1) FROM kv",
        "SELECT epoch(opened), strftime(opened, '%Y'), year(opened) FROM accounts",
        "SELECT regexp_full_match(name, 'a.*'), levenshtein(name, 'x') FROM kv",
    ]:
        check_query(sql, TABLES, "duckdb")


#: SQL that runs SQL given as text, or reaches files, the network, settings, the catalog, other
#: sessions or sequences: refused in the dialect where it exists, and in the other one too.
DANGEROUS = [
    "SELECT ts_stat('SELECT set_config(''role'', session_user, true)')",
    "SELECT ts_rewrite('a'::tsquery, 'SELECT 1')",
    "SELECT query_to_xml('SELECT pg_read_file(''/etc/passwd'')', true, true, '')",
    "SELECT query_to_xml_and_xmlschema('SELECT 1', true, true, '')",
    "SELECT cursor_to_xml('c', 1, true, true, '')",
    "SELECT table_to_xml('pg_authid', true, true, '')",
    "SELECT database_to_xml(true, true, '')",
    "SELECT xpath('/a', '<a/>')",
    "SELECT set_config('role', session_user, true)",
    "SELECT current_setting('is_superuser')",
    "SELECT pg_read_file('/etc/passwd')",
    "SELECT pg_read_binary_file('/etc/passwd')",
    "SELECT * FROM pg_ls_dir('/') AS d",
    "SELECT pg_stat_file('/etc/passwd')",
    "SELECT lo_import('/etc/passwd')",
    "SELECT lo_export(1, '/tmp/x')",
    "SELECT * FROM dblink('dbname=postgres', 'SELECT 1') AS t(a int)",
    "SELECT pg_terminate_backend(1)",
    "SELECT pg_reload_conf()",
    "SELECT pg_sleep(100)",
    "SELECT nextval('s')",
    "SELECT txid_current()",
    "SELECT pg_advisory_lock(1)",
    "SELECT version()",
    "SELECT current_user",
    "SELECT session_user",
    "SELECT current_database()",
    "SELECT inet_server_addr()",
    "SELECT has_table_privilege('pg_authid', 'select')",
    "SELECT to_regclass('pg_authid')",
    "SELECT 'pg_authid'::regclass",
    "SELECT json_populate_record(NULL::record, '{}')",
    "SELECT query('SELECT 1')",
    "SELECT * FROM query_table('kv')",
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_csv_auto('http://example.com/x.csv')",
    "SELECT * FROM read_parquet('s3://b/x.parquet')",
    "SELECT * FROM read_json('x.json')",
    "SELECT * FROM read_text('/etc/passwd')",
    "SELECT * FROM read_blob('/etc/passwd')",
    "SELECT * FROM glob('/*')",
    "SELECT * FROM sniff_csv('/etc/passwd')",
    "SELECT * FROM sqlite_scan('x.db', 't')",
    "SELECT * FROM postgres_scan('dbname=x', 'public', 't')",
    "SELECT getenv('HOME')",
    "SELECT * FROM duckdb_settings()",
    "SELECT * FROM duckdb_extensions()",
    "SELECT * FROM pragma_version()",
    "SELECT which_secret('s3://x', 's3')",
    "SELECT json_execute_serialized_sql('x')",
    "SELECT * FROM sql_auto_complete('SEL')",
]

#: Functions whose output can be far larger than their input.
AMPLIFIERS = [
    "SELECT list_sum(range(200000000))",
    "SELECT * FROM range(1000000000)",
    "SELECT generate_series(1, 1000000000)",
    "SELECT * FROM generate_series(1, 1000000000) AS g",
    "SELECT repeat('x', 10000000) FROM kv",
    "SELECT lpad('x', 100000000, 'y')",
    "SELECT rpad(name, value, 'y') FROM kv",
    f"SELECT lpad(name, {MAX_PAD_WIDTH + 1}, ' ') FROM kv",
    "SELECT replace(name, 'a', 'aaaaaaaaaaaa') FROM kv",
    "SELECT replace(name, name, 'aa') FROM kv",
    "SELECT regexp_replace(name, '', 'xx', 'g') FROM kv",
    "SELECT printf('%100000000d', 1)",
    "SELECT format('%100000000s', 'x')",
    "SELECT unnest(range(100000000))",
    "SELECT [key, key, key] FROM kv",
    "SELECT ARRAY(SELECT key FROM kv)",
    "SELECT list_value(1, 2)",
    "SELECT struct_pack(a := 1)",
    "SELECT string_split(name, '') FROM kv",
    "SELECT string_to_array(name, '') FROM kv",
    "SELECT encode(encode(encode(name::bytea, 'hex')::bytea, 'hex')::bytea, 'hex') FROM kv",
    "SELECT array_fill(1, ARRAY[100000000])",
    "SELECT factorial(100000)",
    "SELECT regexp_split_to_table(name, '') FROM kv",
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r",
    "SELECT count(*) FROM kv GROUP BY CUBE (key, value, seq, name)",
    # aggregates that gather a whole table into one value
    "SELECT string_agg(name, ',') FROM kv",
    "SELECT array_agg(key) FROM kv",
    "SELECT list(key) FROM kv",
    # concatenation compounding through CTEs and subqueries
    "WITH a AS (SELECT name || name AS v FROM kv), b AS (SELECT v || v AS v FROM a) SELECT v FROM b",
    "SELECT v FROM (SELECT concat(name, name) AS v FROM kv) s",
    "SELECT * FROM kv WHERE name IN (SELECT name || 'x' FROM kv)",
    "SELECT " + " || ".join(["name"] * 40) + " FROM kv",
]

#: Constructs that are not one bounded read-only SELECT over the tables.
CONSTRUCTS_REFUSED = [
    "SELECT * FROM (VALUES (1), (2)) AS v(a)",
    "SELECT * FROM kv, LATERAL (SELECT kv.key) AS l",
    "SELECT * FROM kv TABLESAMPLE 10%",
    "SELECT $1",
    'SELECT name COLLATE "C" FROM kv',
    "SELECT name::xml FROM kv",
    "SELECT key::int[] FROM kv",
    "SELECT (name::json)->>'a' FROM kv",
]


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("sql", DANGEROUS + AMPLIFIERS + CONSTRUCTS_REFUSED)
def test_refused_in_both_dialects(sql: str, dialect: Dialect) -> None:
    code = refused(sql, dialect)
    assert code in {
        "forbidden_function",
        "forbidden_clause",
        "table_function",
        "sql_syntax",
    }, (sql, dialect, code)
    # a refusal for syntax is fine where the dialect has no such syntax, but a function that
    # parses must be refused by the allowlist, not by luck
    try:
        sqlglot.parse_one(sql, read=dialect)
    except sqlglot.errors.ParseError:
        return
    assert code != "sql_syntax", (sql, dialect)


def test_an_unknown_function_is_refused_by_default() -> None:
    for dialect in DIALECTS:
        assert refused("SELECT frobnicate(key) FROM kv", dialect) == "forbidden_function"
        assert refused("SELECT * FROM kv WHERE frobnicate(key)", dialect) == "forbidden_function"


def test_an_untyped_function_must_be_on_the_list_of_the_dialect_it_runs_in() -> None:
    # hash() is a DuckDB function; rendered for PostgreSQL it is refused, not sent
    checked = check_query("SELECT hash(name) FROM kv", TABLES, "duckdb")
    checked.render("duckdb", limit=5)
    with pytest.raises(QueryRejected) as caught:
        checked.render("postgres", limit=5)
    assert caught.value.code == "forbidden_function"


def test_text_types_are_bounded_in_postgres() -> None:
    # PostgreSQL pads char(n) with blanks: a cast can make a value n bytes long
    assert refused("SELECT CAST(name AS CHAR(100000000)) FROM kv", "postgres") == "forbidden_clause"
    assert refused("SELECT name::varchar(20000) FROM kv", "postgres") == "forbidden_clause"
    check_query("SELECT name::varchar(200), CAST(name AS CHAR(10)) FROM kv", TABLES, "postgres")


def test_the_lists_hold_no_dangerous_or_amplifying_function() -> None:
    for names in NAMED_FUNCTIONS.values():
        for name in names:
            assert not name.startswith(("pg_", "lo_", "read_", "query", "dblink", "ts_")), name
            assert name not in {"set_config", "current_setting", "repeat", "range", "printf"}
    for banned in (
        exp.Repeat,
        exp.GenerateSeries,
        exp.ExplodingGenerateSeries,
        exp.Explode,
        exp.Array,
        exp.Struct,
        exp.Format,
        exp.Encode,
        exp.Factorial,
        exp.CurrentUser,
        exp.SessionUser,
        exp.CurrentVersion,
        exp.CurrentDatabase,
        exp.ReadCSV,
    ):
        assert banned not in FUNCTIONS, banned
    assert not {exp.Values, exp.Lateral, exp.Placeholder, exp.Bracket, exp.Cube} & CONSTRUCTS


def _audit_statements() -> list[str]:
    """The SQL the TPC-DI audit runs on the tiny hand-built warehouse of its own tests."""
    from tests.unit.tpcdi.audit.tiny_dw import build
    from tpcdi.audit.checks import run_audit
    from tpcdi.audit.connection import WarehouseConnection

    seen: list[str] = []

    class Recording(WarehouseConnection):
        def _run(self, sql: str, params: Any, *, fetch: bool) -> Any:
            seen.append(self.sql(sql))
            return super()._run(sql, params, fetch=fetch)

    with tempfile.TemporaryDirectory() as tmp, Recording.duckdb(":memory:") as conn:
        build(conn, Path(tmp) / "keys")
        seen.clear()
        run_audit(conn)
    return seen


def test_every_function_the_tpcdi_audit_uses_is_on_the_list() -> None:
    """The audit's 182 checks are realistic analytical SQL over the DW: every function they call
    is allowed, except those that read the catalog (the audit needs them; a user does not)."""
    statements = _audit_statements()
    assert len(statements) > 100
    catalog = {exp.CurrentDatabase, exp.CurrentSchema}
    missing: set[str] = set()
    for sql in statements:
        tree = sqlglot.parse_one(sql, read="duckdb")
        if not isinstance(tree, exp.Query):
            continue
        for node in tree.walk():
            if isinstance(node, exp.Anonymous):
                if str(node.name).lower() not in NAMED_FUNCTIONS["duckdb"]:
                    missing.add(str(node.name).lower())
            elif (
                isinstance(node, exp.Func)
                and type(node) not in FUNCTIONS
                and type(node) not in CONSTRUCTS
                and type(node) not in catalog
            ):
                missing.add(type(node).__name__)
    assert not missing, sorted(missing)
