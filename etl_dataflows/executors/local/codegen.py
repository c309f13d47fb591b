"""Generating the compiled transaction kernel of a step.

For a compiled step (see :mod:`.analysis`) this module writes the Python source of one function,
``txn(i, ...)``, that runs transaction ``i`` exactly as the serial executor would: the operations in
declaration order against state arrays, with the same null, overflow and abort rules, an undo of its
own writes when it aborts, and its output values. The source is compiled with numba (no Python
objects inside), and drivers (:mod:`.kernels`) call it in timestamp order, or wave by wave in
parallel.

Kernel arguments (generated names):

``hK, hvK, heK``  hoisted event-only expression K: values, validity, error flags (per row); a
                  string expression the kernel reads comes as codes of the executor's string pool
``sJ``            slot of operation J's key per row (-1: null key); for a pre-read, the row
``pJ_ex, pJ_C, pJ_C_v``  pre-read J (see :mod:`.analysis`): the row exists, and the values and
                  validity of each column C the step uses, per event row
``tT_ex, tT_sk``  table T: row exists, surrogate key (per slot)
``tT_C, tT_C_v``  table T, value column C: values and validity (per slot)
``wT_h, wT_t``    window table T (see :mod:`.window_arrays`): each slot's oldest and newest entry
``wT_n, wT_a, wT_e, wT_s``  window table T's entry pool: next entry, time, entry number, slot
``wT_u``          window table T: entries made so far (one element; appends advance it)
``wT_C, wT_C_v``  window table T, value column C: each entry's value and validity
``seq``           next surrogate key (window: entry number) per table
``st, rs, ev``    per row: status (0 commit, 1 condition abort, 2 error abort), reason code, and a
                  float value for reasons that quote one
``iv``            per row, in a step with a window: an integer value for reasons that quote one
``em``            per row: the output row is emitted
``oN, oN_v``      per row: state-dependent output column N
``spin``          busy-loop iterations per nanosecond (for :func:`~etl_dataflows.expressions.cost`)

Reason codes index :attr:`KernelSource.reasons`; codes from ``HOISTED_BASE`` on mean "the error of
hoisted expression ``code - HOISTED_BASE`` at this row".
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from etl_dataflows.dataflow import CompiledDataflow
from etl_dataflows.executors.local.analysis import KERNEL_TYPES, TypeOf, is_event_only
from etl_dataflows.executors.local.strings import StringPool
from etl_dataflows.expressions import (
    INT64_MIN,
    BinOp,
    Call,
    Cast,
    Col,
    Expr,
    Func,
    IfElse,
    IsIn,
    Lit,
    Old,
    Ref,
    UnOp,
    structure,
    walk,
)
from etl_dataflows.tables import StateTable, Table, WindowTable
from etl_dataflows.transaction import Operation, TransactionStep
from etl_dataflows.types import MICROS_PER_DAY, TS, ColumnType

HOISTED_BASE = 1_000_000

#: A window table's kernel arguments besides its value columns, by suffix of ``wT``: heads,
#: tails, and the pool's next, time, entry number and slot columns, and its used length.
WINDOW_PARTS = ("h", "t", "n", "a", "e", "s", "u")

_ZERO = {
    "int64": "np.int64(0)",
    "timestamp": "np.int64(0)",
    "date": "np.int64(0)",
    "float64": "0.0",
    "bool": "False",
}


def _zero(kind: ColumnType | None) -> str:
    """A typed zero for a kernel variable; columns the kernel never reads (string keys) get an
    int placeholder."""
    return _ZERO.get(_kernel_type(kind), "np.int64(0)")


def _kernel_type(kind: ColumnType | None) -> str:
    if kind in ("int64", "timestamp", "date") or kind is None:
        return "int64"
    return kind


@dataclass
class Hoisted:
    """An event-only expression evaluated before the kernel."""

    index: int
    expr: Expr
    type: ColumnType | None
    in_kernel: bool = False
    #: Operations whose ``when`` rows are the only rows that need the value; None: every row.
    rows_of_ops: set[int] | None = None


@dataclass
class Reason:
    """An abort reason: ``template`` may quote the op's key (``{key}``), a value (``{value}``),
    an integer value (``{number}``) or hoisted expression ``hoisted``'s value (``{hoisted}``)."""

    template: str
    key_of_op: int | None = None
    hoisted: int | None = None


@dataclass
class KernelSource:
    """The generated kernel of a step and what its arguments mean."""

    step: str
    source: str
    tables: list[str]
    hoisted: list[Hoisted]
    reasons: list[Reason]
    key_hoist: list[int]
    #: Every key column's hoisted expression, per operation (``key_hoist`` is the first).
    key_parts_hoist: list[list[int]]
    when_hoist: list[int | None]
    writers: list[int]
    kernel_outputs: list[tuple[str, str]]
    hoisted_outputs: dict[str, int]
    emit_when_hoist: int | None
    #: Pre-read operations and the columns of each that the kernel reads.
    pre_reads: dict[int, list[str]]


class CodeWriter:
    """Lines of generated Python at an indentation depth, with fresh temporary names."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.depth = 1
        self._tmp = 0

    def line(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    @contextmanager
    def block(self, header: str) -> Iterator[None]:
        self.line(header)
        self.depth += 1
        start = len(self.lines)
        yield
        if len(self.lines) == start:
            self.line("pass")
        self.depth -= 1

    def tmp(self) -> str:
        """A temporary name not yet handed out by this writer."""
        self._tmp += 1
        return f"x{self._tmp}"

    def branch(self, depth: int) -> CodeWriter:
        """An empty writer at ``depth`` whose temporary names continue from this one's (for code
        written aside and spliced in later)."""
        writer = CodeWriter()
        writer.depth = depth
        writer._tmp = self._tmp
        return writer


class KernelGenerator:
    """Writes the kernel of one compiled step (see the module docstring)."""

    def __init__(
        self,
        flow: CompiledDataflow,
        step: TransactionStep,
        pool: StringPool | None = None,
        pre_reads: frozenset[int] = frozenset(),
    ) -> None:
        self.flow = flow
        self.step = step
        self.types = TypeOf(flow, step)
        self.out = CodeWriter()
        self.hoisted: list[Hoisted] = []
        self._hoist_ids: dict[tuple[Any, ...], int] = {}
        self.reasons: list[Reason] = []
        #: Extended compilation (strings as codes of ``pool``; pre-reads).
        self.pool = pool
        self.pre_read_ops = pre_reads
        self.state_whens: dict[int, Expr] = {}
        self.tables: list[str] = []
        for op in step.operations:
            if op.table not in self.tables and op.index not in pre_reads:
                self.tables.append(op.table)
        self.current: Operation | None = None
        self.op_mode = False
        self.probe = "False"
        self._global: set[int] = set()
        self.refs = self._referenced()
        #: The step has a window operation (its kernel quotes integer values: ``iv``).
        self.windows = any(op.kind == "window" for op in step.operations)

    # -- bookkeeping ----------------------------------------------------------------------------

    def _referenced(self) -> set[tuple[int, str, str]]:
        refs: set[tuple[int, str, str]] = set()
        exprs = [e for op in self.step.operations for e in op.expressions()]
        exprs += list(self.step.emit_columns.values())
        if self.step.emit_when is not None:
            exprs.append(self.step.emit_when)
        for expr in exprs:
            for node in walk(expr):
                if isinstance(node, Ref) and node.column not in ("found", "count"):
                    refs.add((node.op_index, node.column, node.version))
        return refs

    def hoist(self, expr: Expr) -> int:
        key = structure(expr)
        if key not in self._hoist_ids:
            index = len(self.hoisted)
            self.hoisted.append(Hoisted(index, expr, self.types.of(expr)))
            self._hoist_ids[key] = index
        return self._hoist_ids[key]

    def need_rows(self, k: int) -> None:
        """Record which rows need hoisted value ``k``: those of the current operation, or all."""
        hoisted = self.hoisted[k]
        if (
            self.current is None
            or self.current.when is None
            or self.current.index in self.state_whens
        ):
            hoisted.rows_of_ops = None
            self._global.add(k)
        elif k not in self._global:
            hoisted.rows_of_ops = (hoisted.rows_of_ops or set()) | {self.current.index}

    def reason(
        self, template: str, key_of_op: int | None = None, hoisted: int | None = None
    ) -> int:
        self.reasons.append(Reason(template, key_of_op, hoisted))
        return len(self.reasons) - 1

    def fail(
        self, status: int, code: int | str, value: str | None = None, number: str | None = None
    ) -> None:
        with self.out.block("if st == 0:"):
            self.out.line(f"st = {status}")
            self.out.line(f"rs = {code}")
            if value is not None:
                self.out.line(f"ev = float({value})")
            if number is not None:
                self.out.line(f"iv = {number}")

    def table_index(self, name: str) -> int:
        return self.tables.index(name)

    def literal(self, value: Any, kind: ColumnType | None) -> str:
        """Source of a non-null literal of type ``kind`` (a string as its pool code)."""
        if kind == "float64":
            return repr(float(value))
        if isinstance(value, str):
            if self.pool is None:
                raise AssertionError("a string literal meets state without a string pool")
            return f"np.int64({self.pool.code(value)})"
        return repr(value)

    def key_part(self, j: int, c: int, kind: ColumnType) -> str | None:
        """The kernel source of operation ``j``'s key column ``c`` (None when a kernel cannot
        hold it: a string key without a pool)."""
        k = self.key_parts_hoist[j][c]
        if kind == "int64":
            return f"h{k}[i]"
        if self.pool is not None and kind == "string":
            self.hoisted[k].in_kernel = True
            return f"h{k}[i]"
        return None

    # -- expressions ----------------------------------------------------------------------------

    def cast_to(self, var: str, source: ColumnType | None, target: ColumnType | None) -> str:
        if target == "float64" and source != "float64":
            return f"float({var})"
        return var

    def expr(self, node: Expr, want: ColumnType | None = None) -> tuple[str, str]:
        """Generate ``node``; returns the names holding its value and validity."""
        w = self.out
        kind = self.types.of(node, self._table())
        if is_event_only(node) and not isinstance(node, Lit):
            k = self.hoist(node)
            self.hoisted[k].in_kernel = True
            self.need_rows(k)
            v, ok = w.tmp(), w.tmp()
            with w.block(f"if he{k}[i]:"):
                self.fail(2, HOISTED_BASE + k)
            w.line(f"{v} = h{k}[i]")
            w.line(f"{ok} = hv{k}[i]")
            return self.cast_to(v, kind, want), ok
        if isinstance(node, Lit):
            target = want or kind
            if node.value is None:
                return _zero(target), "False"
            return self.literal(node.value, target), "True"
        if isinstance(node, Old):
            assert self.current is not None
            return f"o{self.current.index}_{node.column}", f"ov{self.current.index}_{node.column}"
        if isinstance(node, Ref):
            if node.column == "found":
                return f"fnd{node.op_index}", f"ran{node.op_index}"
            prefix = "a" if node.version == "after" else "b"
            return (
                self.cast_to(f"{prefix}{node.op_index}_{node.column}", kind, want),
                f"{prefix}v{node.op_index}_{node.column}",
            )
        if isinstance(node, BinOp):
            return self.binop(node, kind, want)
        if isinstance(node, UnOp):
            return self.unop(node, kind)
        if isinstance(node, IfElse):
            return self.if_else(node, kind, want)
        if isinstance(node, Func):
            return self.func(node, kind, want)
        if isinstance(node, IsIn):
            x, ok = self.expr(node.operand)
            v = w.tmp()
            operand = self.types.of(node.operand, self._table())
            members = (
                " or ".join(f"({x} == {self.literal(value, operand)})" for value in node.values)
                or "False"
            )

            w.line(f"{v} = {members}")
            return v, ok
        if isinstance(node, Cast):
            return self.cast(node)
        if isinstance(node, Call):
            raise AssertionError("a state-dependent Python function cannot be compiled")
        raise AssertionError(f"cannot compile {type(node).__name__}")

    def _table(self) -> StateTable | None:
        if self.current is None:
            return None
        return self.flow.tables[self.current.table]

    def binop(
        self, node: BinOp, kind: ColumnType | None, want: ColumnType | None
    ) -> tuple[str, str]:
        w = self.out
        op = node.op
        if op in ("&", "|"):
            a, aok = self.expr(node.left)
            b, bok = self.expr(node.right)
            v, ok = w.tmp(), w.tmp()
            if op == "&":
                w.line(f"{v} = {aok} and {bok} and {a} and {b}")
                w.line(f"{ok} = ({aok} and {bok}) or ({aok} and not {a}) or ({bok} and not {b})")
            else:
                w.line(f"{v} = ({aok} and {a}) or ({bok} and {b})")
                w.line(f"{ok} = ({aok} and {bok}) or ({aok} and {a}) or ({bok} and {b})")
            return v, ok
        if op in ("==", "!=", "<", "<=", ">", ">="):
            a, aok = self.expr(node.left)
            b, bok = self.expr(node.right)
            v, ok = w.tmp(), w.tmp()
            w.line(f"{ok} = {aok} and {bok}")
            w.line(f"{v} = {a} {op} {b}")
            return v, ok
        result: ColumnType = "float64" if kind == "float64" else "int64"
        a, aok = self.expr(node.left, result)

        b, bok = self.expr(node.right, result)
        v, ok = w.tmp(), w.tmp()
        w.line(f"{ok} = {aok} and {bok}")
        overflow = self.reason("integer overflow: result leaves the int64 range")
        if op == "/":
            fa, fb = f"float({a})", f"float({b})"
            w.line(f"{ok} = {ok} and {fb} != 0.0")
            w.line(f"{v} = {fa} / {fb} if {fb} != 0.0 else 0.0")
            return self.cast_to(v, "float64", want), ok
        if op in ("//", "%"):
            w.line(f"{ok} = {ok} and {b} != 0")
            if result == "int64":
                with w.block(f"if {b} == -1:"):
                    if op == "//":
                        with w.block(f"if {ok} and {a} == {INT64_MIN}:"):
                            self.fail(2, overflow)
                        w.line(f"{v} = -{a} if {a} != {INT64_MIN} else {a}")
                    else:
                        w.line(f"{v} = np.int64(0)")
                with w.block("else:"):
                    w.line(f"{v} = {a} {op} ({b} if {b} != 0 else 1)")
            else:
                w.line(f"{v} = {a} {op} ({b} if {b} != 0.0 else 1.0)")
            return self.cast_to(v, result, want), ok
        if result == "int64":
            test = {"+": "add_overflows", "-": "sub_overflows", "*": "mul_overflows"}[op]
            with w.block(f"if {ok} and {test}({a}, {b}):"):
                self.fail(2, overflow)
                w.line(f"{v} = np.int64(0)")
            with w.block("else:"):
                w.line(f"{v} = {a} {op} {b}")
        else:
            w.line(f"{v} = {a} {op} {b}")
        return self.cast_to(v, result, want), ok

    def unop(self, node: UnOp, kind: ColumnType | None) -> tuple[str, str]:
        w = self.out
        x, ok = self.expr(node.operand)
        v = w.tmp()
        if node.op == "is_null":
            w.line(f"{v} = not {ok}")
            return v, "True"
        if node.op == "not":
            w.line(f"{v} = not {x}")
            return v, ok
        if _kernel_type(kind) == "int64":
            with w.block(f"if {ok} and {x} == {INT64_MIN}:"):
                self.fail(2, self.reason("integer overflow: result leaves the int64 range"))
        w.line(f"{v} = -{x}" if node.op == "neg" else f"{v} = abs({x})")
        return v, ok

    def if_else(
        self, node: IfElse, kind: ColumnType | None, want: ColumnType | None
    ) -> tuple[str, str]:
        w = self.out
        target = want if want == "float64" else kind
        c, cok = self.expr(node.cond)
        v, ok = w.tmp(), w.tmp()
        with w.block(f"if {cok} and {c}:"):
            t, tok = self.expr(node.then, target)
            w.line(f"{v} = {self.cast_to(t, self.types.of(node.then, self._table()), target)}")
            w.line(f"{ok} = {tok}")
        with w.block("else:"):
            o, ook = self.expr(node.otherwise, target)
            w.line(f"{v} = {self.cast_to(o, self.types.of(node.otherwise, self._table()), target)}")
            w.line(f"{ok} = {ook}")
        return v, ok

    def func(self, node: Func, kind: ColumnType | None, want: ColumnType | None) -> tuple[str, str]:
        w = self.out
        target = want if want == "float64" else kind
        if node.name == "coalesce":
            v, ok = w.tmp(), w.tmp()
            w.line(f"{v} = {_zero(target)}")
            w.line(f"{ok} = False")
            for arg in node.args:
                with w.block(f"if not {ok}:"):
                    a, aok = self.expr(arg, target)
                    w.line(f"{v} = {self.cast_to(a, self.types.of(arg, self._table()), target)}")
                    w.line(f"{ok} = {aok}")
            return v, ok
        if node.name == "cost":
            a, aok = self.expr(node.args[0], target)
            nanoseconds = node.args[1].value  # type: ignore[attr-defined]
            w.line(f"_spin(int({nanoseconds} * spin), spin_sink)")
            return a, aok
        if node.name == "date_of":
            a, aok = self.expr(node.args[0])
            v = w.tmp()
            w.line(f"{v} = {a} // {MICROS_PER_DAY}")
            return v, aok
        if node.name in ("least", "greatest"):
            values = [self.expr(arg, target) for arg in node.args]
            v, ok = w.tmp(), w.tmp()
            fn = "min" if node.name == "least" else "max"
            w.line(f"{ok} = " + " and ".join(o for _, o in values))
            w.line(f"{v} = {fn}(" + ", ".join(x for x, _ in values) + ")")
            return v, ok
        raise AssertionError(f"cannot compile function {node.name}")

    def cast(self, node: Cast) -> tuple[str, str]:
        w = self.out
        source = self.types.of(node.operand, self._table())
        x, ok = self.expr(node.operand)
        v = w.tmp()
        if node.to == "float64":
            w.line(f"{v} = float({x})")
            return v, ok
        if source == "float64":
            bad = self.reason("cannot cast {value!r} to int64")
            overflow = self.reason("integer overflow: result leaves the int64 range")
            with w.block(f"if {ok} and not np.isfinite({x}):"):
                self.fail(2, bad, x)
            with w.block(
                f"elif {ok} and not (-9.223372036854775808e18 <= {x} < 9.223372036854775808e18):"
            ):
                self.fail(2, overflow)
            w.line(
                f"{v} = np.int64({x}) if (np.isfinite({x}) and "
                f"-9.223372036854775808e18 <= {x} < 9.223372036854775808e18) else np.int64(0)"
            )
            return v, ok
        w.line(f"{v} = np.int64({x})")
        return v, ok

    # -- operations -----------------------------------------------------------------------------

    def columns(self, op: Operation) -> dict[str, ColumnType]:
        table = self.flow.tables[op.table]
        return table.readable_types()

    def declare(self) -> None:
        w = self.out
        w.line("st = 0")
        w.line("rs = -1")
        w.line("ev = 0.0")
        if self.windows:
            w.line("iv = np.int64(0)")
        for t, name in enumerate(self.tables):
            if _draws_sequence(self.flow.tables[name]):
                w.line(f"seq0_{t} = seq[{t}]")
                w.line(f"drew{t} = False")
        for op in self.step.operations:
            j = op.index
            w.line(f"ran{j} = False")
            w.line(f"fnd{j} = False")
            w.line(f"wr{j} = False")
            w.line(f"ex{j} = False")
            if op.kind == "window":
                w.line(f"u{j}_head = np.int64(-1)")
                w.line(f"u{j}_tail = np.int64(-1)")
            for column, kind in self.columns(op).items():
                zero = _zero(kind) if kind in _ZERO else "np.int64(0)"
                for prefix in ("a", "b", "o"):
                    w.line(f"{prefix}{j}_{column} = {zero}")
                    w.line(f"{prefix}v{j}_{column} = False")

    def load_row(self, op: Operation, prefix: str) -> None:
        """Load the slot's current row into ``prefix`` variables (key, sk, values)."""
        w = self.out
        j, t = op.index, self.table_index(op.table)
        table = self.flow.tables[op.table]
        assert isinstance(table, Table)
        self.key_columns(op, prefix)
        if table.surrogate:
            w.line(f"{prefix}{j}_{table.surrogate} = t{t}_sk[s{j}[i]]")
            w.line(f"{prefix}v{j}_{table.surrogate} = True")
        for column, _ in table.columns:
            w.line(f"{prefix}{j}_{column} = t{t}_{column}[s{j}[i]]")
            w.line(f"{prefix}v{j}_{column} = t{t}_{column}_v[s{j}[i]]")

    def key_columns(self, op: Operation, prefix: str) -> None:
        """The key columns of ``op``'s row into ``prefix`` variables (from the event)."""
        for c, (name, kind) in enumerate(self.flow.tables[op.table].key):
            source = self.key_part(op.index, c, kind)
            if source is not None:
                self.out.line(f"{prefix}{op.index}_{name} = {source}")
                self.out.line(f"{prefix}v{op.index}_{name} = True")

    def pre_read_body(self, op: Operation) -> None:
        """A pre-read: the row looked up before the kernel (arrays ``pJ_*`` by event row)."""
        w = self.out
        j = op.index
        w.line(f"fnd{j} = p{j}_ex[s{j}[i]]")
        with w.block(f"if fnd{j}:"):
            for column in self.pre_columns[j]:
                w.line(f"b{j}_{column} = p{j}_{column}[s{j}[i]]")
                w.line(f"bv{j}_{column} = p{j}_{column}_v[s{j}[i]]")
        w.line(f"ex{j} = fnd{j}")
        with w.block(f"if fnd{j}:"):
            self.copy_row(op, "b", "o")
        if op.if_missing == "abort":
            missing = self.reason(f"{op.label()}: no row for key {{key}}", j)
            with w.block(f"if not fnd{j}:"):
                self.fail(1, missing)
        self.requires(op)
        with w.block("if st == 0:"):
            self.copy_row(op, "b", "a")

    def copy_row(self, op: Operation, source: str, target: str) -> None:
        for column in self.columns(op):
            self.out.line(f"{target}{op.index}_{column} = {source}{op.index}_{column}")
            self.out.line(f"{target}v{op.index}_{column} = {source}v{op.index}_{column}")

    def default_row(self, op: Operation) -> None:
        """The seen row of an update that creates its row: the key and the table defaults."""
        w = self.out
        j = op.index
        table = self.flow.tables[op.table]
        assert isinstance(table, Table)
        keys = {name: (c, kind) for c, (name, kind) in enumerate(table.key)}
        for column, kind in self.columns(op).items():
            source = self.key_part(j, *keys[column]) if column in keys else None
            if source is not None:
                w.line(f"o{j}_{column} = {source}")
                w.line(f"ov{j}_{column} = True")
            elif column in keys:
                w.line(f"o{j}_{column} = {_zero(kind)}")
                w.line(f"ov{j}_{column} = False")
            elif column in table.defaults and table.defaults[column] is not None:
                value = table.defaults[column]
                w.line(f"o{j}_{column} = {self.literal(value, kind)}")
                w.line(f"ov{j}_{column} = True")
            else:
                w.line(f"o{j}_{column} = {_zero(kind)}")
                w.line(f"ov{j}_{column} = False")

    def after_load(self, op: Operation) -> None:
        """Hook after an operation read its row from the state arrays (op mode: probes see their
        own transaction's earlier writes, which they do not apply)."""

    def requires(self, op: Operation) -> None:
        w = self.out
        for req in op.requires:
            with w.block("if st == 0:"):
                c, cok = self.expr(req.condition)
                code = self.reason(f"{op.label()}: {req.reason}")
                with w.block(f"if not ({cok} and {c}):"):
                    self.fail(1, code)

    def new_values(self, op: Operation) -> dict[str, tuple[str, str]]:
        """Evaluate the op's values (while no abort), each cast to its column's type; the names
        holding each column's value and validity."""
        w = self.out
        table = self.flow.tables[op.table]
        new: dict[str, tuple[str, str]] = {}
        with w.block("if st == 0:"):
            for column, expr in op.values.items():
                kind = table.value_types[column]
                v, ok = self.expr(expr, kind)
                nv, nok = w.tmp(), w.tmp()
                w.line(f"{nv} = {self.cast_to(v, self.types.of(expr, table), kind)}")
                w.line(f"{nok} = {ok}")
                new[column] = (nv, nok)
        return new

    def store(self, op: Operation, base: str | None) -> None:
        """Evaluate the op's values against the seen row and write them.

        ``base``: ``"seen"`` (unspecified columns keep the seen row's values) or ``None`` (they
        take the table defaults)."""
        w = self.out
        j, t = op.index, self.table_index(op.table)
        table = self.flow.tables[op.table]
        assert isinstance(table, Table)
        new = self.new_values(op)
        with w.block("if st == 0:"):
            slot = f"s{j}[i]"
            w.line(f"wr{j} = True")
            w.line(f"ex{j} = True")
            if not self.op_mode:
                w.line(f"u{j}_ex = t{t}_ex[{slot}]")
                w.line(f"u{j}_sk = t{t}_sk[{slot}]")
                for column, _ in table.columns:
                    w.line(f"u{j}_{column} = t{t}_{column}[{slot}]")
                    w.line(f"u{j}_{column}_v = t{t}_{column}_v[{slot}]")
            self.key_columns(op, "a")
            if table.surrogate:
                sk = table.surrogate
                with w.block(f"if fnd{j}:"):
                    w.line(f"a{j}_{sk} = b{j}_{sk}")
                with w.block("else:"):
                    w.line(f"a{j}_{sk} = seq[{t}]")
                    with w.block(f"if not {self.probe}:"):
                        w.line(f"seq[{t}] += 1")
                        if not self.op_mode:
                            w.line(f"drew{t} = True")
                w.line(f"av{j}_{sk} = True")
            for column, kind in table.columns:
                if column in new:
                    v, ok = new[column]
                elif base == "seen":
                    v, ok = f"o{j}_{column}", f"ov{j}_{column}"
                elif column in table.defaults and table.defaults[column] is not None:
                    v, ok = self.literal(table.defaults[column], kind), "True"
                else:
                    v, ok = _zero(kind), "False"
                w.line(f"a{j}_{column} = {v}")
                w.line(f"av{j}_{column} = {ok}")
            with w.block(f"if not {self.probe}:"):
                w.line(f"t{t}_ex[{slot}] = True")
                if table.surrogate:
                    w.line(f"t{t}_sk[{slot}] = a{j}_{table.surrogate}")
                for column, _ in table.columns:
                    w.line(f"t{t}_{column}[{slot}] = a{j}_{column}")
                    w.line(f"t{t}_{column}_v[{slot}] = av{j}_{column}")

    def operation(self, op: Operation) -> None:
        w = self.out
        self.current = op
        j = op.index
        when = self.when_hoist[j]
        if j in self.state_whens:  # extended: evaluated in the kernel, after earlier operations
            with w.block("if st == 0:"):
                c, cok = self.expr(self.state_whens[j])
                with w.block(f"if st == 0 and {cok} and {c}:"):
                    self.operation_run(op)
        else:
            guard = "st == 0" if when is None else f"st == 0 and (he{when}[i] or hw{when}[i])"
            with w.block(f"if {guard}:"):
                if when is not None:
                    with w.block(f"if he{when}[i]:"):
                        self.fail(2, HOISTED_BASE + when)
                self.operation_run(op)
        self.current = None

    def operation_run(self, op: Operation) -> None:
        """An operation whose ``when`` holds: its key checks, then its body."""
        w = self.out
        j = op.index
        for part in self.key_parts_hoist[j]:
            with w.block(f"if he{part}[i]:"):
                self.fail(2, HOISTED_BASE + part)
        with w.block("if st == 0:"):
            w.line(f"ran{j} = True")
            table = self.flow.tables[op.table]
            null_key = self.reason(f"{op.label()}: null key {list(table.key_names)}")
            with w.block(f"if s{j}[i] < 0:"):
                self.fail(2, null_key)
            with w.block("else:"):
                if j in self.pre_read_ops:
                    self.pre_read_body(op)
                else:
                    self.operation_body(op)

    def window_body(self, op: Operation) -> None:
        """A window operation, as :meth:`SerialExecutor._window
        <etl_dataflows.executors.serial.SerialExecutor._window>`: the time checked, the entries
        at or before ``at - span`` dropped, the new entry appended (with values), and the
        aggregates over the key's entries left (see :mod:`.window_arrays`)."""
        w = self.out
        j, t = op.index, self.table_index(op.table)
        table = self.flow.tables[op.table]
        assert isinstance(table, WindowTable)
        slot = f"s{j}[i]"
        at_expr = op.at if op.at is not None else Col(TS)
        at, at_ok = self.expr(at_expr)
        null_at = self.reason(f"{op.label()}: window time is null")
        with w.block(f"if st == 0 and not {at_ok}:"):
            self.fail(2, null_at)
        head, tail, kept = w.tmp(), w.tmp(), w.tmp()
        w.line(f"{head} = w{t}h[{slot}]")
        w.line(f"{tail} = w{t}t[{slot}]")
        w.line(f"fnd{j} = {head} >= 0")
        w.line(f"ex{j} = fnd{j}")
        late = self.reason(
            f"{op.label()}: window entry at {{hoisted}} is older than the key's latest "
            "({number})",
            hoisted=self.hoist(at_expr),
        )
        with w.block(f"if st == 0 and fnd{j} and {at} < w{t}a[{tail}]:"):
            self.fail(1, late, number=f"w{t}a[{tail}]")
        w.line(f"{kept} = {head}")
        fits = f"st == 0 and {at} >= {INT64_MIN + table.span}"  # (at - span is an int64)
        with (
            w.block(f"if {fits}:"),
            w.block(f"while {kept} >= 0 and w{t}a[{kept}] <= {at} - {table.span}:"),
        ):
            w.line(f"{kept} = w{t}n[{kept}]")
        if op.values:
            self.window_append(op, at, head, tail, kept)
        self.window_aggregates(op, kept)

    def window_append(self, op: Operation, at: str, head: str, tail: str, kept: str) -> None:
        """Append the operation's entry after the entries ``kept`` (from pool position ``kept``
        to ``tail``; none if negative) and leave ``kept`` at the key's first entry."""
        w = self.out
        j, t = op.index, self.table_index(op.table)
        table = self.flow.tables[op.table]
        slot = f"s{j}[i]"
        new = self.new_values(op)
        with w.block("if st == 0:"):
            e = w.tmp()
            w.line(f"wr{j} = True")
            w.line(f"u{j}_head = {head}")
            w.line(f"u{j}_tail = {tail}")
            w.line(f"{e} = w{t}u[0]")
            w.line(f"w{t}u[0] = {e} + 1")
            w.line(f"w{t}a[{e}] = {at}")
            w.line(f"w{t}e[{e}] = seq[{t}]")
            w.line(f"seq[{t}] += 1")
            w.line(f"drew{t} = True")
            w.line(f"w{t}s[{e}] = {slot}")
            w.line(f"w{t}n[{e}] = -1")
            for column, kind in table.columns:
                v, ok = new.get(column, (_zero(kind), "False"))
                w.line(f"w{t}_{column}[{e}] = {v}")
                w.line(f"w{t}_{column}_v[{e}] = {ok}")
            with w.block(f"if {kept} < 0:"):
                w.line(f"w{t}h[{slot}] = {e}")
                w.line(f"{kept} = {e}")
            with w.block("else:"):
                w.line(f"w{t}h[{slot}] = {kept}")
                w.line(f"w{t}n[{tail}] = {e}")
            w.line(f"w{t}t[{slot}] = {e}")

    def window_aggregates(self, op: Operation, first: str) -> None:
        """The table's aggregates over the key's entries from pool position ``first`` on, as
        :func:`~etl_dataflows.executors.window_summary.aggregate_entries` computes them: nulls
        ignored; a max (min) is the first value, replaced only by a strictly greater (smaller)
        one (Python's ``max``), with the time of the entry that holds it."""
        w = self.out
        j, t = op.index, self.table_index(op.table)
        table = self.flow.tables[op.table]
        assert isinstance(table, WindowTable)
        kinds = table.value_types
        with w.block("if st == 0:"):
            found: dict[str, tuple[str, str, str]] = {}
            for name, agg in table.aggregates.items():
                has, value, when = w.tmp(), w.tmp(), w.tmp()
                w.line(f"{has} = False")
                w.line(f"{value} = {_zero(kinds[agg.column]) if agg.kind != 'count' else '0'}")
                w.line(f"{when} = np.int64(0)")
                found[name] = (has, value, when)
            e = w.tmp()
            w.line(f"{e} = {first}")
            with w.block(f"while {e} >= 0:"):
                for name, agg in table.aggregates.items():
                    has, value, when = found[name]
                    ok, v = f"w{t}_{agg.column}_v[{e}]", f"w{t}_{agg.column}[{e}]"
                    if agg.kind == "count":
                        with w.block(f"if {ok}:"):
                            w.line(f"{value} += 1")
                        continue
                    test = {
                        "max": f"not {has} or {v} > {value}",
                        "argmax": f"not {has} or {v} > {value}",
                        "min": f"not {has} or {v} < {value}",
                        "argmin": f"not {has} or {v} < {value}",
                        "first": f"not {has}",
                        "last": "True",
                    }[agg.kind]
                    with w.block(f"if {ok} and ({test}):"):
                        w.line(f"{has} = True")
                        w.line(f"{value} = {v}")
                        w.line(f"{when} = w{t}a[{e}]")
                w.line(f"{e} = w{t}n[{e}]")
            for name, agg in table.aggregates.items():
                has, value, when = found[name]
                if agg.kind == "count":
                    w.line(f"a{j}_{name} = np.int64({value})")
                    w.line(f"av{j}_{name} = True")
                else:
                    result = when if agg.kind in ("argmax", "argmin") else value
                    w.line(f"a{j}_{name} = {result}")
                    w.line(f"av{j}_{name} = {has}")

    def operation_body(self, op: Operation) -> None:
        w = self.out
        j, t = op.index, self.table_index(op.table)
        if op.kind == "window":
            self.window_body(op)
            return
        w.line(f"fnd{j} = t{t}_ex[s{j}[i]]")
        with w.block(f"if fnd{j}:"):
            self.load_row(op, "b")
        self.after_load(op)
        w.line(f"ex{j} = fnd{j}")
        with w.block(f"if fnd{j}:"):
            self.copy_row(op, "b", "o")
        missing = self.reason(f"{op.label()}: no row for key {{key}}", j)
        if op.kind == "read":
            if op.if_missing == "abort":
                with w.block(f"if not fnd{j}:"):
                    self.fail(1, missing)
            self.requires(op)
            with w.block("if st == 0:"):
                self.copy_row(op, "b", "a")
            return
        if op.kind == "delete":
            with w.block(f"if not fnd{j}:"):
                if op.if_missing == "abort":
                    self.fail(1, missing)
            with w.block("else:"):
                self.requires(op)
                with w.block("if st == 0:"):
                    w.line(f"wr{j} = True")
                    w.line(f"ex{j} = False")
                    if not self.op_mode:
                        w.line(f"u{j}_ex = True")
                    with w.block(f"if not {self.probe}:"):
                        w.line(f"t{t}_ex[s{j}[i]] = False")
            return
        if op.kind == "insert":
            exists = self.reason(f"{op.label()}: key {{key}} already exists", j)
            if op.if_exists == "abort":
                with w.block(f"if fnd{j}:"):
                    self.fail(1, exists)
                with w.block("else:"):
                    self.requires(op)
                    self.store(op, None)
            elif op.if_exists == "skip":
                with w.block(f"if fnd{j}:"):
                    self.copy_row(op, "b", "a")
                with w.block("else:"):
                    self.requires(op)
                    self.store(op, None)
            else:
                self.requires(op)
                with w.block(f"if fnd{j}:"):
                    self.store(op, "seen")
                with w.block("else:"):
                    self.store(op, None)
            return
        if op.kind == "update":
            with w.block(f"if not fnd{j}:"):
                if op.if_missing == "abort":
                    self.fail(1, missing)
                elif op.if_missing == "insert":
                    self.default_row(op)
            skip = op.if_missing == "skip"
            with w.block(
                f"if fnd{j} or {not skip}:" if op.if_missing != "abort" else "if st == 0:"
            ):
                self.requires(op)
                self.store(op, "seen")
            return
        # write: a whole new row; unspecified columns take their defaults
        self.requires(op)
        self.store(op, None)

    def emit(self) -> tuple[list[tuple[str, str]], dict[str, int], int | None]:
        w = self.out
        step = self.step
        kernel_outputs: list[tuple[str, str]] = []
        hoisted_outputs: dict[str, int] = {}
        emit_when_hoist = None
        if not (step.emit_columns or step.emit_input):
            return kernel_outputs, hoisted_outputs, emit_when_hoist
        schema = self.flow.schemas[step.id]
        with w.block("if st == 0:"):
            w.line("emit = True")
            if step.emit_when is not None:
                c, cok = self.expr(step.emit_when)
                w.line(f"emit = {cok} and {c}")
            with w.block("if st == 0 and emit:"):
                for name, expr in step.emit_columns.items():
                    kind = schema[name]
                    if is_event_only(expr) and not isinstance(expr, Lit):
                        k = self.hoist(expr)
                        self.need_rows(k)
                        hoisted_outputs[name] = k
                        with w.block(f"if he{k}[i]:"):
                            self.fail(2, HOISTED_BASE + k)
                        continue
                    v, ok = self.expr(expr, kind)
                    w.line(f"o_{name}[i] = {self.cast_to(v, self.types.of(expr), kind)}")
                    w.line(f"o_{name}_v[i] = {ok}")
                    kernel_outputs.append((name, _kernel_type(kind)))
            w.line("em[i] = st == 0 and emit")
        return kernel_outputs, hoisted_outputs, emit_when_hoist

    def rollback(self) -> None:
        w = self.out
        with w.block("if st != 0:"):
            for op in reversed(self.step.operations):
                if op.kind == "read":
                    continue
                j, t = op.index, self.table_index(op.table)
                table = self.flow.tables[op.table]
                if op.kind == "window":
                    with w.block(f"if wr{j}:"):
                        with w.block(f"if u{j}_tail >= 0:"):
                            w.line(f"w{t}n[u{j}_tail] = -1")
                        w.line(f"w{t}h[s{j}[i]] = u{j}_head")
                        w.line(f"w{t}t[s{j}[i]] = u{j}_tail")
                    continue
                assert isinstance(table, Table)
                with w.block(f"if wr{j}:"):
                    slot = f"s{j}[i]"
                    w.line(f"t{t}_ex[{slot}] = u{j}_ex")
                    if op.kind != "delete":
                        w.line(f"t{t}_sk[{slot}] = u{j}_sk")
                        for column, _ in table.columns:
                            w.line(f"t{t}_{column}[{slot}] = u{j}_{column}")
                            w.line(f"t{t}_{column}_v[{slot}] = u{j}_{column}_v")
            for t, name in enumerate(self.tables):
                if _draws_sequence(self.flow.tables[name]):
                    # Only a transaction that drew a key restores the sequence: the others may
                    # run beside one that holds the sequence (waves, chains).
                    with w.block(f"if drew{t}:"):
                        w.line(f"seq[{t}] = seq0_{t}")
        w.line("st_out[i] = st")
        w.line("rs_out[i] = rs")
        w.line("ev_out[i] = ev")
        if self.windows:
            w.line("iv_out[i] = iv")

    def generate(self) -> KernelSource:
        step = self.step
        self.hoist_keys_and_whens()
        self.declare()
        for op in step.operations:
            self.operation(op)
        return self._source()

    def hoist_keys_and_whens(self) -> None:
        """Keys and whens are hoisted first, so their indices are stable."""
        step = self.step
        self.key_parts_hoist = [[self.hoist(e) for e in op.key] for op in step.operations]
        self.key_hoist = [parts[0] for parts in self.key_parts_hoist]
        #: Extended: whens that depend on earlier operations (evaluated in the kernel).
        self.state_whens = {
            op.index: op.when
            for op in step.operations
            if op.when is not None and not is_event_only(op.when)
        }
        self.when_hoist: list[int | None] = [
            None if op.when is None or op.index in self.state_whens else self.hoist(op.when)
            for op in step.operations
        ]
        parts = [k for keys in self.key_parts_hoist for k in keys]
        for k in [*parts, *(w for w in self.when_hoist if w is not None)]:
            self._global.add(k)
        self.pre_columns = {j: self._pre_read_columns(j) for j in sorted(self.pre_read_ops)}

    def _source(self) -> KernelSource:
        step = self.step
        kernel_outputs, hoisted_outputs, emit_when_hoist = self.emit()
        self.rollback()
        body = self.out.lines
        writers = [op.index for op in step.operations if op.kind != "read"]
        header = "def txn(i, " + ", ".join(self.argument_names(kernel_outputs)) + "):"
        source = "\n".join([header, *body]) + "\n"
        return KernelSource(
            step=step.id,
            source=source,
            tables=self.tables,
            hoisted=self.hoisted,
            reasons=self.reasons,
            key_hoist=self.key_hoist,
            key_parts_hoist=self.key_parts_hoist,
            when_hoist=self.when_hoist,
            writers=writers,
            kernel_outputs=kernel_outputs,
            hoisted_outputs=hoisted_outputs,
            emit_when_hoist=emit_when_hoist,
            pre_reads=self.pre_columns,
        )

    def _pre_read_columns(self, j: int) -> list[str]:
        """The columns of pre-read ``j`` the step uses (results of ``j``, ``old`` in its
        requires)."""
        used = {column for op_index, column, _ in self.refs if op_index == j}
        for req in self.step.operations[j].requires:
            used |= {node.column for node in walk(req.condition) if isinstance(node, Old)}
        readable = self.columns(self.step.operations[j])
        return [column for column in readable if column in used]

    def argument_names(self, kernel_outputs: list[tuple[str, str]]) -> list[str]:
        names: list[str] = []
        for h in self.hoisted:
            coded = h.type == "string" and h.in_kernel and self.pool is not None
            if h.type in KERNEL_TYPES or coded:
                names += [f"h{h.index}", f"hv{h.index}"]
            names.append(f"he{h.index}")
        names += [f"hw{k}" for k in sorted({w for w in self.when_hoist if w is not None})]
        names += [f"s{op.index}" for op in self.step.operations]
        for j, columns in self.pre_columns.items():
            names.append(f"p{j}_ex")
            for column in columns:
                names += [f"p{j}_{column}", f"p{j}_{column}_v"]
        for t, name in enumerate(self.tables):
            table = self.flow.tables[name]
            if isinstance(table, WindowTable):
                names += [f"w{t}{part}" for part in WINDOW_PARTS]
                for column, _ in table.columns:
                    names += [f"w{t}_{column}", f"w{t}_{column}_v"]
                continue
            assert isinstance(table, Table)
            names += [f"t{t}_ex", f"t{t}_sk"]
            for column, _ in table.columns:
                names += [f"t{t}_{column}", f"t{t}_{column}_v"]
        names += ["seq", "st_out", "rs_out", "ev_out", "em"]
        if self.windows:
            names.append("iv_out")
        for name, _ in kernel_outputs:
            names += [f"o_{name}", f"o_{name}_v"]
        names += ["spin", "spin_sink"]
        return names


def _draws_sequence(table: StateTable) -> bool:
    """Whether a kernel draws numbers from ``table``'s sequence (surrogate keys, entry numbers)."""
    return isinstance(table, WindowTable) or (isinstance(table, Table) and bool(table.surrogate))


def generate_kernel(
    flow: CompiledDataflow,
    step: TransactionStep,
    pool: StringPool | None = None,
    pre_reads: frozenset[int] = frozenset(),
) -> tuple[KernelSource, list[str]]:
    """The kernel source of ``step`` and its argument names (after ``i``); with ``pool``, the
    extended form (see :mod:`.analysis`)."""
    generator = KernelGenerator(flow, step, pool, pre_reads)

    source = generator.generate()
    return source, generator.argument_names(source.kernel_outputs)


def kernel_module(kernel: KernelSource, args: list[str]) -> str:
    """A complete module: drivers whose loops contain the transaction body inline (a call per
    transaction with this many array arguments would cost more than the transaction).

    ``run_range(txns, lo, hi, ...)`` runs ``txns[lo:hi]`` in order without the GIL, so threads can
    run disjoint ranges of a wave at the same time. ``run_tickets(...)`` is the worker loop of the
    lock-based baselines: each worker claims the next transaction in timestamp order, waits for
    its turn on every lock it needs (per key, or per partition), runs it and releases the locks;
    with ``lock_ahead`` the lock requests are inserted at run time one transaction after the other
    (ordered lock-ahead 2PL), otherwise the turns were assigned when the batch was planned.
    """
    joined = ", ".join(args)
    body = kernel.source.split("\n", 1)[1]
    inline = "\n".join(
        "        " + line[4:] if line.strip() else line for line in body.splitlines()
    )
    locked = "\n".join(
        "        " + line[4:] if line.strip() else line for line in body.splitlines()
    )
    return f'''"""Generated by streamdi for step {kernel.step!r}; do not edit."""
import numba
import numpy as np

from etl_dataflows.executors.local.atomics import atomic_add, atomic_load, atomic_store
from etl_dataflows.executors.local.kernels import add_overflows, mul_overflows, sub_overflows
from etl_dataflows.executors.local.kernels import spin_loop as _spin


@numba.njit(nogil=True, cache=True, error_model="numpy")
def run_range(txns, lo, hi, {joined}):
    for n in range(lo, hi):
        i = txns[n]
{inline}


@numba.njit(nogil=True, cache=True, error_model="numpy")
def run_tickets(
    order, lock_ptr, lock_res, lock_turn, served, claim, insert_turn, next_turn, lock_ahead,
    {joined},
):
    total = order.shape[0]
    while True:
        n = atomic_add(claim, 0, 1)
        if n >= total:
            break
        i = order[n]
        lo = lock_ptr[i]
        hi = lock_ptr[i + 1]
        if lock_ahead:
            while atomic_load(insert_turn, 0) != n:
                pass
            for e in range(lo, hi):
                lock_turn[e] = next_turn[lock_res[e]]
                next_turn[lock_res[e]] += 1
            atomic_store(insert_turn, 0, n + 1)
        for e in range(lo, hi):
            while atomic_load(served, lock_res[e]) != lock_turn[e]:
                pass
{locked}
        for e in range(lo, hi):
            atomic_add(served, lock_res[e], 1)
'''
