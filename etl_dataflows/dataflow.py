"""Dataflows: a DAG of named steps from sources to sinks, with declared state tables.

::

    flow = Dataflow("ledger")
    accounts = flow.table("accounts", key={"id": "int64"}, columns={"balance": "int64"})
    flow.source("transfers", schema={"src": "int64", "dst": "int64", "amount": "int64"})
    flow.validate("check", {"amount must be positive": col("amount") > 0})
    t = flow.transact("transfer")
    ...
    flow.sink("balances")
    compiled = flow.build()

Stateless steps (:meth:`Dataflow.map`, ``filter``, ``flat_map``, ``validate``, ``merge``) transform
a batch's columns; transactional steps (:meth:`Dataflow.transact`) issue one state transaction per
row. ``input=`` names the upstream step and defaults to the step declared just before. Within a
batch, steps run in topological order (ties in declaration order), so a dimension step declared
before a fact step runs first (S-Store's ordering).

:meth:`Dataflow.build` checks the whole definition — unknown inputs, cycles, columns a step reads
that its input does not have, types of keys and values — and raises
:class:`~etl_dataflows.exceptions.DataflowDefinitionError` naming the step, before any data flows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pyarrow as pa

from etl_dataflows.exceptions import DataflowDefinitionError
from etl_dataflows.expressions import (
    Col,
    Expr,
    ExpressionTypeError,
    Lit,
    Old,
    Ref,
    describe,
    infer_type,
    walk,
)
from etl_dataflows.tables import (
    Aggregate,
    HistoryTable,
    Period,
    StateTable,
    Table,
    WindowTable,
    make_columns,
    make_key,
)
from etl_dataflows.transaction import Operation, TransactionStep
from etl_dataflows.types import (
    META_COLUMNS,
    META_TYPES,
    ColumnType,
    SchemaSpec,
    accepts,
    to_schema,
)

OutputSchema = dict[str, ColumnType | None]
_T = TypeVar("_T", bound=StateTable)
TableFn = Callable[[pa.Table], pa.Table]
RowFn = Callable[[dict[str, Any]], Any]
MaskFn = Callable[[pa.Table], Any]
#: An upgrade's migration function: Arrow rows of a state table's old image in, rows of its new
#: image out (:meth:`Dataflow.migrate`).
MigrateFn = Callable[[pa.Table], pa.Table]


@dataclass
class SourceStep:
    id: str
    schema: dict[str, ColumnType]


@dataclass
class MapStep:
    """``fn(table) -> table`` with the same rows (or ``fn(row) -> row`` when ``per_row``)."""

    id: str
    input: str | None
    fn: Callable[[Any], Any]
    schema: dict[str, ColumnType] | None
    per_row: bool


@dataclass
class FilterStep:
    """Keeps rows where the predicate is true (an expression or ``fn(table) -> mask``)."""

    id: str
    input: str | None
    predicate: Expr | MaskFn


@dataclass
class FlatMapStep:
    """``fn(row) -> iterable of rows`` (per_row) or ``fn(table) -> table with _parent``."""

    id: str
    input: str | None
    fn: Callable[[Any], Any]
    schema: dict[str, ColumnType]
    per_row: bool


@dataclass
class ValidateStep:
    """Routes rows failing any check to the dead-letter output with the failed checks' reasons."""

    id: str
    input: str | None
    checks: list[tuple[str, Expr | MaskFn]]


@dataclass
class MergeStep:
    """Union of several inputs by column name (missing columns are null)."""

    id: str
    inputs: list[str]


@dataclass
class SinkStep:
    """A named output of the dataflow: its input's rows are delivered in the batch result."""

    id: str
    input: str | None


Step = (
    SourceStep
    | MapStep
    | FilterStep
    | FlatMapStep
    | ValidateStep
    | MergeStep
    | TransactionStep
    | SinkStep
)


def step_inputs(step: Step) -> list[str]:
    """Ids of the steps ``step`` reads from."""
    if isinstance(step, SourceStep):
        return []
    if isinstance(step, MergeStep):
        return list(step.inputs)
    return [step.input] if step.input is not None else []


@dataclass(frozen=True)
class CompiledDataflow:
    """A validated, immutable dataflow, ready for an executor."""

    name: str
    tables: Mapping[str, StateTable]
    sources: tuple[str, ...]
    steps: tuple[Step, ...]
    schemas: Mapping[str, OutputSchema]
    sinks: tuple[str, ...]
    consumers: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    renames: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Per state table, ``{old column: new column}`` an upgrade renames
    (:meth:`Dataflow.rename_column`)."""
    migrations: Mapping[str, MigrateFn] = field(default_factory=dict)
    """Per state table, the user function an upgrade rewrites its stored rows with
    (:meth:`Dataflow.migrate`)."""

    def step(self, step_id: str) -> Step:
        for step in self.steps:
            if step.id == step_id:
                return step
        raise KeyError(step_id)

    def source_index(self, source: str) -> int:
        return self.sources.index(source)

    def transactional_steps(self) -> list[TransactionStep]:
        return [s for s in self.steps if isinstance(s, TransactionStep)]


class Dataflow:
    """A dataflow under definition; see the module docstring."""

    def __init__(self, name: str) -> None:
        if not name:
            raise DataflowDefinitionError("a dataflow needs a name")
        self.name = name
        self._steps: dict[str, Step] = {}
        self._tables: dict[str, StateTable] = {}
        self._last: str | None = None
        self._renames: dict[str, dict[str, str]] = {}
        self._migrations: dict[str, MigrateFn] = {}

    # -- state tables ---------------------------------------------------------------------------

    def table(
        self,
        name: str,
        *,
        key: Mapping[str, str] | tuple[str, str],
        columns: Mapping[str, str],
        surrogate: str | None = None,
        surrogate_start: int = 1,
        indexes: Iterable[str] = (),
        defaults: Mapping[str, Any] | None = None,
        fills: Mapping[str, Expr] | None = None,
    ) -> Table:
        """Declare a keyed state table (one current row per key).

        ``defaults`` fill value columns a new row does not set; ``fills`` are expressions over a
        row's other columns (``{"total": col("price") * col("qty")}``) that fill a column an
        upgrade adds in the rows already stored (without one, such rows take the default, or
        null)."""
        return self._declare(
            name,
            lambda: Table(
                name=name,
                key=make_key("table", key),
                columns=make_columns("table", columns),
                indexes=tuple(indexes),
                defaults=dict(defaults or {}),
                fills=dict(fills or {}),
                surrogate=surrogate,
                surrogate_start=surrogate_start,
            ),
        )

    def history_table(
        self,
        name: str,
        *,
        key: Mapping[str, str] | tuple[str, str],
        columns: Mapping[str, str],
        surrogate: str = "sk",
        surrogate_start: int = 1,
        effective: str = "effective_date",
        end: str = "end_date",
        current: str = "is_current",
        period: Period = "date",
        indexes: Iterable[str] = (),
        defaults: Mapping[str, Any] | None = None,
        fills: Mapping[str, Expr] | None = None,
    ) -> HistoryTable:
        """Declare a history-tracked (SCD type 2) table (``defaults`` and ``fills`` as for
        :meth:`table`)."""
        return self._declare(
            name,
            lambda: HistoryTable(
                name=name,
                key=make_key("history", key),
                columns=make_columns("history", columns),
                indexes=tuple(indexes),
                defaults=dict(defaults or {}),
                fills=dict(fills or {}),
                surrogate=surrogate,
                surrogate_start=surrogate_start,
                effective=effective,
                end=end,
                current=current,
                period=period,
            ),
        )

    def window_table(
        self,
        name: str,
        *,
        key: Mapping[str, str] | tuple[str, str],
        columns: Mapping[str, str],
        span: int,
        aggregates: Mapping[str, Aggregate | tuple[str, str]],
    ) -> WindowTable:
        """Declare a keyed event-time window over the last ``span`` µs with named aggregates
        (``{"high": ("max", "price"), "high_at": ("argmax", "price")}``)."""
        aggs = {
            n: a if isinstance(a, Aggregate) else Aggregate(a[0], a[1])  # type: ignore[arg-type]
            for n, a in aggregates.items()
        }
        return self._declare(
            name,
            lambda: WindowTable(
                name=name,
                key=make_key("window", key),
                columns=make_columns("window", columns),
                span=span,
                aggregates=aggs,
            ),
        )

    def _declare(self, name: str, make: Callable[[], _T]) -> _T:
        if name in self._tables:
            raise DataflowDefinitionError(f"state table {name!r} is declared twice")
        try:
            table = make()
        except ValueError as exc:
            raise DataflowDefinitionError(str(exc)) from exc
        self._tables[name] = table
        return table

    def _resolve_table(self, ref: object, step: str) -> StateTable:
        name = ref if isinstance(ref, str) else getattr(ref, "name", None)
        table = self._tables.get(name) if isinstance(name, str) else None
        if table is None or (not isinstance(ref, str) and table is not ref):
            raise DataflowDefinitionError(
                f"state table {name!r} is not declared in dataflow {self.name!r}; declare it with "
                "flow.table(...), flow.history_table(...) or flow.window_table(...)",
                step=step,
            )
        return table

    # -- upgrades ---------------------------------------------------------------------------------

    def rename_column(self, table: str, old: str, new: str) -> None:
        """Declare that column ``old`` of state table ``table`` is now called ``new``: an upgrade
        renames it in staging and every warehouse, keeping its values (without this, a rename
        reads as a column removed and one added, which an upgrade refuses)."""
        renames = self._renames.setdefault(table, {})
        if old in renames or new in renames.values():
            raise DataflowDefinitionError(f"state table {table!r}: column {old!r} renamed twice")
        renames[old] = new

    def migrate(self, table: str, fn: MigrateFn) -> None:
        """Declare how an upgrade rewrites the rows state table ``table`` holds: ``fn`` takes
        Arrow batches of rows in the table's old image (the image columns of the stored
        version) and returns rows of its new image. It runs only for a change an upgrade cannot
        make by itself (a key changed, a type narrowed, a column dropped), in staging and in
        every warehouse, so it must be deterministic."""
        if table in self._migrations:
            raise DataflowDefinitionError(f"state table {table!r} has two migration functions")
        self._migrations[table] = fn

    # -- steps ----------------------------------------------------------------------------------

    def source(self, step_id: str, schema: SchemaSpec) -> str:
        """An input stream with a declared schema; events also carry ``_ts`` and ``_pos``."""
        try:
            columns = to_schema(schema)
        except (TypeError, ValueError) as exc:
            raise DataflowDefinitionError(str(exc), step=step_id) from exc
        for name in columns:
            if name.startswith("_"):
                raise DataflowDefinitionError(
                    f"column {name!r}: names starting with '_' are reserved", step=step_id
                )
        return self._add(SourceStep(step_id, columns))

    def map(
        self,
        step_id: str,
        fn: Callable[[Any], Any],
        *,
        input: str | None = None,  # noqa: A002
        schema: SchemaSpec | None = None,
        per_row: bool = False,
    ) -> str:
        """Transform rows: ``fn(table) -> table`` with the same number of rows, or
        ``fn(row_dict) -> row_dict`` with ``per_row=True``. ``schema`` declares the output
        columns (default: the input's). A row whose transformation raises goes to the dead
        letters; the rest go on."""
        out = None if schema is None else self._schema(step_id, schema)
        return self._add(MapStep(step_id, self._input(input), fn, out, per_row))

    def filter(
        self,
        step_id: str,
        predicate: Expr | MaskFn,
        *,
        input: str | None = None,  # noqa: A002
    ) -> str:
        """Keep rows where ``predicate`` (an expression, or ``fn(table) -> bool mask``) is true."""
        return self._add(FilterStep(step_id, self._input(input), predicate))

    def flat_map(
        self,
        step_id: str,
        fn: Callable[[Any], Any],
        *,
        schema: SchemaSpec,
        input: str | None = None,  # noqa: A002
        per_row: bool = True,
    ) -> str:
        """Zero or more output rows per input row: ``fn(row_dict) -> iterable of row dicts``, or
        with ``per_row=False`` ``fn(table) -> table`` carrying an int ``_parent`` column (the
        input row each output row comes from). Output rows inherit ``_ts``/``_pos``."""
        return self._add(
            FlatMapStep(step_id, self._input(input), fn, self._schema(step_id, schema), per_row)
        )

    def validate(
        self,
        step_id: str,
        checks: Mapping[str, Expr | MaskFn],
        *,
        input: str | None = None,  # noqa: A002
    ) -> str:
        """Validate-and-route: rows for which a check is not true go to the dead letters with
        the reasons (the check names) of every failed check; valid rows go on."""
        if not checks:
            raise DataflowDefinitionError("validate needs at least one check", step=step_id)
        return self._add(ValidateStep(step_id, self._input(input), list(checks.items())))

    def merge(self, step_id: str, inputs: Iterable[str]) -> str:
        """Union several inputs by column name into one stream (ties in ``_ts`` keep the order of
        ``inputs``); a column's type must agree across inputs."""
        names = list(inputs)
        if len(names) < 2:
            raise DataflowDefinitionError("merge needs at least two inputs", step=step_id)
        return self._add(MergeStep(step_id, names))

    def transact(self, step_id: str, *, input: str | None = None) -> TransactionStep:  # noqa: A002
        """A transactional step: declare its operations on the returned builder."""
        step = TransactionStep(step_id, self._input(input), self._resolve_table)
        self._add(step)
        return step

    def sink(self, name: str, *, input: str | None = None) -> str:  # noqa: A002
        """Deliver the input step's rows as the batch result's output ``name``."""
        step = SinkStep(name, self._input(input))
        self._check_new_id(name)
        self._steps[name] = step
        return name

    def _schema(self, step_id: str, schema: SchemaSpec) -> dict[str, ColumnType]:
        try:
            columns = to_schema(schema)
        except (TypeError, ValueError) as exc:
            raise DataflowDefinitionError(str(exc), step=step_id) from exc
        return {n: t for n, t in columns.items() if n not in META_COLUMNS}

    def _input(self, given: str | None) -> str | None:
        return given if given is not None else self._last

    def _check_new_id(self, step_id: str) -> None:
        if not isinstance(step_id, str) or not step_id:
            raise DataflowDefinitionError(f"step id {step_id!r} must be a non-empty string")
        if step_id in self._steps:
            raise DataflowDefinitionError("duplicate step id", step=step_id)

    def _add(self, step: Step) -> str:
        self._check_new_id(step.id)
        self._steps[step.id] = step
        self._last = step.id
        return step.id

    # -- validation -------------------------------------------------------------------------------

    def build(self) -> CompiledDataflow:
        """Validate the whole dataflow and freeze it (see the module docstring)."""
        steps = self._steps
        if not any(isinstance(s, SourceStep) for s in steps.values()):
            raise DataflowDefinitionError(f"dataflow {self.name!r} has no source")
        for step in steps.values():
            if not isinstance(step, SourceStep) and not step_inputs(step):
                raise DataflowDefinitionError("has no input", step=step.id)
            for upstream in step_inputs(step):
                if upstream not in steps:
                    raise DataflowDefinitionError(f"input {upstream!r} is not a step", step=step.id)
                if isinstance(steps[upstream], SinkStep):
                    raise DataflowDefinitionError(
                        f"input {upstream!r} is a sink; read its input step instead", step=step.id
                    )
        self._check_upgrades()
        order = self._topological_order()
        schemas: dict[str, OutputSchema] = {}
        for step_id in order:
            step = steps[step_id]
            schemas[step_id] = self._output_schema(step, schemas)
        consumers: dict[str, list[str]] = {s: [] for s in order}
        for step_id in order:
            for upstream in step_inputs(steps[step_id]):
                consumers[upstream].append(step_id)
        return CompiledDataflow(
            name=self.name,
            tables=dict(self._tables),
            sources=tuple(s for s in order if isinstance(steps[s], SourceStep)),
            steps=tuple(steps[s] for s in order),
            schemas=schemas,
            sinks=tuple(s for s in order if isinstance(steps[s], SinkStep)),
            consumers={k: tuple(v) for k, v in consumers.items()},
            renames={t: dict(r) for t, r in self._renames.items()},
            migrations=dict(self._migrations),
        )

    def _check_upgrades(self) -> None:
        """Fills, renames and migrations name declared tables and columns; a fill reads only the
        table's other columns and yields the column's type."""
        for name, table in self._tables.items():
            readable = table.readable_types()
            for column, expr in table.fills.items():
                if not isinstance(expr, Expr):
                    raise DataflowDefinitionError(
                        f"state table {name!r}: the fill of {column!r} is not an expression"
                    )

                def leaf(
                    node: Expr,
                    _table: str = name,
                    _types: dict[str, ColumnType] = readable,
                    _column: str = column,
                ) -> ColumnType | None:
                    if isinstance(node, Col) and node.name in _types and node.name != _column:
                        return _types[node.name]
                    raise DataflowDefinitionError(
                        f"state table {_table!r}: the fill of {_column!r} reads "
                        f"{describe(node)}, which is not another column of the table"
                    )

                try:
                    found = infer_type(expr, leaf)
                except ExpressionTypeError as exc:
                    raise DataflowDefinitionError(
                        f"state table {name!r}: the fill of {column!r}: {exc}"
                    ) from exc
                if found is not None and not accepts(readable[column], found):
                    raise DataflowDefinitionError(
                        f"state table {name!r}: the fill of {column!r} is {found}, the column "
                        f"is {readable[column]}"
                    )
        for renamed, renames in self._renames.items():
            if renamed not in self._tables:
                raise DataflowDefinitionError(f"rename_column: {renamed!r} is not a state table")
            columns = self._tables[renamed].image_columns()
            for old, new in renames.items():
                if new not in columns:
                    raise DataflowDefinitionError(
                        f"rename_column: state table {renamed!r} has no column {new!r} "
                        f"(renamed from {old!r})"
                    )
        for migrated in self._migrations:
            if migrated not in self._tables:
                raise DataflowDefinitionError(f"migrate: {migrated!r} is not a state table")

    def _topological_order(self) -> list[str]:
        declared = list(self._steps)
        rank = {s: i for i, s in enumerate(declared)}
        indegree = {s: len(step_inputs(self._steps[s])) for s in declared}
        children: dict[str, list[str]] = {s: [] for s in declared}
        for s in declared:
            for upstream in step_inputs(self._steps[s]):
                children[upstream].append(s)
        ready = sorted((s for s in declared if indegree[s] == 0), key=rank.__getitem__)
        order: list[str] = []
        while ready:
            current = ready.pop(0)
            order.append(current)
            for child in children[current]:
                indegree[child] -= 1
                if indegree[child] == 0:
                    ready.append(child)
                    ready.sort(key=rank.__getitem__)
        if len(order) != len(declared):
            cyclic = [s for s in declared if s not in order]
            raise DataflowDefinitionError(
                f"the steps {cyclic} form a cycle through their inputs", step=cyclic[0]
            )
        return order

    def _output_schema(self, step: Step, schemas: Mapping[str, OutputSchema]) -> OutputSchema:
        def input_schema() -> OutputSchema:
            assert step.input is not None  # type: ignore[union-attr]
            return schemas[step.input]  # type: ignore[union-attr]

        if isinstance(step, SourceStep):
            return dict(step.schema)
        if isinstance(step, MapStep):
            return dict(step.schema) if step.schema is not None else dict(input_schema())
        if isinstance(step, FilterStep):
            if isinstance(step.predicate, Expr):
                self._check_event_expr(step.id, step.predicate, input_schema(), "bool", "predicate")
            return dict(input_schema())
        if isinstance(step, ValidateStep):
            for reason, check in step.checks:
                if isinstance(check, Expr):
                    self._check_event_expr(step.id, check, input_schema(), "bool", repr(reason))
            return dict(input_schema())
        if isinstance(step, FlatMapStep):
            return dict(step.schema)
        if isinstance(step, MergeStep):
            merged: OutputSchema = {}
            for upstream in step.inputs:
                for name, kind in schemas[upstream].items():
                    if name in merged and kind is not None and merged[name] not in (None, kind):
                        raise DataflowDefinitionError(
                            f"column {name!r} is {merged[name]} in one input and {kind} in "
                            f"{upstream!r}",
                            step=step.id,
                        )
                    if merged.get(name) is None:
                        merged[name] = kind
            return merged
        if isinstance(step, TransactionStep):
            return self._check_transaction(step, input_schema())
        return {}

    def _check_event_expr(
        self,
        step_id: str,
        expr: Expr,
        schema: OutputSchema,
        expected: ColumnType | None,
        what: str,
    ) -> ColumnType | None:
        def leaf(node: Expr) -> ColumnType | None:
            if isinstance(node, Col):
                if node.name in META_TYPES:
                    return META_TYPES[node.name]
                if node.name not in schema:
                    raise DataflowDefinitionError(
                        f"{what} reads column {node.name!r}, which the input does not have "
                        f"(it has {sorted(schema)})",
                        step=step_id,
                    )
                return schema[node.name]
            raise DataflowDefinitionError(
                f"{what}: {describe(node)} is only available inside a transactional step",
                step=step_id,
            )

        try:
            kind = infer_type(expr, leaf)
        except ExpressionTypeError as exc:
            raise DataflowDefinitionError(f"{what}: {exc}", step=step_id) from exc
        if expected is not None and kind not in (None, expected):
            raise DataflowDefinitionError(f"{what} is {kind}, expected {expected}", step=step_id)
        return kind

    def _check_transaction(self, step: TransactionStep, schema: OutputSchema) -> OutputSchema:
        if not step.operations:
            raise DataflowDefinitionError("a transactional step needs operations", step=step.id)
        ops = step.operations

        def leaf_for(op: Operation | None) -> Callable[[Expr], ColumnType | None]:
            def leaf(node: Expr) -> ColumnType | None:
                if isinstance(node, Col):
                    if node.name in META_TYPES:
                        return META_TYPES[node.name]
                    if node.name not in schema:
                        where = op.label() if op else "emit"
                        raise DataflowDefinitionError(
                            f"{where} reads column {node.name!r}, which the input does not have "
                            f"(it has {sorted(schema)})",
                            step=step.id,
                        )
                    return schema[node.name]
                if isinstance(node, Old):
                    assert op is not None
                    readable = self._tables[op.table].readable_types()
                    if node.column not in readable:
                        raise DataflowDefinitionError(
                            f"{op.label()}: old({node.column!r}) is not a column of {op.table!r}",
                            step=step.id,
                        )
                    return readable[node.column]
                if isinstance(node, Ref):
                    target = ops[node.op_index]
                    if node.column == "found":
                        return "bool"
                    if node.column == "count":
                        return "int64"
                    return self._tables[target.table].readable_types()[node.column]
                raise DataflowDefinitionError(f"unexpected leaf {describe(node)}", step=step.id)

            return leaf

        def check(
            op: Operation | None, expr: Expr, expected: ColumnType | None, what: str
        ) -> ColumnType | None:
            where = f"{op.label()} {what}" if op else what
            try:
                kind = infer_type(expr, leaf_for(op))
            except ExpressionTypeError as exc:
                raise DataflowDefinitionError(f"{where}: {exc}", step=step.id) from exc
            if expected is not None and not accepts(expected, kind):
                raise DataflowDefinitionError(
                    f"{where} is {kind}, expected {expected}", step=step.id
                )
            return kind

        for op in ops:
            table = self._tables[op.table]
            if op.kind == "update_where":
                index_type = table.value_types[op.index_column or ""]
                check(op, op.key[0], index_type, f"value for index {op.index_column!r}")
            else:
                for part, (name, key_type) in zip(op.key, table.key, strict=True):
                    if isinstance(part, Lit) and part.value is None:
                        raise DataflowDefinitionError(
                            f"{op.label()}: key {name!r} is the null literal", step=step.id
                        )
                    kind = check(op, part, None, f"key {name!r}")
                    if kind is not None and kind != key_type:
                        raise DataflowDefinitionError(
                            f"{op.label()}: key {name!r} is {key_type} but the expression "
                            f"{describe(part)} is {kind}",
                            step=step.id,
                        )
            for column, expr in op.values.items():
                check(op, expr, table.value_types[column], f"value for {column!r}")
            for req in op.requires:
                check(op, req.condition, "bool", "require")
            if op.when is not None:
                check(op, op.when, "bool", "when")
            for what, timed in (("as_of", op.as_of), ("at", op.at), ("effective", op.effective)):
                if timed is not None:
                    kind = check(op, timed, None, what)
                    if kind not in (None, "int64", "timestamp"):
                        raise DataflowDefinitionError(
                            f"{op.label()} {what} is {kind}, expected a timestamp (µs)",
                            step=step.id,
                        )
        out: OutputSchema = dict(schema) if step.emit_input else {}
        if step.emit_when is not None:
            check(None, step.emit_when, "bool", "emit when")
        for name, expr in step.emit_columns.items():
            out[name] = check(None, expr, None, f"output column {name!r}")
        for node_expr in step.emit_columns.values():
            for node in walk(node_expr):
                if isinstance(node, Old):
                    raise DataflowDefinitionError("emit cannot use old()", step=step.id)
        return out
