"""Which parts of a dataflow the compiled path can run, and what it must precompute.

A transactional step is *compiled* when every table it touches is a plain keyed :class:`Table` with
one ``int64`` or ``string`` key column and numeric/bool/timestamp/date value columns, its operations
are ``read`` (not as-of), ``write``, ``update``, ``insert`` or ``delete``, its keys and ``when``
conditions depend on the event only, and every value that depends on state is numeric or boolean
(strings and Python functions may appear only in parts that depend on the event alone). A table is
compiled when every step touching it is; the rest run on the serial executor's code, which is the
oracle itself, so the local executor is exact either way.

Event-only subexpressions (no ``old(...)`` and no operation result inside) are *hoisted*: evaluated
column-at-a-time before the kernel runs, so the kernel only sees arrays.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from etl_dataflows.dataflow import CompiledDataflow, OutputSchema
from etl_dataflows.expressions import (
    Call,
    Cast,
    Col,
    Expr,
    Func,
    Lit,
    Old,
    Ref,
    infer_type,
    walk,
)
from etl_dataflows.tables import StateTable, Table
from etl_dataflows.transaction import Operation, TransactionStep
from etl_dataflows.types import META_TYPES, ColumnType

KERNEL_TYPES: frozenset[str] = frozenset({"int64", "float64", "bool", "timestamp", "date"})
COMPILED_KINDS = frozenset({"read", "write", "update", "insert", "delete"})


def is_event_only(expr: Expr) -> bool:
    """Whether ``expr`` depends on the event alone (no state, no operation results)."""
    return not any(isinstance(node, Old | Ref) for node in walk(expr))


def table_is_compilable(table: StateTable) -> bool:
    if not isinstance(table, Table) or len(table.key) != 1:
        return False
    return all(kind in KERNEL_TYPES for _, kind in table.columns)


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


def _check_state_expr(
    expr: Expr, types: TypeOf, table: StateTable | None, where: str, out: list[str]
) -> None:
    """Record why ``expr`` cannot run in a kernel, if it cannot."""
    if not is_event_only(expr):
        for root in hoistable_roots(expr):
            if types.of(root, table) not in KERNEL_TYPES:
                out.append(f"{where}: an event value of type {types.of(root, table)} meets state")
                return
    for node in walk(expr):
        if is_event_only(node):
            continue
        kind = types.of(node, table)
        if kind not in KERNEL_TYPES:
            out.append(f"{where}: state-dependent value of type {kind}")
            return
        if isinstance(node, Call):
            out.append(f"{where}: a Python function over state values")
            return
        if isinstance(node, Cast) and node.to == "string":
            out.append(f"{where}: a cast to string of a state value")
            return
        if isinstance(node, Func) and node.name == "concat":
            out.append(f"{where}: concat of state values")
            return


def analyze_step(
    flow: CompiledDataflow, step: TransactionStep, compiled_tables: set[str]
) -> StepAnalysis:
    """Decide whether ``step`` can be compiled given the tables that can."""
    reasons: list[str] = []
    types = TypeOf(flow, step)
    for op in step.operations:
        table = flow.tables[op.table]
        if op.table not in compiled_tables:
            reasons.append(f"{op.label()}: table {op.table!r} is not compiled")
            continue
        if op.kind not in COMPILED_KINDS:
            reasons.append(f"{op.label()}: {op.kind} is not compiled")
        if op.as_of is not None:
            reasons.append(f"{op.label()}: as_of reads are not compiled")
        for expr in op.key:
            if not is_event_only(expr):
                reasons.append(f"{op.label()}: its key depends on state")
        if op.when is not None and not is_event_only(op.when):
            reasons.append(f"{op.label()}: its when depends on state")
        for expr in [*op.values.values(), *(r.condition for r in op.requires)]:
            _check_state_expr(expr, types, table, op.label(), reasons)
    for name, expr in step.emit_columns.items():
        _check_state_expr(expr, types, None, f"output {name!r}", reasons)
    if step.emit_when is not None:
        _check_state_expr(step.emit_when, types, None, "emit when", reasons)
    return StepAnalysis(step.id, not reasons, reasons)


def analyze(flow: CompiledDataflow) -> tuple[set[str], dict[str, StepAnalysis]]:
    """The compiled tables and, per transactional step, whether (and why not) it is compiled."""
    compiled = {name for name, table in flow.tables.items() if table_is_compilable(table)}
    steps = flow.transactional_steps()
    while True:
        results = {s.id: analyze_step(flow, s, compiled) for s in steps}
        demoted = {op.table for s in steps if not results[s.id].compiled for op in s.operations}
        if not (demoted & compiled):
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
