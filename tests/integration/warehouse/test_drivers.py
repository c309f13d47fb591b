"""The driver contract on both dialects, against a real embedded PostgreSQL and real DuckDB files:
bulk loads (COPY / Arrow) that commit or roll back whole, ``?`` parameters, savepoints, fenced
reads that refuse a write, deadlines that raise the terminal timeout, an unreachable warehouse
that raises the transient error."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg2
import pyarrow as pa
import pytest

from streamdi.errors import TerminalError, TransientError
from tests.integration.migration.conftest import PostgresServer
from warehouse import postgres_reads
from warehouse.base import BaseWarehouseDriver
from warehouse.duckdb import DuckDBDriver
from warehouse.exceptions import (
    WarehouseQueryFailed,
    WarehouseQueryTimeout,
    WarehouseQueryTooLarge,
    WarehouseUnavailable,
)
from warehouse.postgres import PostgresDriver

pytestmark = pytest.mark.postgres

ROWS = pa.table(
    {
        "id": pa.array([1, 2, 3, 4], pa.int64()),
        "name": pa.array(["plain", "", None, 'quo"te, comma\nnewline'], pa.string()),
    }
)
TABLE = '"w"."we""ird"'


@pytest.fixture(params=["duckdb", "postgres"])
def driver(
    request: pytest.FixtureRequest, postgres: PostgresServer, tmp_path: Path
) -> Iterator[BaseWarehouseDriver]:
    made: BaseWarehouseDriver
    if request.param == "duckdb":
        made = DuckDBDriver(tmp_path / "wh.duckdb")
    else:
        made = PostgresDriver(postgres.database())
    made.connect()
    made.begin()
    made.execute('CREATE SCHEMA IF NOT EXISTS "w"')
    made.execute(f"CREATE TABLE {TABLE} (id BIGINT, name VARCHAR)")
    made.commit()
    yield made
    made.close()


def test_bulk_loads_commit_whole_or_not_at_all(driver: BaseWarehouseDriver) -> None:
    driver.begin()
    driver.bulk_insert(TABLE, ROWS)
    driver.commit()
    driver.begin()
    driver.bulk_insert(TABLE, ROWS)
    driver.rollback()
    assert not driver.in_transaction
    rows = driver.fetch(f"SELECT id, name FROM {TABLE} WHERE id > ? ORDER BY id", [0])
    # an empty string stays empty, a null stays null, quotes/commas/newlines survive COPY's CSV
    assert rows == [(1, "plain"), (2, ""), (3, None), (4, 'quo"te, comma\nnewline')]
    assert driver.execute(f"DELETE FROM {TABLE} WHERE id = ?", [4]) in (0, 1)
    assert driver.fetch(f"SELECT count(*) FROM {TABLE}") == [(3,)]


def test_export_reads_a_snapshot_out_in_bounded_pieces(driver: BaseWarehouseDriver) -> None:
    driver.begin()
    driver.bulk_insert(TABLE, ROWS)
    driver.commit()
    schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
    driver.begin_snapshot()
    batches = list(driver.export(f"SELECT id, name FROM {TABLE} ORDER BY id", schema))
    nothing = list(driver.export(f"SELECT id, name FROM {TABLE} WHERE false", schema))
    driver.rollback()
    assert pa.Table.from_batches(batches, schema=schema).equals(ROWS)
    assert nothing == []
    # a larger result arrives in several pieces; a reader that stops early stops the statement
    driver.begin_snapshot()
    big = f"SELECT i AS id, 'row ' || i AS name FROM {_series(driver)}"
    if isinstance(driver, PostgresDriver):
        from warehouse.postgres_export import copy_out_batches

        pieces = copy_out_batches(driver.raw, big, schema, block_bytes=1 << 16, target="postgres")
    else:
        pieces = driver.export(big, schema)
    first = next(pieces)
    assert 0 < first.num_rows < ROWS_BIG[driver.dialect] and first.schema == schema
    pieces.close()  # type: ignore[attr-defined]
    driver.rollback()
    assert driver.fetch(f"SELECT count(*) FROM {TABLE}") == [(4,)]  # the connection still works


def test_a_postgres_export_comes_in_blocks_not_in_the_pipes_reads(
    postgres: PostgresServer,
) -> None:
    """A record batch per ``block_bytes`` of CSV: read straight off the pipe, Arrow made one of
    each read (at most the pipe's 64 KiB), and DuckDB loads a table of thousands of small chunks
    two to three times slower than the same rows in a few."""
    from warehouse.postgres_export import copy_out_batches

    driver = PostgresDriver(postgres.database())
    driver.connect()
    schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
    sql = "SELECT i AS id, repeat('x', 90) AS name FROM generate_series(1, 100000) AS s(i)"
    block = 1 << 20  # ~10 MB of CSV: ~10 blocks (were ~150 pipe reads)
    batches = list(copy_out_batches(driver.raw, sql, schema, block_bytes=block, target="postgres"))
    driver.rollback()
    driver.close()
    assert sum(b.num_rows for b in batches) == 100_000
    assert len(batches) <= 12, [b.num_rows for b in batches]


#: A result larger than one piece (PostgreSQL: 64 KiB of CSV here; DuckDB: 1 M rows).
ROWS_BIG = {"postgres": 100_000, "duckdb": 2_500_000}


def _series(driver: BaseWarehouseDriver) -> str:
    n = ROWS_BIG[driver.dialect]
    if driver.dialect == "postgres":
        return f"generate_series(1, {n}) AS s(i)"
    return f"range(1, {n + 1}) AS s(i)"


def test_the_hook_runs_in_the_middle_of_a_bulk_load(driver: BaseWarehouseDriver) -> None:
    phases: list[str] = []
    driver.begin()
    driver.bulk_insert(TABLE, ROWS, phases.append)
    driver.commit()
    assert phases == ["copy"]
    assert driver.fetch(f"SELECT count(*) FROM {TABLE}") == [(4,)]


def test_a_failed_statement_in_a_savepoint_keeps_the_connection_usable(
    driver: BaseWarehouseDriver,
) -> None:
    """PostgreSQL: inside a transaction, which survives. DuckDB has no savepoints: in auto-commit
    mode (how the audit runs its checks) a failed statement leaves nothing to undo."""
    in_transaction = driver.dialect == "postgres"
    if in_transaction:
        driver.begin()
    driver.bulk_insert(TABLE, ROWS)
    with pytest.raises(driver.driver_errors), driver.savepoint():
        driver.fetch("SELECT nope FROM w.missing")
    driver.execute(f"INSERT INTO {TABLE} VALUES (?, ?)", [5, "after"])
    if in_transaction:
        driver.commit()
    assert driver.fetch(f"SELECT count(*) FROM {TABLE}") == [(5,)]


def test_dialect_sql_text(driver: BaseWarehouseDriver) -> None:
    match = driver.full_match(driver.quote_literal("555-0101"), "[0-9]{3}-[0-9]{4}")
    miss = driver.full_match(driver.quote_literal("x555-0101"), "[0-9]{3}-[0-9]{4}")
    assert driver.fetch(f"SELECT {match}, {miss}") == [(True, False)]


def test_a_rejected_statement_is_terminal_with_its_sql(driver: BaseWarehouseDriver) -> None:
    with pytest.raises(driver.driver_errors) as raised:
        driver.fetch(f"SELECT nope FROM {TABLE}")
    error = driver.error_for(raised.value, f"SELECT nope FROM {TABLE}")
    assert isinstance(error, WarehouseQueryFailed) and isinstance(error, TerminalError)
    assert error.target == driver.dialect and "nope" in error.detail
    driver.rollback()


def test_an_unreachable_postgres_is_transient(tmp_path: Path) -> None:
    closed_port = "postgresql://nobody@127.0.0.1:9/none?connect_timeout=3"
    driver = PostgresDriver(closed_port, {"sslmode": "disable"})
    with pytest.raises(WarehouseUnavailable) as gone:
        driver.connect()
    assert isinstance(gone.value, TransientError) and gone.value.target == "postgres"
    assert not driver.connected
    with pytest.raises(WarehouseUnavailable):
        postgres_reads.connect(closed_port, {})


def test_a_dropped_postgres_connection_is_transient_and_reconnects(
    postgres: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    dsn = postgres.database()
    driver = PostgresDriver(dsn)
    driver.connect()
    pid = driver.fetch("SELECT pg_backend_pid()")[0][0]
    killer = psycopg2.connect(dsn)
    killer.autocommit = True
    with killer.cursor() as cur:
        cur.execute("SELECT pg_terminate_backend(%s)", [pid])
    killer.close()
    with caplog.at_level(logging.WARNING), pytest.raises(WarehouseUnavailable), driver.guard():
        driver.fetch("SELECT 1")
    assert not driver.connected  # the guard dropped the broken connection
    # quietly: the transient error is the caller's to report (a migration round logs one line);
    # the fault campaign found the pool logging a traceback at ERROR for every server crash
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
    driver.connect()
    assert driver.fetch("SELECT 1") == [(1,)]
    driver.close()


# -- fenced reads on PostgreSQL ---------------------------------------------------------------


@pytest.fixture
def fenced(postgres: PostgresServer) -> Iterator[tuple[Any, Any]]:
    dsn = postgres.database()
    setup = psycopg2.connect(dsn)
    with setup.cursor() as cur:
        cur.execute("CREATE TABLE t (n BIGINT, s TEXT)")
        cur.execute("INSERT INTO t SELECT g, repeat('x', 100) FROM generate_series(1, 1000) g")
    setup.commit()
    setup.close()
    con = postgres_reads.connect(dsn, {})
    cur, first = postgres_reads.begin_fenced(con, 0.5, "SELECT count(*) FROM t", [])
    assert first == (1000,)
    yield con, cur
    postgres_reads.close_quietly(con)


def test_a_fenced_read_refuses_a_write(fenced: tuple[Any, Any]) -> None:
    _, cur = fenced
    with (
        pytest.raises(WarehouseQueryFailed) as refused,
        postgres_reads.postgres_errors("postgres", 0.5),
    ):
        cur.execute("INSERT INTO t VALUES (0, 'no')")
    assert "read-only" in refused.value.detail
    assert isinstance(refused.value, TerminalError)


def test_a_fenced_read_past_its_deadline_raises_the_terminal_timeout(
    fenced: tuple[Any, Any],
) -> None:
    con, cur = fenced
    with pytest.raises(WarehouseQueryTimeout) as late:
        postgres_reads.copy_out(
            con,
            cur,
            "SELECT pg_sleep(5)::text",
            ["slept"],
            [pa.string()],
            max_bytes=1 << 20,
            timeout_s=0.5,
            target="postgres",
        )
    assert isinstance(late.value, TerminalError) and late.value.seconds == 0.5


def test_a_fenced_read_stops_at_its_byte_cap_and_the_session_resets(
    fenced: tuple[Any, Any], postgres: PostgresServer
) -> None:
    con, cur = fenced
    table = postgres_reads.copy_out(
        con,
        cur,
        "SELECT n, s FROM t WHERE n <= 3 ORDER BY n",
        ["n", "s"],
        [pa.int64(), pa.string()],
        max_bytes=1 << 20,
        timeout_s=0.5,
        target="postgres",
    )
    assert table.column("n").to_pylist() == [1, 2, 3]
    with pytest.raises(WarehouseQueryTooLarge) as large:
        postgres_reads.copy_out(
            con,
            cur,
            "SELECT n, s FROM t",
            ["n", "s"],
            [pa.int64(), pa.string()],
            max_bytes=4096,
            timeout_s=0.5,
            target="postgres",
        )
    assert large.value.limit_bytes == 4096
    names, types, oids = postgres_reads.result_shape(
        con, cur, "SELECT s FROM t", 0.5, 64, "postgres"
    )
    assert names == ["s"] and types == [pa.string()]
    with pytest.raises(WarehouseQueryTooLarge):
        postgres_reads.copy_out(
            con,
            cur,
            postgres_reads.row_guard("SELECT s FROM t", 64, oids),
            names,
            types,
            max_bytes=1 << 20,
            timeout_s=0.5,
            target="postgres",
        )
