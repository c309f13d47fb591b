"""Row-for-row comparison of a run's staging file and warehouses with the reference run's.

:func:`snapshot` reads every relation of one run, sorted, as plain Python rows: in staging the
state tables (their views), the delta logs and sink outputs still staged, and the system tables
(the batch ledger, dead letters, aborts, offsets, stream progress, partitions, sequences,
retractions, layouts, migration acknowledgements); in each warehouse (DuckDB file and
PostgreSQL) every table of the dataflow's schema and of its delta schema (full tables, sinks,
``dead_letters``, ``aborts``) and the migration ledger and layout tables.

Left out, by name (:data:`VOLATILE`), are only the columns a fault-free run could not repeat
either: wall-clock times (``*_at``, durations), how a batch reached a warehouse (``via``: a
push of the pipeline or of ``streamdi migrate``), and relations that record the physical
history of a run rather than its data (staging's segment catalog and meta table, whose Kafka log
id names the run's own broker; the warehouses' merge log: how many merges ran depends on
timing, what they merged does not, and the full tables compared show it). A workload may add
its own (:class:`Rules`: the TPC-DI workload leaves out DImessages' wall-clock
``messagedateandtime`` and its visibility rows, whose counts depend on when they were taken).
Everything else must be equal: a row missing, extra or different is a :class:`Difference`.
"""

from __future__ import annotations

import datetime
import decimal
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from staging import state_file

#: Columns left out of the comparison, per relation (``schema.table``; ``*`` any schema).
VOLATILE: dict[str, frozenset[str]] = {
    "streamdi.batches": frozenset({"arrived_at", "executed_ms", "committed_at"}),
    "streamdi.migration_acks": frozenset({"acked_at"}),
    "streamdi.layouts": frozenset({"applied_at"}),
    "streamdi.retractions": frozenset({"shadow"}),
    "streamdi_migration.ledger": frozenset({"via", "loaded_at"}),
    "streamdi_migration.layouts": frozenset({"applied_at"}),
    "streamdi_migration.bootstraps": frozenset({"started_at", "loaded_at", "caught_up_at"}),
    "streamdi_migration.bootstrap_tables": frozenset({"ms", "copied_at"}),
}
#: Relations not compared (see the module docstring).
SKIPPED = frozenset({"streamdi.segments", "streamdi.meta", "streamdi_migration.merges"})
#: Schemas of staging and of a warehouse that hold nothing of the run's data.
_SYSTEM_SCHEMAS = ("information_schema", "pg_catalog", "pg_toast")


@dataclass
class Relation:
    """One relation of one store: its compared columns and its rows, sorted."""

    columns: list[str]
    rows: list[tuple[Any, ...]]


Snapshot = dict[str, Relation]
"""``store:schema.table`` -> :class:`Relation` (store: ``staging``, ``duckdb``, ``postgres``)."""


@dataclass
class Difference:
    """A relation whose rows differ: how many only the reference or only this run has, a few
    of each, and a note (a relation one side lacks, columns that differ)."""

    relation: str
    missing: int = 0
    extra: int = 0
    missing_examples: list[list[Any]] = field(default_factory=list)
    extra_examples: list[list[Any]] = field(default_factory=list)
    note: str = ""

    def describe(self) -> str:
        parts = [self.relation]
        if self.note:
            parts.append(self.note)
        if self.missing or self.extra:
            parts.append(f"{self.missing} rows only in the reference, {self.extra} only here")
        return ": ".join(parts)


def _skipped(name: str) -> bool:
    schema, _, _table = name.partition(".")
    return name in SKIPPED or f"{schema}.*" in SKIPPED


def _plain(value: Any) -> Any:
    """A value both drivers give alike (decimals as floats, times as ISO text)."""
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, memoryview | bytearray):
        return bytes(value)
    return value


def _key(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((v is None, "" if v is None else type(v).__name__, v) for v in row)


def _rows(rows: Iterable[Sequence[Any]]) -> list[tuple[Any, ...]]:
    plain = [tuple(_plain(v) for v in row) for row in rows]
    plain.sort(key=_key)
    return plain


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class Rules:
    """A workload's own exceptions, by relation (``schema.table``): ``volatile`` columns left
    out besides :data:`VOLATILE`, and ``where`` the rows compared (an SQL condition both DuckDB
    and PostgreSQL read)."""

    volatile: Mapping[str, frozenset[str]] = field(default_factory=dict)
    where: Mapping[str, str] = field(default_factory=dict)

    def left_out(self, name: str) -> frozenset[str]:
        return VOLATILE.get(name, frozenset()) | self.volatile.get(name, frozenset())

    def condition(self, name: str) -> str:
        return f" WHERE {self.where[name]}" if name in self.where else ""


NO_RULES = Rules()


def _duckdb_snapshot(
    path: Path, store: str, schemas: Sequence[str] | None, rules: Rules = NO_RULES
) -> Snapshot:
    out: Snapshot = {}
    con = state_file.connect(path)  # a staging file's state views read its state file
    try:
        listed = con.execute(
            "SELECT table_schema, table_name FROM information_schema.tables "
            "WHERE table_catalog = current_database() ORDER BY 1, 2"
        ).fetchall()
        for schema, table in listed:
            name = f"{schema}.{table}"
            if schema in _SYSTEM_SCHEMAS or _skipped(name):
                continue
            if schemas is not None and schema not in schemas:
                continue
            columns = [
                c
                for (c,) in con.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_schema = ? "
                    "AND table_name = ? ORDER BY ordinal_position",
                    [schema, table],
                ).fetchall()
                if c not in rules.left_out(name)
            ]
            select = ", ".join(_quote(c) for c in columns)
            rows = con.execute(
                f"SELECT {select} FROM {_quote(schema)}.{_quote(table)}{rules.condition(name)}"
            ).fetchall()
            out[f"{store}:{name}"] = Relation(columns, _rows(rows))
    finally:
        con.close()
    return out


def staging_snapshot(path: Path, rules: Rules = NO_RULES) -> Snapshot:
    """Every compared relation of the staging file at ``path`` (no pipeline may hold it)."""
    return _duckdb_snapshot(path, "staging", None, rules)


def duckdb_warehouse_snapshot(path: Path, schema: str, rules: Rules = NO_RULES) -> Snapshot:
    """Every compared relation of the DuckDB warehouse file for the dataflow schema ``schema``."""
    schemas = (schema, f"{schema}_delta", "streamdi_migration")
    return _duckdb_snapshot(path, "duckdb", schemas, rules)


def postgres_snapshot(dsn: str, schema: str, rules: Rules = NO_RULES) -> Snapshot:
    """Every compared relation of the PostgreSQL warehouse for the dataflow schema ``schema``."""
    import psycopg2

    out: Snapshot = {}
    con = psycopg2.connect(dsn)
    try:
        with con.cursor() as cur:
            cur.execute(
                "SELECT table_schema, table_name FROM information_schema.tables "
                "WHERE table_schema = ANY(%s) AND table_type = 'BASE TABLE' ORDER BY 1, 2",
                ([schema, f"{schema}_delta", "streamdi_migration"],),
            )
            for table_schema, table in cur.fetchall():
                name = f"{table_schema}.{table}"
                if _skipped(name):
                    continue
                cur.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
                    "AND table_name = %s ORDER BY ordinal_position",
                    (table_schema, table),
                )
                columns = [c for (c,) in cur.fetchall() if c not in rules.left_out(name)]
                cur.execute(
                    f"SELECT {', '.join(_quote(c) for c in columns)} "
                    f"FROM {_quote(table_schema)}.{_quote(table)}{rules.condition(name)}"
                )
                out[f"postgres:{name}"] = Relation(columns, _rows(cur.fetchall()))
    finally:
        con.close()
    return out


def compare(reference: Snapshot, run: Snapshot, *, examples: int = 5) -> list[Difference]:
    """Every relation whose rows differ between ``reference`` and ``run`` (empty: identical)."""
    out: list[Difference] = []
    for name in sorted(set(reference) | set(run)):
        ref, got = reference.get(name), run.get(name)
        if ref is None or got is None:
            side = "the reference" if ref is None else "this run"
            out.append(Difference(name, note=f"missing in {side}"))
            continue
        if ref.columns != got.columns:
            out.append(Difference(name, note=f"columns {ref.columns} != {got.columns}"))
            continue
        if ref.rows == got.rows:
            continue
        want, have = Counter(ref.rows), Counter(got.rows)
        missing = want - have
        extra = have - want
        out.append(
            Difference(
                name,
                missing=sum(missing.values()),
                extra=sum(extra.values()),
                missing_examples=[list(r) for r in sorted(missing, key=_key)[:examples]],
                extra_examples=[list(r) for r in sorted(extra, key=_key)[:examples]],
            )
        )
    return out


def totals(snapshot: Snapshot) -> dict[str, int]:
    """Rows per relation (what was compared, for the report)."""
    return {name: len(r.rows) for name, r in sorted(snapshot.items())}
