"""An order-free fingerprint of a TPC-DI warehouse in DuckDB, to show that two runs (local and
cluster Spark, before and after a change of the load) left the same warehouse.

A table's fingerprint is its row count and the sum of a 64-bit hash of each row (as a 128-bit
integer, so it cannot overflow): equal multisets of rows give equal fingerprints whatever order
the rows were written in; a changed, missing or extra row changes the sum except with negligible
probability. What a run's clock decides is left out (:data:`RUN_CLOCK`): DImessages'
``messagedateandtime`` and its Visibility rows (written every few seconds while the updates run,
so their number depends on timing).
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from staging.layout import q

#: Per table: the columns the run's clock fills, and a condition on the rows that depend on it.
RUN_CLOCK: dict[str, tuple[tuple[str, ...], str | None]] = {
    "dimessages": (("messagedateandtime",), "messagetype NOT LIKE 'Visibility%'"),
}


@dataclass(frozen=True)
class TableFingerprint:
    rows: int
    hash_sum: int


def fingerprint(
    con: duckdb.DuckDBPyConnection, schema: str = "tpcdi"
) -> dict[str, TableFingerprint]:
    """Every base table of ``schema`` (see the module docstring), by name."""
    tables = [
        row[0]
        for row in con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = ? "
            "AND table_type = 'BASE TABLE' ORDER BY 1",
            [schema],
        ).fetchall()
    ]
    found = {}
    for table in tables:
        skip, where = RUN_CLOCK.get(table, ((), None))
        columns = [
            row[0]
            for row in con.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = ? "
                "AND table_name = ? ORDER BY ordinal_position",
                [schema, table],
            ).fetchall()
            if row[0] not in skip
        ]
        hashed = ", ".join(q(c) for c in columns)
        condition = f" WHERE {where}" if where else ""
        rows, total = con.execute(
            f"SELECT count(*), coalesce(sum(hash({hashed})::HUGEINT), 0) "
            f"FROM {q(schema)}.{q(table)}{condition}"
        ).fetchone()  # type: ignore[misc]
        found[table] = TableFingerprint(int(rows), int(total))
    return found


def differences(
    left: dict[str, TableFingerprint], right: dict[str, TableFingerprint]
) -> dict[str, tuple[TableFingerprint | None, TableFingerprint | None]]:
    """The tables whose fingerprints differ (or that only one side has)."""
    names = sorted(set(left) | set(right))
    return {n: (left.get(n), right.get(n)) for n in names if left.get(n) != right.get(n)}


def warehouse_fingerprint(path: str, schema: str = "tpcdi") -> dict[str, TableFingerprint]:
    """:func:`fingerprint` of the DuckDB warehouse file at ``path`` (opened read-only)."""
    con = duckdb.connect(path, read_only=True)
    try:
        return fingerprint(con, schema)
    finally:
        con.close()
