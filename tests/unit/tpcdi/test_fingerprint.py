"""A warehouse fingerprint ignores the order rows were written in and the run's clock, and sees
a changed, missing or extra row."""

from __future__ import annotations

import duckdb

from tpcdi.warehouse.fingerprint import differences, fingerprint

ROWS = [(1, "a", 1.5), (2, "b", None), (3, "c", 2.25)]


def warehouse(rows: list[tuple[int, str, float | None]], clock: str) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("CREATE SCHEMA tpcdi")
    con.execute("CREATE TABLE tpcdi.facts (id BIGINT, name TEXT, value DOUBLE)")
    con.executemany("INSERT INTO tpcdi.facts VALUES (?, ?, ?)", rows)
    con.execute(
        "CREATE TABLE tpcdi.dimessages (messagedateandtime TIMESTAMP, messagetype TEXT, "
        "messagedata TEXT)"
    )
    con.execute(
        "INSERT INTO tpcdi.dimessages VALUES (?, 'Alert', 'x'), (?, 'Visibility_1', ?)",
        [clock, clock, clock],
    )
    return con


def test_row_order_and_the_run_clock_do_not_count() -> None:
    left = fingerprint(warehouse(ROWS, "2026-01-01 10:00:00"))
    right = fingerprint(warehouse(ROWS[::-1], "2026-01-02 11:30:00"))
    assert left == right and set(left) == {"facts", "dimessages"}
    assert left["facts"].rows == 3 and left["dimessages"].rows == 1


def test_a_changed_missing_or_extra_row_is_seen() -> None:
    base = fingerprint(warehouse(ROWS, "2026-01-01 10:00:00"))
    for rows in (
        [(1, "a", 1.5), (2, "b", None), (3, "c", 2.26)],
        ROWS[:2],
        [*ROWS, (4, "d", 0.0)],
        [(1, "a", 1.5), (2, "b", 0.0), (3, "c", 2.25)],
    ):
        assert set(differences(base, fingerprint(warehouse(rows, "2026-01-01 10:00:00")))) == {
            "facts"
        }
