"""Running the stateless steps of a batch; shared by every executor so they differ only in how
they run transactions.

Between steps a batch is an Arrow table with the step's columns plus the meta columns ``_ts``,
``_pos`` and ``_src``. User functions see ``_ts`` and ``_pos`` but cannot change them: the engine
re-attaches each row's meta columns after the function. When a function (or an expression) fails
on a batch, the step is retried one row at a time and only the failing rows go to the dead letters
(with the exception as the reason); the others go on.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from etl_dataflows.batch import DEAD_LETTER_SCHEMA
from etl_dataflows.dataflow import (
    CompiledDataflow,
    FilterStep,
    FlatMapStep,
    MapStep,
    MergeStep,
    OutputSchema,
    ValidateStep,
)
from etl_dataflows.exceptions import BatchInputError, StepFailed
from etl_dataflows.expressions import Expr, ExpressionError, Scope, compile_scalar
from etl_dataflows.types import (
    META_COLUMNS,
    META_TYPES,
    POS,
    SRC,
    TS,
    ColumnType,
    arrow_array,
    arrow_type,
    python_values,
)
from etl_dataflows.vectorized import EventColumns, evaluate


class DeadLetters:
    """Collects the dead-letter rows of one batch; :meth:`table` lists them step by step in the
    dataflow's order (``steps``), each step's rows in the order they were added."""

    def __init__(self, sources: Sequence[str], steps: Sequence[str] = ()) -> None:
        self._sources = sources
        self._rank = {step: i for i, step in enumerate(steps)}
        self._rows: list[tuple[str, str, int | None, int | None, str, str]] = []

    def add(self, step: str, table: pa.Table, index: int, reason: str) -> None:
        """Dead-letter row ``index`` of ``table`` (which carries the meta columns)."""
        row = table.slice(index, 1).to_pylist()[0]
        self.add_row(step, row, reason)

    def add_row(self, step: str, row: Mapping[str, Any], reason: str) -> None:
        src = row.get(SRC)
        source = (
            self._sources[src] if isinstance(src, int) and 0 <= src < len(self._sources) else ""
        )
        payload = {k: v for k, v in row.items() if k not in META_COLUMNS}
        self._rows.append(
            (step, source, row.get(POS), row.get(TS), reason, json.dumps(payload, default=str))
        )

    def __len__(self) -> int:
        return len(self._rows)

    def count_for(self, step: str) -> int:
        return sum(1 for r in self._rows if r[0] == step)

    def table(self) -> pa.Table:
        if not self._rows:
            return _NO_DEAD_LETTERS
        rows = sorted(self._rows, key=lambda r: self._rank.get(r[0], len(self._rank)))
        columns = list(zip(*rows, strict=True)) if rows else [()] * 6
        return pa.Table.from_arrays(
            [
                pa.array(list(c), type=f.type)
                for c, f in zip(columns, DEAD_LETTER_SCHEMA, strict=True)
            ],
            schema=DEAD_LETTER_SCHEMA,
        )


def describe_error(exc: BaseException) -> str:
    """A one-line reason for an exception raised while processing a row."""
    if isinstance(exc, ExpressionError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def event_rows(table: pa.Table, schema: Mapping[str, ColumnType | None]) -> list[dict[str, Any]]:
    """Rows as dicts of engine Python values (timestamps and dates as integers)."""
    columns: dict[str, list[Any]] = {}
    for name in table.column_names:
        kind = META_TYPES.get(name) or schema.get(name)
        column = table.column(name)
        columns[name] = python_values(column, kind) if kind else column.to_pylist()
    names = list(columns)
    return [dict(zip(names, values, strict=True)) for values in zip(*columns.values(), strict=True)]


def _meta(table: pa.Table) -> list[tuple[str, pa.ChunkedArray]]:
    return [(name, table.column(name)) for name in META_COLUMNS]


def _with_meta(
    data: pa.Table, meta_source: pa.Table, indices: np.ndarray | None = None
) -> pa.Table:
    source = (
        meta_source if indices is None else meta_source.take(pa.array(indices, type=pa.int64()))
    )
    for name, column in _meta(source):
        data = data.append_column(name, column)
    return data


#: The dead letters of a batch that has none (Arrow tables never change: one serves every batch).
_NO_DEAD_LETTERS = DEAD_LETTER_SCHEMA.empty_table()


def _as_type(column: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    """``column`` cast to ``target``; as it is when it has that type already (a cast to the same
    type is still a call into Arrow, ~10 us a column a batch). Raises what Arrow's cast does."""
    return column if column.type == target else column.cast(target)


#: Empty batch tables by their columns' names and types (Arrow tables never change: one serves
#: every batch of a step that emits nothing).
_EMPTY_EVENTS: dict[tuple[tuple[str, ColumnType | None], ...], pa.Table] = {}


def empty_events(schema: OutputSchema) -> pa.Table:
    """An empty batch table with ``schema`` and the meta columns."""
    key = tuple(schema.items())
    table = _EMPTY_EVENTS.get(key)
    if table is None:
        fields = [(n, arrow_type(t) if t else pa.null()) for n, t in schema.items()]
        fields += [(n, pa.int64()) for n in META_COLUMNS]
        table = _EMPTY_EVENTS.setdefault(key, pa.schema(fields).empty_table())
    return table


def prepare_source(
    flow: CompiledDataflow, source: str, events: pa.Table, dead: DeadLetters
) -> pa.Table:
    """Check and cast a source's events to its declared schema and add ``_src``.

    Rows whose values cannot be converted, or that lack ``_ts``/``_pos``, are dead-lettered.
    Raises :class:`BatchInputError` when required columns are missing altogether.
    """
    schema = flow.schemas[source]
    present = set(events.column_names)
    missing = [n for n in (*schema, TS, POS) if n not in present]
    if missing:
        raise BatchInputError(f"events for source {source!r} lack columns {missing}")
    src = flow.source_index(source)
    events = events.select([*schema, TS, POS])
    events = events.append_column(SRC, pa.array(np.full(events.num_rows, src, dtype=np.int64)))
    bad: dict[int, str] = {}
    arrays = []
    for name, kind in [*schema.items(), (TS, "int64"), (POS, "int64"), (SRC, "int64")]:
        assert kind is not None
        column = events.column(name)
        target = arrow_type(kind)
        try:
            arrays.append(_as_type(column, target))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            values = column.to_pylist()
            cast_values = []
            for i, value in enumerate(values):
                try:
                    cast_values.append(pa.array([value]).cast(target)[0].as_py())
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                    bad.setdefault(i, f"column {name!r}: cannot convert {value!r} to {kind}")
                    cast_values.append(None)
            arrays.append(pa.array(cast_values, type=target))
    table = pa.Table.from_arrays(arrays, names=[*schema, TS, POS, SRC])
    for name in (TS, POS):
        if not table.column(name).null_count:
            continue
        nulls = np.flatnonzero(
            ~np.asarray(table.column(name).is_valid().to_numpy(zero_copy_only=False))
        )
        for i in nulls.tolist():
            bad.setdefault(int(i), f"event has no {name}")
    if not bad:
        return table
    for i in sorted(bad):
        dead.add_row(source, {**events.slice(i, 1).to_pylist()[0], SRC: src}, bad[i])
    keep = np.array([i not in bad for i in range(table.num_rows)], dtype=bool)
    return table.filter(pa.array(keep))


def _conform(
    step_id: str, data: Any, schema: Mapping[str, ColumnType | None], rows: int | None
) -> pa.Table:
    if not isinstance(data, pa.Table):
        raise StepFailed(
            f"function returned {type(data).__name__}, expected a pyarrow.Table", step=step_id
        )
    if rows is not None and data.num_rows != rows:
        raise StepFailed(
            f"function returned {data.num_rows} rows for {rows}; use flat_map or filter to change "
            "the number of rows",
            step=step_id,
        )
    arrays = []
    names = set(data.column_names)
    for name, kind in schema.items():
        if name not in names:
            raise StepFailed(f"function output lacks column {name!r}", step=step_id)
        column = data.column(name)
        if kind is not None:
            try:
                column = _as_type(column, arrow_type(kind))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                raise StepFailed(
                    f"output column {name!r} is not {kind}: {exc}", step=step_id
                ) from exc
        arrays.append(column)
    return pa.Table.from_arrays(arrays, names=list(schema))


def _user_view(table: pa.Table) -> pa.Table:
    return table.drop_columns([SRC])


def run_map(step: MapStep, table: pa.Table, schema: OutputSchema, dead: DeadLetters) -> pa.Table:
    """Apply a map step; failing rows are dead-lettered."""
    if table.num_rows == 0:
        return empty_events(schema)
    if step.per_row:
        rows = event_rows(_user_view(table), schema)
        kept, outputs = [], []
        for i, row in enumerate(rows):
            try:
                outputs.append(step.fn(row))
                kept.append(i)
            except Exception as exc:
                dead.add(step.id, table, i, describe_error(exc))
        data = pa.Table.from_pylist(outputs) if outputs else empty_events(schema)
        out = _conform(step.id, data, schema, len(kept))
        return _with_meta(out, table, np.array(kept, dtype=np.int64))
    try:
        out = _conform(step.id, step.fn(_user_view(table)), schema, table.num_rows)
        return _with_meta(out, table)
    except StepFailed:
        raise
    except Exception:
        pieces, kept = [], []
        for i in range(table.num_rows):
            try:
                piece = step.fn(_user_view(table.slice(i, 1)))
            except Exception as exc:
                dead.add(step.id, table, i, describe_error(exc))
                continue
            pieces.append(_conform(step.id, piece, schema, 1))
            kept.append(i)
        if not pieces:
            return empty_events(schema)
        return _with_meta(pa.concat_tables(pieces), table, np.array(kept, dtype=np.int64))


def _columns(table: pa.Table, schema: OutputSchema) -> EventColumns:
    return EventColumns(table, {**schema, **META_TYPES})


def row_mask(
    step_id: str,
    check: Expr | Callable[[pa.Table], Any],
    table: pa.Table,
    schema: OutputSchema,
) -> tuple[np.ndarray, dict[int, str]]:
    """Where ``check`` is true, and the errors of rows for which it could not be computed."""
    n = table.num_rows
    try:
        if isinstance(check, Expr):
            values, valid = evaluate(check, _columns(table, schema), n)
            return np.asarray(values, dtype=bool) & valid, {}
        mask = check(_user_view(table))
        if isinstance(mask, pa.ChunkedArray | pa.Array):
            mask = mask.fill_null(False).to_numpy(zero_copy_only=False)
        result = np.asarray(mask, dtype=bool)
        if result.shape != (n,):
            raise StepFailed(f"check returned {result.shape} values for {n} rows", step=step_id)
        return result, {}
    except StepFailed:
        raise
    except Exception:
        pass
    mask = np.zeros(n, dtype=bool)
    errors: dict[int, str] = {}
    if isinstance(check, Expr):
        fn = compile_scalar(check)
        for i, row in enumerate(event_rows(table, schema)):
            try:
                mask[i] = fn(Scope(row, None, [])) is True
            except Exception as exc:
                errors[i] = describe_error(exc)
        return mask, errors
    for i in range(n):
        try:
            value = check(_user_view(table.slice(i, 1)))
            if isinstance(value, pa.ChunkedArray | pa.Array):
                value = value.fill_null(False).to_numpy(zero_copy_only=False)
            mask[i] = bool(np.asarray(value, dtype=bool).reshape(-1)[0])
        except Exception as exc:
            errors[i] = describe_error(exc)
    return mask, errors


def run_filter(
    step: FilterStep, table: pa.Table, schema: OutputSchema, dead: DeadLetters
) -> pa.Table:
    """Keep rows where the predicate is true; rows where it fails to evaluate are dead-lettered."""
    if table.num_rows == 0:
        return table
    mask, errors = row_mask(step.id, step.predicate, table, schema)
    for i, reason in sorted(errors.items()):
        dead.add(step.id, table, i, reason)
    kept = int(np.count_nonzero(mask))
    if kept == table.num_rows:
        return table
    if kept == 0:
        return table.slice(0, 0)
    return table.filter(pa.array(mask))


def run_validate(
    step: ValidateStep, table: pa.Table, schema: OutputSchema, dead: DeadLetters
) -> pa.Table:
    """Route rows failing any check to the dead letters with every failed check's reason."""
    n = table.num_rows
    if n == 0:
        return table
    reasons: list[list[str]] = [[] for _ in range(n)]
    for reason, check in step.checks:
        mask, errors = row_mask(step.id, check, table, schema)
        for i in np.flatnonzero(~mask).tolist():
            reasons[i].append(f"{reason} (error: {errors[i]})" if i in errors else reason)
    keep = np.array([not r for r in reasons], dtype=bool)
    for i in np.flatnonzero(~keep).tolist():
        dead.add(step.id, table, i, "; ".join(reasons[i]))
    return table.filter(pa.array(keep))


def run_flat_map(
    step: FlatMapStep, table: pa.Table, schema: OutputSchema, dead: DeadLetters
) -> pa.Table:
    """Apply a flat_map step; output rows inherit their parent's meta columns."""
    if table.num_rows == 0:
        return empty_events(schema)
    if step.per_row:
        outputs: list[dict[str, Any]] = []
        parents: list[int] = []
        for i, row in enumerate(event_rows(_user_view(table), schema)):
            try:
                produced = list(step.fn(row))
            except Exception as exc:
                dead.add(step.id, table, i, describe_error(exc))
                continue
            outputs.extend(produced)
            parents.extend([i] * len(produced))
        data = pa.Table.from_pylist(outputs) if outputs else empty_events(schema)
        out = _conform(step.id, data, schema, len(outputs))
        return _with_meta(out, table, np.array(parents, dtype=np.int64))

    def one(piece: pa.Table) -> tuple[pa.Table, np.ndarray]:
        result = step.fn(_user_view(piece))
        if not isinstance(result, pa.Table) or "_parent" not in result.column_names:
            raise StepFailed("a columnar flat_map must return a table with '_parent'", step=step.id)
        parent = np.asarray(result.column("_parent").to_numpy(zero_copy_only=False), dtype=np.int64)
        if parent.size and (parent.min() < 0 or parent.max() >= piece.num_rows):
            raise StepFailed("'_parent' points outside the input rows", step=step.id)
        return _conform(step.id, result, schema, None), parent

    try:
        out, parent = one(table)
        return _with_meta(out, table, parent)
    except StepFailed:
        raise
    except Exception:
        pieces, parents_all = [], []
        for i in range(table.num_rows):
            try:
                out, parent = one(table.slice(i, 1))
            except StepFailed:
                raise
            except Exception as exc:
                dead.add(step.id, table, i, describe_error(exc))
                continue
            pieces.append(out)
            parents_all.append(parent + i)
        if not pieces:
            return empty_events(schema)
        return _with_meta(pa.concat_tables(pieces), table, np.concatenate(parents_all))


def run_merge(step: MergeStep, tables: Sequence[pa.Table], schema: OutputSchema) -> pa.Table:
    """Union the inputs by column name in the order of ``step.inputs``."""
    pieces = []
    for table in tables:
        arrays = []
        names = set(table.column_names)
        for name, kind in schema.items():
            target = arrow_type(kind) if kind else pa.null()
            if name in names:
                arrays.append(_as_type(table.column(name), target))
            else:
                arrays.append(pa.nulls(table.num_rows, type=target))
        for name in META_COLUMNS:
            arrays.append(table.column(name))
        pieces.append(pa.Table.from_arrays(arrays, names=[*schema, *META_COLUMNS]))
    return pa.concat_tables(pieces)


def build_output(
    columns: Mapping[str, list[Any]],
    schema: OutputSchema,
    meta: Mapping[str, list[int]],
) -> pa.Table:
    """An output table from per-column engine Python values plus meta columns."""
    arrays = [arrow_array(columns[name], schema[name]) for name in schema]
    arrays += [pa.array(meta[name], type=pa.int64()) for name in META_COLUMNS]
    return pa.Table.from_arrays(arrays, names=[*schema, *META_COLUMNS])
