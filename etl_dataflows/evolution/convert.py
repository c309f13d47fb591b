"""Rows of a state table's old image turned into rows of its new image: the one conversion every
store applies in an upgrade (staging's folded rows and delta segments, each warehouse's full and
delta tables, the oracle in tests), so they all agree row for row.

A :class:`RowConversion` for one table, given the stored :class:`~etl_dataflows.evolution.shape.
TableShape` and the new declaration, builds each new image column from, in order:

1. the declared migration function (:meth:`~etl_dataflows.dataflow.Dataflow.migrate`), when the
   table has one and the plan needs it: it gets the old rows and returns the new ones whole;
2. the old column of the same name, or the one a declared rename maps to it, cast when its type
   was widened;
3. for a column the old image lacks: its fill expression evaluated over the row's new columns,
   else its default, else null.

Columns other than the image (``batch_id`` and ``op`` of a delta log) pass through unchanged, in
front.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa

from etl_dataflows.dataflow import CompiledDataflow, MigrateFn
from etl_dataflows.evolution.shape import WIDENINGS, DataflowShape, TableShape
from etl_dataflows.expressions import Expr
from etl_dataflows.state import StateImage, image_schema, rows_to_table
from etl_dataflows.tables import StateTable
from etl_dataflows.types import ColumnType, arrow_array, arrow_type
from etl_dataflows.vectorized import EventColumns, evaluate


class ConversionError(Exception):
    """A conversion cannot produce the new rows (a fill failed, a migration function returned
    the wrong columns); names the table and what to fix."""


class RowConversion:
    """See the module docstring."""

    def __init__(
        self,
        old: TableShape,
        new: StateTable,
        *,
        renames: Mapping[str, str] | None = None,
        migrate: MigrateFn | None = None,
    ) -> None:
        self.old = old
        self.new = new
        self.schema = image_schema(new)
        renames = dict(renames or {})
        self._source = {
            column: next(
                (o for o, n in renames.items() if n == column and o in old.columns), column
            )
            for column in new.image_columns()
        }
        self._migrate = migrate if migrate is not None and self._needs_migration() else None

    def _needs_migration(self) -> bool:
        """Whether the change is one only the migration function can make."""
        old, new = self.old, self.new
        if old.kind != new.kind or old.row_id != new.row_id() or old.key != dict(new.key):
            return True
        sources = set(self._source.values())
        if any(c not in sources for c in old.columns):
            return True  # a column dropped
        values = {n for n, _ in new.columns}
        for column, kind in new.image_columns().items():
            source = self._source[column]
            if source not in old.columns and column not in values:
                return True  # a generated column added
            if (
                source in old.columns
                and old.columns[source] != kind
                and (old.columns[source], kind) not in WIDENINGS
            ):
                return True
        return False

    @property
    def added_columns(self) -> list[str] | None:
        """The columns the new image adds when that is the whole change (each a value column,
        the others kept by name and type, no migration function); None otherwise."""
        if self._migrate is not None or any(s != c for c, s in self._source.items()):
            return None
        new = self.new.image_columns()
        if any(c not in new or new[c] != t for c, t in self.old.columns.items()):
            return None
        return [c for c in new if c not in self.old.columns]

    @property
    def identity(self) -> bool:
        """True when the conversion changes nothing (the image is the same)."""
        return (
            self._migrate is None
            and dict(self.old.columns) == dict(self.new.image_columns())
            and all(s == c for c, s in self._source.items())
        )

    def convert(self, rows: pa.Table, *, keep: Sequence[str] = ()) -> pa.Table:
        """``rows`` (the old image's columns, after the ``keep`` columns) in the new image, the
        ``keep`` columns first and unchanged."""
        kept = [rows.column(k) for k in keep]
        kept_fields = [rows.schema.field(k) for k in keep]
        if self._migrate is not None:
            image = self._migrated(rows.drop_columns(list(keep)) if keep else rows)
        else:
            image = self._by_column(rows)
        if not keep:
            return image
        return pa.Table.from_arrays(
            [*kept, *image.columns], schema=pa.schema([*kept_fields, *self.schema])
        )

    def _migrated(self, rows: pa.Table) -> pa.Table:
        name = self.new.name
        assert self._migrate is not None
        try:
            out = self._migrate(rows)
        except Exception as exc:
            raise ConversionError(
                f"the migration function of {name!r} failed: {type(exc).__name__}: {exc}"
            ) from exc
        if not isinstance(out, pa.Table):
            raise ConversionError(
                f"the migration function of {name!r} returned {type(out).__name__}, not a "
                "pyarrow.Table"
            )
        missing = [f.name for f in self.schema if f.name not in out.column_names]
        if missing:
            raise ConversionError(
                f"the migration function of {name!r} returned rows without {missing}; it must "
                f"return the new image's columns {self.schema.names}"
            )
        try:
            return pa.Table.from_arrays(
                [out.column(f.name).cast(f.type) for f in self.schema], schema=self.schema
            )
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise ConversionError(
                f"the migration function of {name!r} returned a column of the wrong type: {exc}"
            ) from exc

    def _by_column(self, rows: pa.Table) -> pa.Table:
        n = rows.num_rows
        columns: dict[str, pa.ChunkedArray | pa.Array] = {}
        pending: list[str] = []
        for field in self.schema:
            source = self._source[field.name]
            if source in self.old.columns:
                columns[field.name] = rows.column(source).cast(field.type)
            else:
                pending.append(field.name)
        types = self.new.image_columns()
        for column in pending:
            columns[column] = self._fill(column, types[column], columns, n)
        return pa.Table.from_arrays([columns[f.name] for f in self.schema], schema=self.schema)

    def _fill(
        self,
        column: str,
        kind: ColumnType,
        present: Mapping[str, pa.ChunkedArray | pa.Array],
        n: int,
    ) -> pa.Array:
        expr = self.new.fills.get(column)
        if isinstance(expr, Expr):
            types = self.new.image_columns()
            table = pa.table({c: present[c] for c in present})
            events = EventColumns(table, {c: types[c] for c in present})
            try:
                values, valid = evaluate(expr, events, n)
            except Exception as exc:
                raise ConversionError(
                    f"the fill of {self.new.name}.{column} failed: {type(exc).__name__}: {exc}"
                ) from exc
            return _to_arrow(values, valid, kind)
        default = self.new.defaults.get(column)
        if default is None:
            return pa.nulls(n, arrow_type(kind))
        one = arrow_array([default], kind)
        repeated: pa.Array = pa.repeat(one[0], n)
        return repeated


def _to_arrow(values: np.ndarray, valid: np.ndarray, kind: ColumnType) -> pa.Array:
    """A ``(values, valid)`` column of the vectorized evaluator as Arrow of ``kind``."""
    mask = ~np.asarray(valid, dtype=bool)
    if kind == "string":
        return pa.array(list(values), type=pa.string(), mask=mask)
    if kind == "bool":
        return pa.array(np.asarray(values, dtype=bool), type=pa.bool_(), mask=mask)
    if kind == "float64":
        return pa.array(np.asarray(values, dtype=np.float64), type=pa.float64(), mask=mask)
    ints = pa.array(np.asarray(values, dtype=np.int64), type=pa.int64(), mask=mask)
    if kind == "timestamp":
        return ints.cast(pa.timestamp("us"))
    if kind == "date":
        return ints.cast(pa.int32()).cast(pa.date32())
    return ints


def convert_image(image: StateImage, old: DataflowShape, new: CompiledDataflow) -> StateImage:
    """An engine state of the dataflow ``old`` describes, in ``new``'s tables: what every store
    holds after an upgrade (the oracle of the upgrade tests). Added tables start empty, removed
    ones are dropped, sequences are kept."""
    tables: dict[str, pa.Table] = {}
    for name, table in new.tables.items():
        if name not in old.tables or name not in image.tables:
            tables[name] = rows_to_table(table, [])
            continue
        conversion = RowConversion(
            old.tables[name], table, renames=new.renames.get(name), migrate=new.migrations.get(name)
        )
        rows = conversion.convert(image.tables[name])
        order = [(c, "ascending") for c in table.row_id()]
        tables[name] = rows.sort_by(order) if rows.num_rows else rows
    return StateImage(tables, dict(image.sequences))
