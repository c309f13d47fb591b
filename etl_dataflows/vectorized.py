"""Column-at-a-time evaluation of expressions over numpy arrays.

A column is a pair ``(values, valid)``: a numpy array and a boolean mask that is False where the
value is null (the value slot then holds a filler). Results equal the scalar reference semantics of
:mod:`etl_dataflows.expressions` row by row, with one difference callers must handle: both branches
of ``if_else`` are evaluated, so an error (overflow, an exception from a Python function) may be
raised for a row whose branch the scalar evaluation would not take. Callers that see
:class:`~etl_dataflows.expressions.ExpressionError` or a user exception fall back to the scalar
evaluation row by row, which decides. A Python function's results that are not all plain values
of its declared type raise :class:`~etl_dataflows.expressions.ExpressionError` too (never a
column numpy converted, which would truncate ``1.5`` to ``1``): the row-by-row evaluation then
fails exactly the rows whose value is wrong.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from etl_dataflows.expressions import (
    INT64_MAX,
    INT64_MIN,
    BinOp,
    Call,
    Cast,
    Col,
    Expr,
    ExpressionError,
    ExpressionTypeError,
    Func,
    IfElse,
    IsIn,
    Lit,
    UnOp,
    UserFunctionError,
    busy_wait,
)
from etl_dataflows.types import MICROS_PER_DAY, ColumnType, coerce_value

Column = tuple[np.ndarray, np.ndarray]

_FILL: dict[str, Any] = {
    "int64": 0,
    "float64": 0.0,
    "bool": False,
    "string": "",
    "timestamp": 0,
    "date": 0,
}


def column_from_arrow(array: pa.Array | pa.ChunkedArray, column_type: ColumnType) -> Column:
    """An Arrow column as ``(values, valid)``; timestamps and dates become int64."""
    if isinstance(array, pa.ChunkedArray):
        array = array.chunk(0) if array.num_chunks == 1 else array.combine_chunks()
    if array.null_count:
        valid = np.asarray(array.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    else:  # (no bitmap to unpack)
        valid = np.ones(len(array), dtype=bool)
    if column_type == "timestamp":
        array = array.cast(pa.timestamp("us")).cast(pa.int64())
    elif column_type == "date":
        array = array.cast(pa.date32()).cast(pa.int32()).cast(pa.int64())
    elif column_type == "string" and pa.types.is_dictionary(array.type):
        array = array.cast(pa.string())
    filled = array.fill_null(_FILL[column_type]) if array.null_count else array
    if column_type == "string":
        values = np.asarray(filled.to_numpy(zero_copy_only=False), dtype=object)
    elif column_type == "bool":
        values = np.asarray(filled.to_numpy(zero_copy_only=False), dtype=bool)
    elif column_type == "float64":
        values = np.asarray(filled.to_numpy(zero_copy_only=False), dtype=np.float64)
    else:
        values = np.asarray(filled.to_numpy(zero_copy_only=False), dtype=np.int64)
    return values, valid


class EventColumns(Mapping[str, Column]):
    """The columns of an Arrow table as :data:`Column` pairs, converted on first use.

    Keeps the Arrow columns at hand so string comparisons with literals run in Arrow's compute
    kernels instead of over Python objects. :meth:`subset` gives the same columns on some rows,
    sharing the conversions already made."""

    def __init__(
        self,
        table: pa.Table,
        types: Mapping[str, ColumnType | None],
        *,
        parent: EventColumns | None = None,
        rows: np.ndarray | None = None,
    ) -> None:
        self._table: pa.Table | None = None if parent is not None else table
        present = set(table.column_names)
        self._types = {n: t for n, t in types.items() if t is not None and n in present}
        self._cache: dict[str, Column] = {}
        self._parent = parent
        self._rows = rows

    def subset(self, rows: np.ndarray) -> EventColumns:
        """These columns on ``rows`` (positions, in order): each column is converted once, on
        the whole table, and then indexed; the Arrow rows are taken only if something asks."""
        return EventColumns(self.table, self._types, parent=self, rows=rows)

    @property
    def table(self) -> pa.Table:
        """The Arrow table these columns are of (for a subset, its rows taken on first use)."""
        if self._table is None:
            assert self._parent is not None and self._rows is not None
            self._table = self._parent.table.take(pa.array(self._rows, type=pa.int64()))
        return self._table

    @property
    def num_rows(self) -> int:
        return len(self._rows) if self._rows is not None else self.table.num_rows

    def __getitem__(self, name: str) -> Column:
        column = self._cache.get(name)
        if column is None:
            if self._parent is not None and self._rows is not None:
                values, valid = self._parent[name]
                column = values[self._rows], valid[self._rows]
            else:
                column = column_from_arrow(self.table.column(name), self._types[name])
            self._cache[name] = column
        return column

    def __iter__(self) -> Iterator[str]:
        return iter(self._types)

    def __len__(self) -> int:
        return len(self._types)

    def arrow_string(self, expr: Expr) -> pa.ChunkedArray | None:
        """The Arrow column behind ``expr`` when it is a string column reference."""
        if isinstance(expr, Col) and self._types.get(expr.name) == "string":
            column: pa.ChunkedArray = self.table.column(expr.name)
            return column
        return None


_ARROW_COMPARE = {
    "==": "equal",
    "!=": "not_equal",
    "<": "less",
    "<=": "less_equal",
    ">": "greater",
    ">=": "greater_equal",
}


def _arrow_compare(expr: BinOp, columns: Mapping[str, Column]) -> Column | None:
    if not isinstance(columns, EventColumns):
        return None
    left, right = columns.arrow_string(expr.left), columns.arrow_string(expr.right)
    if left is not None and isinstance(expr.right, Lit) and isinstance(expr.right.value, str):
        result = getattr(pc, _ARROW_COMPARE[expr.op])(left, expr.right.value)
        valid = left.is_valid()
    elif right is not None and isinstance(expr.left, Lit) and isinstance(expr.left.value, str):
        result = getattr(pc, _ARROW_COMPARE[expr.op])(expr.left.value, right)
        valid = right.is_valid()
    else:
        return None
    values = np.asarray(result.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)
    return values, np.asarray(valid.to_numpy(zero_copy_only=False), dtype=bool)


def column_to_list(column: Column) -> list[Any]:
    """The column as Python scalars with ``None`` for nulls."""
    values, valid = column
    if valid.all():
        return values.tolist()  # type: ignore[no-any-return]
    return [v if ok else None for v, ok in zip(values.tolist(), valid.tolist(), strict=True)]


def _literal(value: Any, n: int) -> Column:
    if value is None:
        return np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
    if isinstance(value, str):
        values = np.empty(n, dtype=object)
        values[:] = value
    else:
        values = np.full(n, value)
    return values, np.ones(n, dtype=bool)


#: The Python types whose values :func:`~etl_dataflows.types.coerce_value` takes as they are, per
#: column type: a column of results of only these types (and ``None``) needs no check per value.
_PLAIN_TYPES: dict[str, frozenset[type]] = {
    "int64": frozenset({int}),
    "timestamp": frozenset({int}),
    "date": frozenset({int}),
    "float64": frozenset({float, int}),
    "bool": frozenset({bool}),
    "string": frozenset({str}),
}
#: The column type of an undeclared function's results, by their one Python type.
_INFERRED: dict[type, ColumnType] = {bool: "bool", int: "int64", float: "float64", str: "string"}


def _from_python(results: list[Any], returns: ColumnType | None) -> Column:
    """The results of a Python function as a column, with exactly the values the scalar
    evaluation gives row by row, or :class:`ExpressionError` if any row's result would not be
    the value the scalar evaluation gives: a value that is not of the declared type (a float or a
    bool for an ``int64``, ``2`` for a ``bool``, an int beyond int64), or, without ``returns``,
    results of mixed or unknown Python types. The caller then evaluates row by row, and each row
    fails or not on its own value, whatever the other rows hold."""
    present = set(map(type, results))
    present.discard(type(None))
    if returns is None:
        if len(present) > 1 or not present <= _INFERRED.keys():
            raise ExpressionError("function results of mixed types: evaluated row by row")
        kind: ColumnType = _INFERRED[next(iter(present))] if present else "string"
    else:
        kind = returns
        if not present <= _PLAIN_TYPES[kind]:
            results = [_checked(r, kind) for r in results]
    valid = np.fromiter((r is not None for r in results), dtype=bool, count=len(results))
    fill = _FILL[kind]
    filled = results if valid.all() else [fill if r is None else r for r in results]
    if kind == "string":
        values = np.empty(len(filled), dtype=object)
        values[:] = filled
        return values, valid
    dtype = {"bool": bool, "float64": np.float64}.get(kind, np.int64)
    try:
        return np.asarray(filled, dtype=dtype), valid
    except (TypeError, ValueError, OverflowError) as exc:  # an int beyond int64 (or float64)
        raise ExpressionError(f"function returned a value that is not {kind}: {exc}") from exc


def _checked(value: Any, kind: ColumnType) -> Any:
    """``value`` as the declared ``kind`` (:func:`~etl_dataflows.types.coerce_value`), or
    :class:`ExpressionError`."""
    try:
        return coerce_value(value, kind)
    except (TypeError, ValueError) as exc:
        raise ExpressionError(f"function returned {value!r}: {exc}") from exc


def _check_overflow(mask: np.ndarray) -> None:
    if mask.any():
        raise ExpressionError("integer overflow: result leaves the int64 range")


def _is_int(values: np.ndarray) -> bool:
    return values.dtype.kind in "iu"


def _arith(op: str, a: Column, b: Column) -> Column:
    (x, vx), (y, vy) = a, b
    valid = vx & vy
    with np.errstate(all="ignore"):
        if op == "/":
            xf, yf = x.astype(np.float64), y.astype(np.float64)
            valid = valid & (yf != 0)
            return np.where(valid, xf / np.where(yf == 0, 1.0, yf), 0.0), valid
        if op in ("//", "%"):
            valid = valid & (y != 0)
            safe = np.where(y == 0, 1, y).astype(y.dtype)
            if _is_int(x) and _is_int(safe):
                # INT64_MIN // -1 is the one quotient that overflows.
                if op == "//":
                    _check_overflow(valid & (x == INT64_MIN) & (safe == -1))
                safe = np.where(valid, safe, 1).astype(safe.dtype)
            result = np.floor_divide(x, safe) if op == "//" else np.remainder(x, safe)
            return result, valid
        if _is_int(x) and _is_int(y):
            x64, y64 = x.astype(np.int64), y.astype(np.int64)
            if op == "+":
                r = x64 + y64
                _check_overflow(valid & (((x64 ^ r) & (y64 ^ r)) < 0))
            elif op == "-":
                r = x64 - y64
                _check_overflow(valid & (((x64 ^ y64) & (x64 ^ r)) < 0))
            else:
                r = x64 * y64
                approx = np.abs(x64.astype(np.float64) * y64.astype(np.float64))
                for i in np.flatnonzero(valid & (approx >= 2.0**62)):
                    exact = int(x64[i]) * int(y64[i])
                    if exact < INT64_MIN or exact > INT64_MAX:
                        _check_overflow(np.ones(1, dtype=bool))
            return r, valid
        xf, yf = x.astype(np.float64), y.astype(np.float64)
        if op == "+":
            return xf + yf, valid
        if op == "-":
            return xf - yf, valid
        return xf * yf, valid


_COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "==": np.equal,
    "!=": np.not_equal,
    "<": np.less,
    "<=": np.less_equal,
    ">": np.greater,
    ">=": np.greater_equal,
}


def evaluate(expr: Expr, columns: Mapping[str, Column], n: int) -> Column:
    """Evaluate ``expr`` over ``n`` rows whose event columns are ``columns``.

    Only event-level expressions are allowed here (no ``old`` or op references); raises
    :class:`ExpressionError` on overflow and lets exceptions of Python functions propagate.
    """
    if isinstance(expr, Col):
        return columns[expr.name]
    if isinstance(expr, Lit):
        return _literal(expr.value, n)
    if isinstance(expr, BinOp):
        if expr.op in _COMPARE:
            fast = _arrow_compare(expr, columns)
            if fast is not None:
                return fast
        a = evaluate(expr.left, columns, n)
        b = evaluate(expr.right, columns, n)
        if expr.op in ("+", "-", "*", "/", "//", "%"):
            return _arith(expr.op, a, b)
        if expr.op in _COMPARE:
            with np.errstate(all="ignore"):
                values = np.asarray(_COMPARE[expr.op](a[0], b[0]), dtype=bool)
            return values, a[1] & b[1]
        (x, vx), (y, vy) = a, b
        x_true, y_true = vx & x.astype(bool), vy & y.astype(bool)
        x_false, y_false = vx & ~x.astype(bool), vy & ~y.astype(bool)
        if expr.op == "&":
            true, false = x_true & y_true, x_false | y_false
        else:
            true, false = x_true | y_true, x_false & y_false
        return true, true | false
    if isinstance(expr, UnOp):
        x, vx = evaluate(expr.operand, columns, n)
        if expr.op == "is_null":
            return ~vx, np.ones(n, dtype=bool)
        if expr.op == "not":
            return ~x.astype(bool), vx
        if _is_int(x):
            _check_overflow(vx & (x == INT64_MIN))
        return (-x if expr.op == "neg" else np.abs(x)), vx
    if isinstance(expr, IfElse):
        c, vc = evaluate(expr.cond, columns, n)
        t, vt = evaluate(expr.then, columns, n)
        o, vo = evaluate(expr.otherwise, columns, n)
        take = vc & c.astype(bool)
        return np.where(take, t, o), np.where(take, vt, vo)
    if isinstance(expr, Func):
        return _func(expr, columns, n)
    if isinstance(expr, IsIn):
        arrow = columns.arrow_string(expr.operand) if isinstance(columns, EventColumns) else None
        if arrow is not None and all(isinstance(v, str) for v in expr.values):
            found = pc.is_in(arrow, value_set=pa.array(list(expr.values), type=pa.string()))
            return (
                np.asarray(found.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool),
                np.asarray(arrow.is_valid().to_numpy(zero_copy_only=False), dtype=bool),
            )
        x, vx = evaluate(expr.operand, columns, n)
        members = set(expr.values)
        values = np.fromiter((v in members for v in x.tolist()), dtype=bool, count=n)
        return values, vx
    if isinstance(expr, Cast):
        return _cast(evaluate(expr.operand, columns, n), expr.to)
    if isinstance(expr, Call):
        args = [column_to_list(evaluate(a, columns, n)) for a in expr.args]
        name = getattr(expr.fn, "__name__", "function")
        try:
            # every argument column has n values: map runs the calls without a Python loop
            results = list(map(expr.fn, *args)) if args else [expr.fn() for _ in range(n)]
        except Exception as exc:
            raise UserFunctionError(name, exc) from exc
        return _from_python(results, expr.returns)
    raise ExpressionTypeError(f"{type(expr).__name__} cannot be evaluated over event columns alone")


def _func(expr: Func, columns: Mapping[str, Column], n: int) -> Column:
    args = [evaluate(a, columns, n) for a in expr.args]
    if expr.name == "coalesce":
        values, valid = args[0][0].copy(), args[0][1].copy()
        if any(a[0].dtype.kind == "f" for a in args):
            values = values.astype(np.float64)
        for v, ok in args[1:]:
            take = ~valid & ok
            values = np.where(take, v, values)
            valid = valid | ok
        return values, valid
    if expr.name == "cost":
        nanoseconds = expr.args[1].value  # type: ignore[attr-defined]
        for _ in range(n):
            busy_wait(nanoseconds)
        return args[0]
    if expr.name == "date_of":
        x, vx = args[0]
        return np.floor_divide(x.astype(np.int64), MICROS_PER_DAY), vx
    valid = np.logical_and.reduce([ok for _, ok in args]) if args else np.ones(n, dtype=bool)
    if expr.name == "concat":
        rows = zip(*[v.tolist() for v, _ in args], strict=True)
        joined = np.empty(n, dtype=object)
        joined[:] = ["".join(r) for r in rows]
        return joined, valid
    reduce = np.minimum if expr.name == "least" else np.maximum
    values = args[0][0]
    for v, _ in args[1:]:
        values = reduce(values, v)
    return values, valid


def _cast(column: Column, to: ColumnType) -> Column:
    x, vx = column
    if to == "float64":
        return x.astype(np.float64), vx
    if to == "int64":
        if x.dtype.kind == "f":
            bad = vx & (~np.isfinite(x) | (np.abs(x) >= 2.0**63))
            _check_overflow(bad)
            return np.trunc(np.where(vx, x, 0.0)).astype(np.int64), vx
        if x.dtype == object:
            if vx.any():
                raise ExpressionError("cannot cast string to int64")
            return np.zeros(len(x), dtype=np.int64), vx
        return x.astype(np.int64), vx
    out = np.empty(len(x), dtype=object)
    if x.dtype == bool:
        out[:] = ["true" if v else "false" for v in x.tolist()]
    else:
        out[:] = [str(v) for v in x.tolist()]
    return out, vx
