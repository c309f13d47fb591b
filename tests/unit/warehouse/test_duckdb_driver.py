"""The DuckDB driver on real DuckDB files: transactions, the Arrow bulk path, fenced reads under a
deadline and a byte cap, the errors it maps, and a file copied or replaced whole."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest

from streamdi.errors import TerminalError, TransientError
from warehouse.duckdb import DuckDBDriver, read_fenced, replace_file, wal_path
from warehouse.exceptions import (
    WarehouseFileBusy,
    WarehouseQueryFailed,
    WarehouseQueryTimeout,
    WarehouseQueryTooLarge,
    WarehouseUnavailable,
)

ROWS = pa.table(
    {
        "id": pa.array([1, 2, 3, 4], pa.int64()),
        "name": pa.array(["plain", "", None, 'quo"te, comma\nnewline'], pa.string()),
    }
)


def _driver(path: Path, *, fenced: bool = False) -> DuckDBDriver:
    driver = DuckDBDriver(path / "wh.duckdb", memory_limit="256MB", threads=1, fenced=fenced)
    driver.connect()
    driver.execute_script(
        [
            'CREATE SCHEMA IF NOT EXISTS "w"',
            'CREATE TABLE IF NOT EXISTS "w"."t" (id BIGINT, name VARCHAR)',
        ]
    )
    return driver


def test_bulk_load_commits_and_rollback_discards(tmp_path: Path) -> None:
    driver = _driver(tmp_path)
    assert driver.dialect == "duckdb" and driver.connected
    driver.begin()
    assert driver.in_transaction
    driver.bulk_insert('"w"."t"', ROWS)
    driver.commit()
    assert not driver.in_transaction
    driver.begin()
    driver.bulk_insert('"w"."t"', ROWS)
    driver.rollback()
    rows = driver.fetch('SELECT id, name FROM "w"."t" WHERE id >= ? ORDER BY id', [1])
    assert rows == [tuple(r.values()) for r in ROWS.to_pylist()]
    driver.close()
    driver.close()  # idempotent
    assert not driver.connected


def test_the_hook_runs_halfway_through_a_bulk_load(tmp_path: Path) -> None:
    driver = _driver(tmp_path)
    seen: list[tuple[str, int]] = []

    def hook(phase: str) -> None:
        # the first half is in (visible inside the transaction), the second not yet
        seen.append((phase, int(driver.fetch('SELECT count(*) FROM "w"."t"')[0][0])))

    driver.begin()
    driver.bulk_insert('"w"."t"', ROWS, hook)
    driver.commit()
    assert seen == [("copy", 2)]
    assert driver.fetch('SELECT count(*) FROM "w"."t"') == [(4,)]


def test_explicit_columns_are_written_as_given(tmp_path: Path) -> None:
    driver = _driver(tmp_path)
    driver.bulk_insert('"w"."t"', pa.table({"a": [7], "b": ["seven"]}), columns=["id", "name"])
    assert driver.fetch('SELECT id, name FROM "w"."t"') == [(7, "seven")]


def test_a_fenced_instance_refuses_files_and_cannot_be_unfenced(tmp_path: Path) -> None:
    driver = _driver(tmp_path, fenced=True)
    con = driver.read_connection()
    try:
        outside = tmp_path / "leak.csv"
        with pytest.raises(WarehouseQueryFailed) as wrote:
            read_fenced(con, f"COPY (SELECT 1) TO '{outside}'", timeout_s=5, max_bytes=1 << 20)
        assert isinstance(wrote.value, TerminalError)
        assert not outside.exists()
        with pytest.raises(WarehouseQueryFailed):
            read_fenced(
                con, "SELECT * FROM read_csv('/etc/hostname')", timeout_s=5, max_bytes=1 << 20
            )
        with pytest.raises(WarehouseQueryFailed):
            read_fenced(con, "SET enable_external_access = true", timeout_s=5, max_bytes=1 << 20)
        assert read_fenced(
            con, "SELECT 41 + 1 AS n", timeout_s=5, max_bytes=1 << 20
        ).to_pylist() == [{"n": 42}]
    finally:
        con.close()


def test_a_read_past_its_deadline_raises_the_terminal_timeout(tmp_path: Path) -> None:
    driver = _driver(tmp_path, fenced=True)
    con = driver.read_connection()
    try:
        with pytest.raises(WarehouseQueryTimeout) as late:
            read_fenced(
                con,
                "SELECT count(*) FROM range(200000) a, range(200000) b WHERE a.range + b.range = -1",
                timeout_s=0.3,
                max_bytes=1 << 20,
            )
        assert isinstance(late.value, TerminalError) and late.value.seconds == 0.3
    finally:
        con.close()


def test_a_read_past_its_byte_cap_stops(tmp_path: Path) -> None:
    driver = _driver(tmp_path, fenced=True)
    con = driver.read_connection()
    try:
        with pytest.raises(WarehouseQueryTooLarge) as large:
            read_fenced(con, "SELECT range AS n FROM range(100000)", timeout_s=5, max_bytes=4096)
        assert large.value.limit_bytes == 4096
    finally:
        con.close()


def test_an_unreachable_file_raises_the_transient_error(tmp_path: Path) -> None:
    (tmp_path / "a-directory").mkdir()
    driver = DuckDBDriver(tmp_path / "a-directory")
    with pytest.raises(WarehouseUnavailable) as gone:
        driver.connect()
    assert isinstance(gone.value, TransientError)
    assert not driver.connected


def test_a_rejected_statement_maps_to_query_failed(tmp_path: Path) -> None:
    driver = _driver(tmp_path)
    try:
        driver.fetch("SELECT nope FROM w.t")
    except driver.driver_errors as exc:
        error = driver.error_for(exc, "SELECT nope FROM w.t\n-- more")
    else:
        pytest.fail("an unknown column must fail")
    assert isinstance(error, WarehouseQueryFailed)
    assert error.sql == "SELECT nope FROM w.t" and "nope" in error.detail
    with pytest.raises(WarehouseUnavailable), driver.guard():  # the migration's mapping
        driver.fetch("SELECT nope FROM w.t")


def test_a_wrapped_connection_stays_its_owners(tmp_path: Path) -> None:
    import duckdb

    con = duckdb.connect(str(tmp_path / "own.duckdb"))
    driver = DuckDBDriver.wrap(con)
    driver.commit()  # nothing open: a no-op
    driver.execute("CREATE TABLE x (n INTEGER)")
    driver.close()
    assert con.execute("SELECT count(*) FROM x").fetchall() == [(0,)]
    con.close()


def test_a_file_copy_is_every_committed_transaction(tmp_path: Path) -> None:
    """Rows still in the write-ahead log are in the copy (it checkpoints first); a transaction
    open meanwhile is not."""
    driver = _driver(tmp_path)
    driver.execute("SET checkpoint_threshold = '1GB'")
    driver.begin()
    driver.bulk_insert('"w"."t"', ROWS)
    driver.commit()
    assert wal_path(tmp_path / "wh.duckdb").stat().st_size > 0
    other = DuckDBDriver(tmp_path / "wh.duckdb")
    other.connect()
    other.begin()
    other.execute('INSERT INTO "w"."t" VALUES (99, \'uncommitted\')')
    seen: list[str] = []
    driver.copy_file(tmp_path / "copy.duckdb", seen.append)
    other.rollback()
    assert seen == ["copy"]
    copy = DuckDBDriver(tmp_path / "copy.duckdb")
    copy.connect()
    assert copy.fetch('SELECT count(*) FROM "w"."t"') == [(4,)]
    for d in (copy, other, driver):
        d.close()


def test_replacing_a_file_waits_until_nothing_of_the_process_holds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "wh.duckdb"
    driver = _driver(tmp_path)
    driver.bulk_insert('"w"."t"', ROWS)
    source = tmp_path / "new.duckdb"
    made = DuckDBDriver(source)
    made.connect()
    made.execute_script(['CREATE TABLE "fresh" AS SELECT 7 AS x'])
    made.close()
    with pytest.raises(WarehouseFileBusy, match="held open"):
        replace_file(path, source)  # the driver's connection would serve the old file
    assert source.exists() and driver.fetch('SELECT count(*) FROM "w"."t"') == [(4,)]
    driver.close()

    refused: list[str] = []
    rename = os.replace

    def connect_meanwhile(src: Path, dst: Path) -> None:
        with pytest.raises(WarehouseUnavailable, match="being replaced") as error:
            DuckDBDriver(path).connect()
        refused.append(str(error.value))
        rename(src, dst)

    monkeypatch.setattr(os, "replace", connect_meanwhile)
    replace_file(path, source)
    monkeypatch.undo()
    assert len(refused) == 1 and not source.exists() and not wal_path(path).exists()
    driver.connect()
    assert driver.fetch('SELECT x FROM "fresh"') == [(7,)]
    driver.close()


def test_checkpoint_once_writes_a_checkpoint_where_a_plain_one_is_skipped(tmp_path: Path) -> None:
    """With nothing pending, DuckDB skips ``CHECKPOINT`` (the file is not touched);
    :meth:`DuckDBDriver.checkpoint_once` gives it a change to write (a scratch table created
    and dropped), so a checkpoint is taken: the file is written, the log folded in, the scratch
    table gone and the rows as they were."""
    driver = _driver(tmp_path)
    path = tmp_path / "wh.duckdb"
    driver.begin()
    driver.bulk_insert('"w"."t"', ROWS)
    driver.commit()
    driver.execute("CHECKPOINT")
    before = os.stat(path).st_mtime_ns
    driver.execute("CHECKPOINT")
    assert os.stat(path).st_mtime_ns == before  # nothing to write: skipped
    seconds = driver.checkpoint_once()
    assert seconds >= 0
    assert os.stat(path).st_mtime_ns > before
    wal = wal_path(path)
    assert not wal.exists() or wal.stat().st_size == 0
    assert driver.fetch(
        "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'streamdi_checkpoint_scratch'"
    ) == [(0,)]
    assert driver.fetch('SELECT count(*) FROM "w"."t"') == [(4,)]
    driver.close()
