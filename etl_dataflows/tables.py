"""Declarations of the state tables that transactional steps read and write.

Three kinds, each keyed by one or more typed key columns:

* :class:`Table` — one current row per key (``int64`` or ``string`` key columns), optionally with
  a generated surrogate key assigned when a row is first inserted.
* :class:`HistoryTable` — a history-tracked (SCD type 2) table: every change of a key closes the
  current version and adds a new one with a new surrogate key, effective/end columns and an
  is-current flag. Reads see the current version, or the version valid at a given time ("as of").
  With ``period="date"`` a key changes at most once per day: a second change on the same day
  updates that day's version in place (no row is effective and ended on the same day).
* :class:`WindowTable` — a keyed event-time window: entries appended per key, aggregates (max, min,
  sum, count, and the time of the max/min) over the last ``span`` µs; e.g. a 52-week high/low.

Each table's canonical form (its *image*, used by staging, migration and executor comparison) has
the columns listed by :meth:`BaseStateTable.image_columns` and a row id
(:meth:`BaseStateTable.row_id`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from etl_dataflows.types import ColumnType, check_column_type

KeyType = Literal["int64", "string"]
Period = Literal["timestamp", "date"]
AggregateKind = Literal["max", "min", "sum", "count", "first", "last", "argmax", "argmin"]

#: Image columns the engine adds: validity interval of a version, window entry id and time.
VALID_FROM, VALID_TO = "_valid_from", "_valid_to"
ENTRY, AT = "_entry", "_at"
#: ``_valid_to`` of a current version.
OPEN_END = 2**63 - 1
#: ``end`` column of a current version: 9999-12-31 as a date (days) or a timestamp (µs).
END_OF_TIME_DATE = 2932896
END_OF_TIME_TS = END_OF_TIME_DATE * 86_400_000_000


def _columns(kind: str, spec: Mapping[str, str]) -> tuple[tuple[str, ColumnType], ...]:
    out = []
    for name, value in spec.items():
        if not name or name.startswith("_"):
            raise ValueError(f"{kind} column {name!r}: names starting with '_' are reserved")
        out.append((name, check_column_type(name, str(value))))
    return tuple(out)


@dataclass(frozen=True)
class BaseStateTable:
    """Common part of every state table declaration."""

    name: str
    key: tuple[tuple[str, ColumnType], ...]
    columns: tuple[tuple[str, ColumnType], ...]
    indexes: tuple[str, ...] = ()
    defaults: Mapping[str, Any] = field(default_factory=dict)
    fills: Mapping[str, Any] = field(default_factory=dict)
    """Per value column, an expression over the row's other columns that fills the column in the
    rows already stored when an upgrade adds it (:mod:`etl_dataflows.evolution`); new rows take
    ``defaults`` as always."""

    kind: str = field(init=False, default="table")

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"state table name {self.name!r} must be an identifier")
        if not self.key:
            raise ValueError(f"state table {self.name!r} needs at least one key column")
        for name, kind in self.key:
            if kind not in ("int64", "string"):
                raise ValueError(
                    f"state table {self.name!r}: key column {name!r} is {kind}; keys are int64 "
                    "or string"
                )
        names = [n for n, _ in self.key] + [n for n, _ in self.columns] + self.extra_names()
        duplicates = {n for n in names if names.count(n) > 1}
        if duplicates:
            raise ValueError(f"state table {self.name!r}: duplicate column {sorted(duplicates)}")
        value_columns = dict(self.columns)
        for index in self.indexes:
            if index not in value_columns:
                raise ValueError(
                    f"state table {self.name!r}: index on {index!r}, which is not a value column"
                )
        for column in self.defaults:
            if column not in value_columns:
                raise ValueError(
                    f"state table {self.name!r}: default for {column!r}, "
                    "which is not a value column"
                )
        for column in self.fills:
            if column not in value_columns:
                raise ValueError(
                    f"state table {self.name!r}: fill for {column!r}, which is not a value column"
                )

    def extra_names(self) -> list[str]:
        """User-visible columns the table adds beyond key and value columns."""
        return []

    @property
    def key_names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.key)

    @property
    def value_types(self) -> dict[str, ColumnType]:
        """Columns an operation may set, with their types."""
        return dict(self.columns)

    def readable_types(self) -> dict[str, ColumnType]:
        """Every column a read exposes (key, value and generated columns)."""
        return {**dict(self.key), **dict(self.columns)}

    def image_columns(self) -> dict[str, ColumnType]:
        """The columns of the table's canonical image, in order."""
        return self.readable_types()

    def row_id(self) -> tuple[str, ...]:
        """Image columns that identify a row."""
        return self.key_names


@dataclass(frozen=True)
class Table(BaseStateTable):
    """One current row per key. ``surrogate`` names a generated int64 column set on insert."""

    surrogate: str | None = None
    surrogate_start: int = 1

    kind: str = field(init=False, default="table")

    def extra_names(self) -> list[str]:
        return [self.surrogate] if self.surrogate else []

    def readable_types(self) -> dict[str, ColumnType]:
        types: dict[str, ColumnType] = dict(self.key)
        if self.surrogate:
            types[self.surrogate] = "int64"
        types.update(dict(self.columns))
        return types


@dataclass(frozen=True)
class HistoryTable(BaseStateTable):
    """A history-tracked (SCD type 2) table; see the module docstring."""

    surrogate: str = "sk"
    surrogate_start: int = 1
    effective: str = "effective_date"
    end: str = "end_date"
    current: str = "is_current"
    period: Period = "date"

    kind: str = field(init=False, default="history")

    def extra_names(self) -> list[str]:
        return [self.surrogate, self.effective, self.end, self.current]

    @property
    def period_type(self) -> ColumnType:
        return "date" if self.period == "date" else "timestamp"

    def readable_types(self) -> dict[str, ColumnType]:
        types: dict[str, ColumnType] = dict(self.key)
        types[self.surrogate] = "int64"
        types.update(dict(self.columns))
        types[self.effective] = self.period_type
        types[self.end] = self.period_type
        types[self.current] = "bool"
        return types

    def image_columns(self) -> dict[str, ColumnType]:
        return {**self.readable_types(), VALID_FROM: "int64", VALID_TO: "int64"}

    def row_id(self) -> tuple[str, ...]:
        return (self.surrogate,)

    def period_of(self, ts: int) -> int:
        """The effective/end value of a change at event time ``ts``."""
        return ts // 86_400_000_000 if self.period == "date" else ts

    @property
    def end_of_time(self) -> int:
        return END_OF_TIME_DATE if self.period == "date" else END_OF_TIME_TS


@dataclass(frozen=True)
class Aggregate:
    """One aggregate of a window: ``kind`` over the entries' ``column``.

    ``argmax``/``argmin`` give the time (``_at``) of the earliest entry holding the max/min.
    """

    kind: AggregateKind
    column: str

    def result_type(self, column_type: ColumnType) -> ColumnType:
        if self.kind == "count":
            return "int64"
        if self.kind in ("argmax", "argmin"):
            return "int64"
        if self.kind == "sum" and column_type == "int64":
            return "int64"
        if self.kind == "sum":
            return "float64"
        return column_type


@dataclass(frozen=True)
class WindowTable(BaseStateTable):
    """A keyed event-time window over the last ``span`` µs (entries with at > now - span)."""

    span: int = 0
    aggregates: Mapping[str, Aggregate] = field(default_factory=dict)

    kind: str = field(init=False, default="window")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.span <= 0:
            raise ValueError(f"window table {self.name!r}: span must be a positive µs count")
        if self.indexes:
            raise ValueError(f"window table {self.name!r}: windows take no indexes")
        values = dict(self.columns)
        for name, agg in self.aggregates.items():
            if agg.column not in values:
                raise ValueError(
                    f"window table {self.name!r}: aggregate {name!r} reads unknown column "
                    f"{agg.column!r}"
                )
            if name in values or name in self.key_names:
                raise ValueError(f"window table {self.name!r}: aggregate {name!r} shadows a column")

    def aggregate_types(self) -> dict[str, ColumnType]:
        values = dict(self.columns)
        return {n: a.result_type(values[a.column]) for n, a in self.aggregates.items()}

    def readable_types(self) -> dict[str, ColumnType]:
        return {**dict(self.key), **self.aggregate_types()}

    def image_columns(self) -> dict[str, ColumnType]:
        return {**dict(self.key), ENTRY: "int64", AT: "int64", **dict(self.columns)}

    def row_id(self) -> tuple[str, ...]:
        return (ENTRY,)


StateTable = Table | HistoryTable | WindowTable


def make_key(
    kind: str, spec: Mapping[str, str] | tuple[str, str]
) -> tuple[tuple[str, ColumnType], ...]:
    """Normalize a key declaration (``{"id": "int64"}`` or ``("id", "int64")``)."""
    if isinstance(spec, tuple):
        spec = {spec[0]: spec[1]}
    return tuple((n, check_column_type(n, str(t))) for n, t in spec.items()) if spec else ()


def make_columns(kind: str, spec: Mapping[str, str]) -> tuple[tuple[str, ColumnType], ...]:
    return _columns(kind, spec)
