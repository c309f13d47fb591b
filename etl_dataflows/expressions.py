"""Expressions: the vectorizable language of conditions, keys, values and outputs.

An expression is a small tree built with Python operators::

    (col("amount") > 0) & ~col("note").is_null()
    if_else(old("balance") >= col("amount"), old("balance") - col("amount"), old("balance"))

Leaves are event columns (:func:`col`), literals (:func:`lit`), the current row of a state
operation before it changes (:func:`old`), and values produced by earlier operations of the same
transaction (``handle["column"]``, ``handle.before("column")``, ``handle.found``). A plain Python
function is the general fallback (:func:`udf`); everything else can be evaluated over whole columns.

Semantics (every executor must reproduce them exactly; the scalar evaluation here is the reference):

* ``None`` is null. Arithmetic, comparisons and functions of a null are null, except
  ``is_null``, ``coalesce``, ``if_else`` (a null condition takes the ``otherwise`` branch) and the
  Kleene logic of ``&``/``|`` (``False & null`` is ``False``, ``True | null`` is ``True``).
* ``int64`` arithmetic that leaves the int64 range raises :class:`ExpressionError` (the transaction
  aborts). ``/`` is true division (``float64``); ``//`` and ``%`` follow Python's floor rules;
  any division by zero is null.
* ``timestamp`` and ``date`` values are integers (µs and days since the epoch) and mix with int64.
* A condition is satisfied only when it is ``True``; null fails.
"""

from __future__ import annotations

import math
import operator
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from etl_dataflows.types import MICROS_PER_DAY, ColumnType, coerce_value

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

RefVersion = Literal["after", "before"]


class ExpressionError(Exception):
    """A value could not be computed for one row: integer overflow, a bad cast, a value of the
    wrong type, or an exception raised by a user function. The transaction (or, in a stateless
    step, the row) fails; the batch goes on."""


class UserFunctionError(ExpressionError):
    """A user's Python function raised; ``__cause__`` is the original exception."""

    def __init__(self, name: str, exc: BaseException) -> None:
        self.function = name
        super().__init__(f"{name} raised {type(exc).__name__}: {exc}")


class ExpressionTypeError(TypeError):
    """An expression combines types the engine cannot combine; raised at definition time."""


class Expr:
    """Base of every expression node. Build nodes with the operators and helper functions."""

    __slots__ = ()

    # arithmetic
    def __add__(self, other: object) -> Expr:
        return BinOp("+", self, wrap(other))

    def __radd__(self, other: object) -> Expr:
        return BinOp("+", wrap(other), self)

    def __sub__(self, other: object) -> Expr:
        return BinOp("-", self, wrap(other))

    def __rsub__(self, other: object) -> Expr:
        return BinOp("-", wrap(other), self)

    def __mul__(self, other: object) -> Expr:
        return BinOp("*", self, wrap(other))

    def __rmul__(self, other: object) -> Expr:
        return BinOp("*", wrap(other), self)

    def __truediv__(self, other: object) -> Expr:
        return BinOp("/", self, wrap(other))

    def __rtruediv__(self, other: object) -> Expr:
        return BinOp("/", wrap(other), self)

    def __floordiv__(self, other: object) -> Expr:
        return BinOp("//", self, wrap(other))

    def __rfloordiv__(self, other: object) -> Expr:
        return BinOp("//", wrap(other), self)

    def __mod__(self, other: object) -> Expr:
        return BinOp("%", self, wrap(other))

    def __rmod__(self, other: object) -> Expr:
        return BinOp("%", wrap(other), self)

    def __neg__(self) -> Expr:
        return UnOp("neg", self)

    def __abs__(self) -> Expr:
        return UnOp("abs", self)

    # comparisons (return expressions, not booleans)
    def __eq__(self, other: object) -> Expr:  # type: ignore[override]
        return BinOp("==", self, wrap(other))

    def __ne__(self, other: object) -> Expr:  # type: ignore[override]
        return BinOp("!=", self, wrap(other))

    def __lt__(self, other: object) -> Expr:
        return BinOp("<", self, wrap(other))

    def __le__(self, other: object) -> Expr:
        return BinOp("<=", self, wrap(other))

    def __gt__(self, other: object) -> Expr:
        return BinOp(">", self, wrap(other))

    def __ge__(self, other: object) -> Expr:
        return BinOp(">=", self, wrap(other))

    # logic
    def __and__(self, other: object) -> Expr:
        return BinOp("&", self, wrap(other))

    def __rand__(self, other: object) -> Expr:
        return BinOp("&", wrap(other), self)

    def __or__(self, other: object) -> Expr:
        return BinOp("|", self, wrap(other))

    def __ror__(self, other: object) -> Expr:
        return BinOp("|", wrap(other), self)

    def __invert__(self) -> Expr:
        return UnOp("not", self)

    def __bool__(self) -> bool:
        raise TypeError(
            "an expression has no truth value; combine conditions with & | ~ instead of and/or/not"
        )

    __hash__ = object.__hash__

    def is_null(self) -> Expr:
        """True where the value is null."""
        return UnOp("is_null", self)

    def not_null(self) -> Expr:
        """True where the value is not null."""
        return UnOp("not", UnOp("is_null", self))

    def isin(self, values: Iterable[Any]) -> Expr:
        """True where the value is one of ``values`` (literals)."""
        return IsIn(self, tuple(values))

    def fill_null(self, value: object) -> Expr:
        """The value, or ``value`` where it is null."""
        return Func("coalesce", (self, wrap(value)))

    def cast(self, to: ColumnType) -> Expr:
        """The value converted to ``to`` (int64, float64 or string)."""
        return Cast(self, to)

    def children(self) -> tuple[Expr, ...]:
        return ()


@dataclass(frozen=True, eq=False, slots=True)
class Col(Expr):
    """A column of the event (the step's input row); ``_ts`` and ``_pos`` are always there."""

    name: str


@dataclass(frozen=True, eq=False, slots=True)
class Lit(Expr):
    """A literal value."""

    value: Any


@dataclass(frozen=True, eq=False, slots=True)
class Old(Expr):
    """A column of the row the current state operation works on, before the operation."""

    column: str


@dataclass(frozen=True, eq=False, slots=True)
class Ref(Expr):
    """A value produced by an earlier operation of the same transaction.

    ``column`` is a column of the operation's table, or ``found`` (the row existed before the
    operation), or ``count`` (rows changed by an index update), or a window aggregate name.
    """

    step: str
    op_index: int
    column: str
    version: RefVersion = "after"


@dataclass(frozen=True, eq=False, slots=True)
class BinOp(Expr):
    op: str
    left: Expr
    right: Expr

    def children(self) -> tuple[Expr, ...]:
        return (self.left, self.right)


@dataclass(frozen=True, eq=False, slots=True)
class UnOp(Expr):
    op: str
    operand: Expr

    def children(self) -> tuple[Expr, ...]:
        return (self.operand,)


@dataclass(frozen=True, eq=False, slots=True)
class IfElse(Expr):
    cond: Expr
    then: Expr
    otherwise: Expr

    def children(self) -> tuple[Expr, ...]:
        return (self.cond, self.then, self.otherwise)


@dataclass(frozen=True, eq=False, slots=True)
class Func(Expr):
    """A built-in function: ``coalesce``, ``least``, ``greatest``, ``concat``, ``date_of``."""

    name: str
    args: tuple[Expr, ...]

    def children(self) -> tuple[Expr, ...]:
        return self.args


@dataclass(frozen=True, eq=False, slots=True)
class IsIn(Expr):
    operand: Expr
    values: tuple[Any, ...]

    def children(self) -> tuple[Expr, ...]:
        return (self.operand,)


@dataclass(frozen=True, eq=False, slots=True)
class Cast(Expr):
    operand: Expr
    to: ColumnType

    def children(self) -> tuple[Expr, ...]:
        return (self.operand,)


@dataclass(frozen=True, eq=False, slots=True)
class Call(Expr):
    """A plain Python function called once per row with scalar arguments (nulls as ``None``).

    The general fallback: anything an expression cannot say. ``returns`` declares the result type,
    checked on every call, on every executor (an int64 function returning 2**70, a float or a
    bool fails that row, whatever the other rows return); without it each value keeps the type
    its call gave it (and a transactional step using the function runs interpreted).

    An exception raised by ``fn`` aborts that transaction only (or dead-letters that row in a
    stateless step), with the exception as the reason.
    """

    fn: Callable[..., Any]
    args: tuple[Expr, ...]
    returns: ColumnType | None = None

    def children(self) -> tuple[Expr, ...]:
        return self.args


# ---------------------------------------------------------------------------------------------
# constructors


def col(name: str) -> Expr:
    """The event column ``name``."""
    return Col(name)


def lit(value: Any) -> Expr:
    """A literal value (``None`` is null)."""
    return Lit(value)


def old(column: str) -> Expr:
    """The current state row's ``column`` before this operation changes it."""
    return Old(column)


def wrap(value: object) -> Expr:
    """``value`` itself when it is an expression, else a literal."""
    return value if isinstance(value, Expr) else Lit(value)


def if_else(cond: object, then: object, otherwise: object) -> Expr:
    """``then`` where ``cond`` is true, else ``otherwise`` (also when ``cond`` is null)."""
    return IfElse(wrap(cond), wrap(then), wrap(otherwise))


def coalesce(*args: object) -> Expr:
    """The first non-null argument."""
    return Func("coalesce", tuple(wrap(a) for a in args))


def least(*args: object) -> Expr:
    """The smallest argument (null if any is null)."""
    return Func("least", tuple(wrap(a) for a in args))


def greatest(*args: object) -> Expr:
    """The largest argument (null if any is null)."""
    return Func("greatest", tuple(wrap(a) for a in args))


def concat(*args: object) -> Expr:
    """The string arguments joined (null if any is null)."""
    return Func("concat", tuple(wrap(a) for a in args))


def date_of(ts: object) -> Expr:
    """The date (days since the epoch) of a timestamp in µs."""
    return Func("date_of", (wrap(ts),))


def cost(value: object, nanoseconds: int) -> Expr:
    """``value``, after busy-working for ``nanoseconds``: models the cost of a user function.

    Benchmarks use it to give operations a user-function cost (MorphStream's knob C) that every
    executor pays the same way, compiled or not."""
    if not isinstance(nanoseconds, int) or nanoseconds < 0:
        raise ValueError("cost needs a non-negative int of nanoseconds")
    return Func("cost", (wrap(value), Lit(nanoseconds)))


def udf(fn: Callable[..., Any], *args: object, returns: ColumnType | None = None) -> Expr:
    """Call ``fn`` per row with the arguments' values (see :class:`Call`)."""
    return Call(fn, tuple(wrap(a) for a in args), returns)


def walk(expr: Expr) -> Iterable[Expr]:
    """Every node of ``expr``, the root first."""
    stack = [expr]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(node.children()))


def structure(expr: Expr) -> tuple[Any, ...]:
    """A hashable key equal for structurally identical expressions (same function objects)."""
    if isinstance(expr, Col):
        return ("col", expr.name)
    if isinstance(expr, Lit):
        return ("lit", type(expr.value).__name__, expr.value)
    if isinstance(expr, Old):
        return ("old", expr.column)
    if isinstance(expr, Ref):
        return ("ref", expr.step, expr.op_index, expr.column, expr.version)
    children = tuple(structure(child) for child in expr.children())
    if isinstance(expr, BinOp | UnOp):
        return (type(expr).__name__, expr.op, children)
    if isinstance(expr, Func):
        return ("func", expr.name, children)
    if isinstance(expr, IsIn):
        return ("isin", tuple((type(v).__name__, v) for v in expr.values), children)
    if isinstance(expr, Cast):
        return ("cast", expr.to, children)
    if isinstance(expr, Call):
        return ("call", id(expr.fn), expr.returns, children)
    return (type(expr).__name__, children)


def describe(expr: Expr) -> str:
    """A readable rendering of ``expr`` for error messages and plans."""
    if isinstance(expr, Col):
        return expr.name
    if isinstance(expr, Lit):
        return repr(expr.value)
    if isinstance(expr, Old):
        return f"old({expr.column})"
    if isinstance(expr, Ref):
        suffix = ".before" if expr.version == "before" else ""
        return f"op{expr.op_index}{suffix}[{expr.column}]"
    if isinstance(expr, BinOp):
        return f"({describe(expr.left)} {expr.op} {describe(expr.right)})"
    if isinstance(expr, UnOp):
        return f"{expr.op}({describe(expr.operand)})"
    if isinstance(expr, IfElse):
        parts = (describe(expr.cond), describe(expr.then), describe(expr.otherwise))
        return "if_else(" + ", ".join(parts) + ")"
    if isinstance(expr, Func):
        return f"{expr.name}(" + ", ".join(describe(a) for a in expr.args) + ")"
    if isinstance(expr, IsIn):
        return f"{describe(expr.operand)} in {expr.values!r}"
    if isinstance(expr, Cast):
        return f"cast({describe(expr.operand)} as {expr.to})"
    if isinstance(expr, Call):
        name = getattr(expr.fn, "__name__", "fn")
        return f"{name}(" + ", ".join(describe(a) for a in expr.args) + ")"
    return type(expr).__name__


# ---------------------------------------------------------------------------------------------
# type inference

_NUMERIC = frozenset({"int64", "float64", "timestamp", "date"})
_ARITH = frozenset({"+", "-", "*", "/", "//", "%"})
_COMPARE = frozenset({"==", "!=", "<", "<=", ">", ">="})


def _literal_type(value: Any) -> ColumnType | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64"
    if isinstance(value, float):
        return "float64"
    if isinstance(value, str):
        return "string"
    raise ExpressionTypeError(f"literal {value!r} has no column type (use int, float, bool or str)")


def _numeric_result(a: ColumnType | None, b: ColumnType | None) -> ColumnType | None:
    if a is None or b is None:
        return "float64" if "float64" in (a, b) else None
    return "float64" if "float64" in (a, b) else "int64"


def unify(types: Iterable[ColumnType | None], what: str) -> ColumnType | None:
    """The common type of branches (``if_else``, ``coalesce``); ints widen to floats."""
    known = {t for t in types if t is not None}
    if not known:
        return None
    if len(known) == 1:
        return next(iter(known))
    if known <= _NUMERIC:
        return "float64" if "float64" in known else "int64"
    raise ExpressionTypeError(f"{what} mixes incompatible types {sorted(known)}")


TypeResolver = Callable[[Expr], ColumnType | None]


def infer_type(expr: Expr, leaf_type: TypeResolver) -> ColumnType | None:
    """The result type of ``expr``; ``leaf_type`` gives the types of Col/Old/Ref leaves.

    ``None`` means unknown (a null literal, a function without ``returns``). Raises
    :class:`ExpressionTypeError` where types cannot combine, and whatever ``leaf_type`` raises for
    an unknown column.
    """
    if isinstance(expr, Col | Old | Ref):
        return leaf_type(expr)
    if isinstance(expr, Lit):
        return _literal_type(expr.value)
    if isinstance(expr, BinOp):
        left = infer_type(expr.left, leaf_type)
        right = infer_type(expr.right, leaf_type)
        where = describe(expr)
        if expr.op in _ARITH:
            for side in (left, right):
                if side is not None and side not in _NUMERIC:
                    raise ExpressionTypeError(f"{where}: arithmetic on a {side} value")
            return "float64" if expr.op == "/" else _numeric_result(left, right)
        if expr.op in _COMPARE:
            if left is not None and right is not None:
                both_numeric = left in _NUMERIC and right in _NUMERIC
                if not both_numeric and left != right:
                    raise ExpressionTypeError(f"{where}: compares {left} with {right}")
            return "bool"
        if expr.op in ("&", "|"):
            for side in (left, right):
                if side not in (None, "bool"):
                    raise ExpressionTypeError(f"{where}: logic on a {side} value")
            return "bool"
        raise ExpressionTypeError(f"unknown operator {expr.op!r}")
    if isinstance(expr, UnOp):
        inner = infer_type(expr.operand, leaf_type)
        if expr.op == "is_null":
            return "bool"
        if expr.op == "not":
            if inner not in (None, "bool"):
                raise ExpressionTypeError(f"{describe(expr)}: negates a {inner} value")
            return "bool"
        if inner is not None and inner not in _NUMERIC:
            raise ExpressionTypeError(f"{describe(expr)}: {expr.op} of a {inner} value")
        return "int64" if inner in ("timestamp", "date") else inner
    if isinstance(expr, IfElse):
        cond = infer_type(expr.cond, leaf_type)
        if cond not in (None, "bool"):
            raise ExpressionTypeError(f"{describe(expr)}: condition is {cond}, not bool")
        branches = (infer_type(expr.then, leaf_type), infer_type(expr.otherwise, leaf_type))
        return unify(branches, describe(expr))
    if isinstance(expr, Func):
        args = [infer_type(a, leaf_type) for a in expr.args]
        if expr.name == "coalesce":
            return unify(args, describe(expr))
        if expr.name in ("least", "greatest"):
            return unify(args, describe(expr))
        if expr.name == "concat":
            for a in args:
                if a not in (None, "string"):
                    raise ExpressionTypeError(f"{describe(expr)}: concat of a {a} value")
            return "string"
        if expr.name == "cost":
            if not isinstance(expr.args[1], Lit) or not isinstance(expr.args[1].value, int):
                raise ExpressionTypeError("cost needs a literal int of nanoseconds")
            return args[0]
        if expr.name == "date_of":
            if args[0] not in (None, "int64", "timestamp"):
                raise ExpressionTypeError(f"{describe(expr)}: date_of needs a timestamp")
            return "date"
        raise ExpressionTypeError(f"unknown function {expr.name!r}")
    if isinstance(expr, IsIn):
        infer_type(expr.operand, leaf_type)
        for value in expr.values:
            _literal_type(value)
        return "bool"
    if isinstance(expr, Cast):
        inner = infer_type(expr.operand, leaf_type)
        if expr.to not in ("int64", "float64", "string"):
            raise ExpressionTypeError(f"{describe(expr)}: cast to {expr.to} is not supported")
        if expr.to != "string" and inner not in (None, *_NUMERIC, "bool"):
            raise ExpressionTypeError(f"{describe(expr)}: cast of a {inner} value to {expr.to}")
        return expr.to
    if isinstance(expr, Call):
        for arg in expr.args:
            infer_type(arg, leaf_type)
        return expr.returns
    raise ExpressionTypeError(f"unknown expression node {type(expr).__name__}")


# ---------------------------------------------------------------------------------------------
# scalar evaluation: the reference semantics, compiled once into closures


class Scope:
    """What a scalar expression sees: the event row, the current state row, earlier op results.

    ``results[i]`` is the result of operation ``i`` of the transaction (None if it was skipped):
    an object with ``after``/``before`` dicts and ``found``/``count`` attributes.
    """

    __slots__ = ("old", "results", "row")

    def __init__(
        self, row: Mapping[str, Any], old: Mapping[str, Any] | None, results: list[Any]
    ) -> None:
        self.row = row
        self.old = old
        self.results = results


ScalarFn = Callable[[Scope], Any]


def check_int64(value: int) -> int:
    """``value`` if it fits in int64, else :class:`ExpressionError`."""
    if value < INT64_MIN or value > INT64_MAX:
        raise ExpressionError("integer overflow: result leaves the int64 range")
    return value


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _arith(op: str, a: Any, b: Any) -> Any:
    if a is None or b is None:
        return None
    if op == "/":
        if b == 0:
            return None
        return float(a) / float(b)
    if op in ("//", "%"):
        if b == 0:
            return None
        result = a // b if op == "//" else a % b
    elif op == "+":
        result = a + b
    elif op == "-":
        result = a - b
    else:
        result = a * b
    if _is_int(result):
        return check_int64(result)
    return float(result)


_CMP: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


def _and(a: Any, b: Any) -> bool | None:
    if a is False or b is False:
        return False
    if a is None or b is None:
        return None
    return True


def _or(a: Any, b: Any) -> bool | None:
    if a is True or b is True:
        return True
    if a is None or b is None:
        return None
    return False


def _cast(value: Any, to: ColumnType) -> Any:
    if value is None:
        return None
    if to == "string":
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)
    if to == "float64":
        return float(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ExpressionError(f"cannot cast {value!r} to int64")
        return check_int64(math.trunc(value))
    if isinstance(value, str):
        raise ExpressionError(f"cannot cast string {value!r} to int64")
    return check_int64(int(value))


def compile_scalar(expr: Expr) -> ScalarFn:
    """Compile ``expr`` into a function of a :class:`Scope` with the reference semantics."""
    if isinstance(expr, Col):
        name = expr.name
        return lambda s: s.row[name]
    if isinstance(expr, Lit):
        value = expr.value
        return lambda s: value
    if isinstance(expr, Old):
        column = expr.column

        def old_value(s: Scope) -> Any:
            return None if s.old is None else s.old.get(column)

        return old_value
    if isinstance(expr, Ref):
        return _compile_ref(expr)
    if isinstance(expr, BinOp):
        left, right, op = compile_scalar(expr.left), compile_scalar(expr.right), expr.op
        if op in _ARITH:
            return lambda s: _arith(op, left(s), right(s))
        if op in _CMP:
            cmp = _CMP[op]

            def compare(s: Scope) -> bool | None:
                a, b = left(s), right(s)
                if a is None or b is None:
                    return None
                return cmp(a, b)

            return compare
        if op == "&":
            return lambda s: _and(left(s), right(s))
        return lambda s: _or(left(s), right(s))
    if isinstance(expr, UnOp):
        inner, op = compile_scalar(expr.operand), expr.op
        if op == "is_null":
            return lambda s: inner(s) is None
        if op == "not":

            def negate(s: Scope) -> bool | None:
                v = inner(s)
                return None if v is None else not v

            return negate
        if op == "neg":

            def neg(s: Scope) -> Any:
                v = inner(s)
                if v is None:
                    return None
                return check_int64(-v) if _is_int(v) else -v

            return neg

        def absolute(s: Scope) -> Any:
            v = inner(s)
            if v is None:
                return None
            return check_int64(abs(v)) if _is_int(v) else abs(v)

        return absolute
    if isinstance(expr, IfElse):
        cond, then, otherwise = (compile_scalar(e) for e in expr.children())
        return lambda s: then(s) if cond(s) is True else otherwise(s)
    if isinstance(expr, Func):
        return _compile_func(expr)
    if isinstance(expr, IsIn):
        inner, members = compile_scalar(expr.operand), expr.values

        def isin(s: Scope) -> bool | None:
            v = inner(s)
            return None if v is None else v in members

        return isin
    if isinstance(expr, Cast):
        inner, to = compile_scalar(expr.operand), expr.to
        return lambda s: _cast(inner(s), to)
    if isinstance(expr, Call):
        fn, args = expr.fn, [compile_scalar(a) for a in expr.args]
        name = getattr(fn, "__name__", "function")

        returns = expr.returns

        def call(s: Scope) -> Any:
            values = [a(s) for a in args]
            try:
                result = fn(*values)
            except Exception as exc:
                raise UserFunctionError(name, exc) from exc
            if returns is None:
                return result
            try:
                return coerce_value(result, returns)
            except (TypeError, ValueError) as exc:
                raise ExpressionError(f"{name} returned {result!r}: {exc}") from exc

        return call
    raise ExpressionTypeError(f"unknown expression node {type(expr).__name__}")


def _compile_ref(expr: Ref) -> ScalarFn:
    index, column, version = expr.op_index, expr.column, expr.version

    def ref(s: Scope) -> Any:
        result = s.results[index]
        if result is None:
            return None
        if column in ("found", "count"):
            return getattr(result, column)
        values = result.before if version == "before" else result.after
        return None if values is None else values.get(column)

    return ref


def _compile_func(expr: Func) -> ScalarFn:
    args = [compile_scalar(a) for a in expr.args]
    name = expr.name
    if name == "coalesce":

        def first_not_null(s: Scope) -> Any:
            for a in args:
                v = a(s)
                if v is not None:
                    return v
            return None

        return first_not_null
    if name == "cost":
        inner, nanoseconds = args[0], expr.args[1].value  # type: ignore[attr-defined]

        def costly(s: Scope) -> Any:
            busy_wait(nanoseconds)
            return inner(s)

        return costly
    if name == "date_of":
        ts = args[0]

        def date_of_ts(s: Scope) -> Any:
            v = ts(s)
            return None if v is None else v // MICROS_PER_DAY

        return date_of_ts

    def all_args(s: Scope) -> list[Any] | None:
        values = [a(s) for a in args]
        return None if any(v is None for v in values) else values

    if name == "concat":

        def joined(s: Scope) -> Any:
            values = all_args(s)
            return None if values is None else "".join(values)

        return joined
    reduce = min if name == "least" else max

    def extreme(s: Scope) -> Any:
        values = all_args(s)
        return None if values is None else reduce(values)

    return extreme


def busy_wait(nanoseconds: int) -> None:
    """Spin for ``nanoseconds`` (the cost of :func:`cost`)."""
    if nanoseconds <= 0:
        return
    end = time.perf_counter_ns() + nanoseconds
    while time.perf_counter_ns() < end:
        pass


def references(expr: Expr) -> tuple[set[str], set[str], set[tuple[int, str]]]:
    """The event columns, old-row columns and ``(op_index, column)`` refs ``expr`` reads."""
    cols: set[str] = set()
    olds: set[str] = set()
    refs: set[tuple[int, str]] = set()
    for node in walk(expr):
        if isinstance(node, Col):
            cols.add(node.name)
        elif isinstance(node, Old):
            olds.add(node.column)
        elif isinstance(node, Ref):
            refs.add((node.op_index, node.column))
    return cols, olds, refs
