"""Which parts of a dataflow the compiled path can run, and what it must precompute.

A transactional step is *compiled* when every table it touches is a plain keyed :class:`Table` with
one ``int64`` or ``string`` key column and numeric/bool/timestamp/date value columns, its operations
are ``read`` (not as-of), ``write``, ``update``, ``insert`` or ``delete``, its keys and ``when``
conditions depend on the event only, and every value that depends on state is numeric or boolean
(strings and Python functions may appear only in parts that depend on the event alone, and a Python
function must declare its result type with ``udf(..., returns=...)``). A table is compiled when
every step touching it is; the rest run on the serial executor's code, which is the oracle itself,
so the local executor is exact either way (extended compilation relaxes the rule, see below).

Event-only subexpressions (no ``old(...)`` and no operation result inside) are *hoisted*: evaluated
column-at-a-time before the kernel runs, so the kernel only sees arrays.

*Extended* compilation (the local executor's; the Spark executor distributes only the plain form)
also takes:

- tables with several key columns, and string key and value columns (strings move through kernels
  as codes of a :class:`~etl_dataflows.executors.local.strings.StringPool`);
- state-dependent string values that are only moved or compared for equality: a column read or
  kept, a literal, ``if_else``/``coalesce`` of those, ``==``/``!=``, ``is_in``, ``is_null``;
- ``when`` conditions over the results of earlier operations (evaluated in the kernel);
- *pre-reads*: a plain ``read`` (not as-of) of a table the kernel does not hold (a history table,
  or a table some interpreted step writes) when no operation of the step writes that table. Within
  a batch the steps run one after the other, so such a table does not change while the step runs:
  the rows are looked up for the whole batch before the kernel starts and passed in as arrays;
- *windows*: ``window`` operations on a :class:`~etl_dataflows.tables.WindowTable` whose value
  columns are numeric, boolean, timestamp or date, whose aggregates are not ``sum`` (Python sums
  floats in ways that change between versions and ints without bound), with a time (``at``) that
  depends on the event alone and no ``require``; the table is held as in
  :mod:`~etl_dataflows.executors.local.window_arrays`. A step with a window runs sequentially.

A step that needs any of these is marked ``extended`` and runs sequentially or in waves.

Extended compilation also *shares* tables: a compilable plain table with one key column that some
compiled step uses stays compiled even when interpreted steps touch it too; those steps reach its
arrays through :class:`~etl_dataflows.executors.local.shared_rows.SharedRows` (so one interpreted
step, such as TPC-DI's ``apply_customer`` setting IsCustomer on a few prospects, no longer makes
every step over ``prospect`` interpreted). A table no compiled step uses goes to the serial code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from etl_dataflows.dataflow import CompiledDataflow, OutputSchema
from etl_dataflows.expressions import (
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
    infer_type,
    walk,
)
from etl_dataflows.tables import HistoryTable, StateTable, Table, WindowTable
from etl_dataflows.transaction import Operation, TransactionStep
from etl_dataflows.types import META_TYPES, ColumnType

KERNEL_TYPES: frozenset[str] = frozenset({"int64", "float64", "bool", "timestamp", "date"})
#: Types an extended kernel holds: strings as pool codes.
CODED_TYPES: frozenset[str] = KERNEL_TYPES | {"string"}
COMPILED_KINDS = frozenset({"read", "write", "update", "insert", "delete", "window"})


def is_event_only(expr: Expr) -> bool:
    """Whether ``expr`` depends on the event alone (no state, no operation results)."""
    return not any(isinstance(node, Old | Ref) for node in walk(expr))


def table_is_compilable(table: StateTable, extended: bool = False) -> bool:
    if isinstance(table, WindowTable):
        return extended and window_is_compilable(table)
    if not isinstance(table, Table) or not table.key:
        return False
    if not extended:
        return len(table.key) == 1 and all(kind in KERNEL_TYPES for _, kind in table.columns)
    return all(kind in ("int64", "string") for _, kind in table.key) and all(
        kind in CODED_TYPES for _, kind in table.columns
    )


def window_is_compilable(table: WindowTable) -> bool:
    """Whether the extended form holds window ``table`` (see the module docstring)."""
    return (
        bool(table.key)
        and all(kind in ("int64", "string") for _, kind in table.key)
        and all(kind in KERNEL_TYPES for _, kind in table.columns)
        and all(agg.kind != "sum" for agg in table.aggregates.values())
    )


def needs_extension(table: StateTable) -> bool:
    """Whether a compiled ``table`` needs extended compilation (several keys, strings, or a
    window)."""
    if isinstance(table, WindowTable):
        return True
    return len(table.key) != 1 or any(kind == "string" for _, kind in table.columns)


def is_pre_read(op: Operation, step: TransactionStep, flow: CompiledDataflow) -> bool:
    """Whether ``op`` can be a pre-read (see the module docstring) if its table is not compiled."""
    table = flow.tables[op.table]
    if op.kind != "read" or op.as_of is not None or not isinstance(table, Table | HistoryTable):
        return False
    return all(other.kind == "read" for other in step.operations if other.table == op.table)


class TypeOf:
    """The inferred type of every node of a step's expressions (for code generation)."""

    def __init__(self, flow: CompiledDataflow, step: TransactionStep) -> None:
        self._schema: OutputSchema = flow.schemas[step.input or ""]
        self._tables = flow.tables
        self._ops = step.operations
        self._memo: dict[int, ColumnType | None] = {}
        self.current_table: StateTable | None = None

    def leaf(self, node: Expr) -> ColumnType | None:
        if isinstance(node, Col):
            return META_TYPES.get(node.name) or self._schema.get(node.name)
        if isinstance(node, Old):
            assert self.current_table is not None
            return self.current_table.readable_types()[node.column]
        if isinstance(node, Ref):
            if node.column == "found":
                return "bool"
            if node.column == "count":
                return "int64"
            return self._tables[self._ops[node.op_index].table].readable_types()[node.column]
        return None

    def of(self, expr: Expr, table: StateTable | None = None) -> ColumnType | None:
        key = id(expr)
        if key not in self._memo:
            previous = self.current_table
            if table is not None:
                self.current_table = table
            try:
                self._memo[key] = infer_type(expr, self.leaf)
            finally:
                self.current_table = previous
        return self._memo[key]


@dataclass
class StepAnalysis:
    """Why a step is or is not compiled."""

    step: str
    compiled: bool
    reasons: list[str] = field(default_factory=list)
    #: Compiled with extensions (see the module docstring): sequential or waves only.
    extended: bool = False
    #: Operations that are pre-reads.
    pre_reads: frozenset[int] = frozenset()


#: Where a string-typed child of a state-dependent node may appear in an extended kernel.
_STRING_PARENTS = (IfElse, IsIn)


def _string_child_allowed(node: Expr, types: TypeOf, table: StateTable | None) -> bool:
    """Whether every string-typed child of the state-dependent ``node`` is one an extended kernel
    can hold as a code (moved or compared for equality)."""
    if isinstance(node, _STRING_PARENTS):
        return True
    if isinstance(node, Func) and node.name == "coalesce":
        return True
    if isinstance(node, BinOp) and node.op in ("==", "!="):
        return True
    if isinstance(node, UnOp) and node.op == "is_null":
        return True
    return not any(types.of(child, table) == "string" for child in node.children())


def _check_state_expr(
    expr: Expr,
    types: TypeOf,
    table: StateTable | None,
    where: str,
    out: list[str],
    extended: bool = False,
    uses: list[str] | None = None,
) -> None:
    """Record why ``expr`` cannot run in a kernel, if it cannot (and in ``uses`` the extensions it
    needs, when ``extended``)."""
    allowed = CODED_TYPES if extended else KERNEL_TYPES
    if not is_event_only(expr):
        for root in hoistable_roots(expr):
            kind = types.of(root, table)
            if kind not in allowed:
                out.append(f"{where}: an event value of type {kind} meets state")
                return
            if kind == "string" and uses is not None:
                uses.append(f"{where}: string value")
    for node in walk(expr):
        if is_event_only(node):
            continue
        kind = types.of(node, table)
        if kind not in allowed:
            out.append(f"{where}: state-dependent value of type {kind}")
            return
        if extended and not _string_child_allowed(node, types, table):
            out.append(f"{where}: a state-dependent string used other than moved or compared")
            return
        if kind == "string" and uses is not None:
            uses.append(f"{where}: string value")
        if isinstance(node, Call):
            out.append(f"{where}: a Python function over state values")
            return
        if isinstance(node, Cast) and node.to == "string":
            out.append(f"{where}: a cast to string of a state value")
            return
        if isinstance(node, Func) and node.name == "concat":
            out.append(f"{where}: concat of state values")
            return


def _check_declared(exprs: Iterable[Expr], where: str, out: list[str]) -> None:
    """Record a Python function without a declared type (``udf(..., returns=None)``) in
    ``exprs``: a kernel holds values of one static type, while such a function's values keep
    whatever type each row's call gives (a float stored in an ``int64`` column fails that row
    only), which only the serial code reproduces."""
    for expr in exprs:
        for node in walk(expr):
            if isinstance(node, Call) and node.returns is None:
                name = getattr(node.fn, "__name__", "function")
                out.append(f"{where}: {name}() has no declared type (udf(..., returns=...))")
                return


def analyze_step(
    flow: CompiledDataflow,
    step: TransactionStep,
    compiled_tables: set[str],
    extended: bool = False,
) -> StepAnalysis:
    """Decide whether ``step`` can be compiled given the tables that can."""
    reasons: list[str] = []
    uses: list[str] = []
    pre_reads: set[int] = set()
    types = TypeOf(flow, step)
    for op in step.operations:
        table = flow.tables[op.table]
        if op.table not in compiled_tables:
            if not (extended and is_pre_read(op, step, flow)):
                reasons.append(f"{op.label()}: table {op.table!r} is not compiled")
                continue
            for expr, (name, kind) in zip(op.key, table.key, strict=True):
                if types.of(expr) != kind:
                    reasons.append(f"{op.label()}: key {name!r} is not of type {kind}")
            pre_reads.add(op.index)
            uses.append(f"{op.label()}: pre-read")

        elif needs_extension(table):
            window = isinstance(table, WindowTable)
            held = "is a window" if window else "has several keys or strings"
            uses.append(f"{op.label()}: table {op.table!r} {held}")
        if op.kind not in COMPILED_KINDS:
            reasons.append(f"{op.label()}: {op.kind} is not compiled")
        if op.as_of is not None:
            reasons.append(f"{op.label()}: as_of reads are not compiled")
        if op.kind == "window":
            if op.at is not None and (
                not is_event_only(op.at) or types.of(op.at) not in ("int64", "timestamp")
            ):
                reasons.append(f"{op.label()}: its time is not an event's int64 or timestamp")
            if op.requires:
                reasons.append(f"{op.label()}: require on a window is not compiled")
        for expr in op.key:
            if not is_event_only(expr):
                reasons.append(f"{op.label()}: its key depends on state")
        if op.when is not None and not is_event_only(op.when):
            if not extended or any(isinstance(node, Old) for node in walk(op.when)):
                reasons.append(f"{op.label()}: its when depends on state")
            else:
                uses.append(f"{op.label()}: a when over earlier operations")
                _check_state_expr(op.when, types, None, op.label(), reasons, extended, uses)
        for expr in [*op.values.values(), *(r.condition for r in op.requires)]:
            _check_state_expr(expr, types, table, op.label(), reasons, extended, uses)
        _check_declared(op.expressions(), op.label(), reasons)
    for name, expr in step.emit_columns.items():
        _check_state_expr(expr, types, None, f"output {name!r}", reasons, extended, uses)
    if step.emit_when is not None:
        _check_state_expr(step.emit_when, types, None, "emit when", reasons, extended, uses)
    emits = [*step.emit_columns.values()]
    if step.emit_when is not None:
        emits.append(step.emit_when)
    _check_declared(emits, "emit", reasons)
    return StepAnalysis(step.id, not reasons, reasons, bool(uses), frozenset(pre_reads))


def is_shareable(table: StateTable) -> bool:
    """Whether interpreted steps can reach ``table`` when it is compiled (extended form only)."""
    return isinstance(table, Table) and len(table.key) == 1


def shared_tables(
    flow: CompiledDataflow, compiled: set[str], results: Mapping[str, StepAnalysis]
) -> set[str]:
    """The compiled tables some interpreted step touches (see the module docstring)."""
    return {
        op.table
        for step in flow.transactional_steps()
        if not results[step.id].compiled
        for op in step.operations
        if op.table in compiled
    }


def analyze(
    flow: CompiledDataflow, extended: bool = False
) -> tuple[set[str], dict[str, StepAnalysis]]:
    """The compiled tables and, per transactional step, whether (and why not) it is compiled
    (``extended``: with the extensions of the module docstring, shared tables included). A step's
    reasons start with those that first kept it from compiling (a later round, with its tables
    demoted, would only say "table ... is not compiled")."""
    compiled = {name for name, table in flow.tables.items() if table_is_compilable(table, extended)}
    steps = flow.transactional_steps()
    first: dict[str, list[str]] = {}
    while True:
        results = {s.id: analyze_step(flow, s, compiled, extended) for s in steps}
        for step_id, result in results.items():
            if result.reasons:
                first.setdefault(step_id, result.reasons)
        demoted = {
            op.table
            for s in steps
            if not results[s.id].compiled
            for op in s.operations
            if not (extended and is_shareable(flow.tables[op.table]))
        }
        if extended:  # a table no compiled step uses is the serial code's
            used = {
                op.table
                for s in steps
                if results[s.id].compiled
                for op in s.operations
                if op.index not in results[s.id].pre_reads
            }
            demoted |= compiled - used
        if not (demoted & compiled):
            for step_id, result in results.items():
                if not result.compiled:
                    earlier = first[step_id]
                    result.reasons = [*earlier, *(r for r in result.reasons if r not in earlier)]
            return compiled, results
        compiled -= demoted


def hoistable_roots(expr: Expr) -> list[Expr]:
    """The maximal event-only subexpressions of ``expr`` (literals excluded)."""
    if is_event_only(expr):
        return [] if isinstance(expr, Lit) else [expr]
    roots: list[Expr] = []
    for child in expr.children():
        roots.extend(hoistable_roots(child))
    return roots


def op_reads(op: Operation) -> list[Expr]:
    """Expressions of ``op`` evaluated inside the kernel (values and conditions)."""
    return [*op.values.values(), *(r.condition for r in op.requires)]


TableLookup = Callable[[str], StateTable]
Types = Mapping[str, ColumnType]
