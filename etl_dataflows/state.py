"""The canonical form of the engine's state, shared by every executor, staging and migration.

A :class:`StateImage` holds one Arrow table per state table, in the table's image columns
(:meth:`~etl_dataflows.tables.BaseStateTable.image_columns`), plus the next value of every sequence
(surrogate keys, window entry ids). Executors load an image when they start (after a restart, from
staging) and produce one on request. An image an executor produces, and one staging reads for
comparison, is sorted by row id; an executor loads an image in any row order (a resuming pipeline
skips staging's sort) and behaves the same. Two executors agree on a batch iff their images and
batch results are equal.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from etl_dataflows.tables import StateTable
from etl_dataflows.types import arrow_array, arrow_schema, shared_python_values


def image_schema(table: StateTable) -> pa.Schema:
    """The Arrow schema of ``table``'s image."""
    return arrow_schema(table.image_columns())


def row_id_schema(table: StateTable) -> pa.Schema:
    """The Arrow schema of ``table``'s row ids."""
    columns = table.image_columns()
    return arrow_schema({name: columns[name] for name in table.row_id()})


def columns_getter(names: Iterable[str]) -> Callable[[Mapping[str, Any]], tuple[Any, ...]]:
    """A function from a dict row to the tuple of its ``names`` columns (made in C for several)."""
    names = tuple(names)
    if len(names) == 1:
        (name,) = names
        return lambda r: (r[name],)
    return operator.itemgetter(*names)


def row_id_getter(table: StateTable) -> Callable[[Mapping[str, Any]], tuple[Any, ...]]:
    """A function from a dict row of ``table`` to its row id."""
    return columns_getter(table.row_id())


def rows_to_table(
    table: StateTable, rows: Iterable[Mapping[str, Any]], *, ids_only: bool = False
) -> pa.Table:
    """Build an image (or row-id) table from dict rows of engine Python values, sorted by row id."""
    columns = table.image_columns()
    names = list(table.row_id()) if ids_only else list(columns)
    ordered = sorted(rows, key=row_id_getter(table))
    arrays = [arrow_array([r.get(n) for r in ordered], columns[n]) for n in names]
    schema = row_id_schema(table) if ids_only else image_schema(table)
    return pa.Table.from_arrays(arrays, schema=schema)


def table_to_rows(table: StateTable, data: pa.Table) -> list[dict[str, Any]]:
    """Image rows as dicts of engine Python values; equal strings, dates and timestamps of a
    column are one object (:func:`~etl_dataflows.types.shared_python_values`): the rows are an
    executor's state, millions of them at scale."""
    columns = table.image_columns()
    missing = [n for n in columns if n not in data.column_names]
    if missing:
        raise ValueError(f"state image of {table.name!r} lacks columns {missing}")
    names = list(columns)
    values = [shared_python_values(data.column(n), columns[n]) for n in names]
    return [dict(zip(names, row, strict=True)) for row in zip(*values, strict=True)]


@dataclass
class StateImage:
    """All state of a dataflow: one image table per state table plus sequence values."""

    tables: dict[str, pa.Table] = field(default_factory=dict)
    sequences: dict[str, int] = field(default_factory=dict)

    @classmethod
    def empty(cls, tables: Mapping[str, StateTable]) -> StateImage:
        return cls({name: rows_to_table(t, []) for name, t in tables.items()}, {})

    def rows(self, table: StateTable, order_by: Sequence[str] = ()) -> list[dict[str, Any]]:
        """``table``'s rows as dicts of engine Python values, in the image's order or, with
        ``order_by``, sorted by those columns (ascending; sorted in Arrow, before conversion)."""
        data = self.tables.get(table.name)
        if data is None:
            return []
        if order_by and data.num_rows > 1:
            data = data.sort_by([(name, "ascending") for name in order_by])
        return table_to_rows(table, data)

    def equals(self, other: StateImage) -> bool:
        if set(self.tables) != set(other.tables) or self.sequences != other.sequences:
            return False
        return all(self.tables[n].equals(other.tables[n]) for n in self.tables)
