"""Transactional steps: the state-transaction template applied to every input event.

Each input row of a transactional step is one state transaction with the row's event time
``_ts``. The step declares, once, the operations every transaction issues::

    transfer = flow.transact("transfer")
    src = transfer.update(accounts, key=col("src"),
                          set={"balance": old("balance") - col("amount")},
                          require=(old("balance") >= col("amount"), "insufficient funds"))
    dst = transfer.update(accounts, key=col("dst"), set={"balance": old("balance") + col("amount")})
    transfer.emit(src_balance=src["balance"], dst_balance=dst["balance"])

Operations run in declaration order inside a transaction and each sees the effects of the earlier
ones. Every operation may have ``when`` (the operation is skipped unless it is true) and ``require``
(if it is not true the whole transaction aborts with the given reason). An operation's results are
available to later operations and to :meth:`TransactionStep.emit` through its :class:`OpHandle`.

Operation kinds (TStream/MorphStream's READ, WRITE, READ_MODIFY plus insert and delete):

``read``         the row (history: the current version, or the version valid ``as_of`` a time)
``write``        a blind write of a whole row (history: a new version)
``update``       read-modify-write of some columns with expressions over ``old(...)``, the event and
                 earlier results (history: close the current version, add a new one)
``insert``       a new row, generating the surrogate key (``if_exists`` abort/skip/update)
``delete``       remove the row (history: close the current version)
``update_where`` update every current row whose indexed column equals a value (history: re-version
                 them) — a change to one table that creates new versions in another
``window``       append to a keyed event-time window and read its aggregates

Keys normally come from the event (the read/write set is then known before execution, which is
what lets the fast executors plan a batch); a key or ``when`` that reads an earlier operation's
result is allowed and marks the step as having *dependent keys*.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from etl_dataflows.exceptions import DataflowDefinitionError
from etl_dataflows.expressions import Col, Expr, Old, Ref, describe, walk, wrap
from etl_dataflows.tables import HistoryTable, StateTable, Table, WindowTable

OpKind = Literal["read", "write", "update", "insert", "delete", "update_where", "window"]
IfMissing = Literal["abort", "skip", "insert", "null"]
IfExists = Literal["abort", "skip", "update"]

_ALLOWED: dict[str, frozenset[str]] = {
    "table": frozenset({"read", "write", "update", "insert", "delete", "update_where"}),
    "history": frozenset({"read", "write", "update", "insert", "delete", "update_where"}),
    "window": frozenset({"window"}),
}

RequireSpec = Expr | tuple[Expr, str] | Sequence[Expr | tuple[Expr, str]] | None
KeySpec = Expr | str | Sequence[Expr | str]


@dataclass(frozen=True)
class Require:
    """A condition of an operation; if it is not ``True`` the transaction aborts with ``reason``."""

    condition: Expr
    reason: str


@dataclass(frozen=True)
class Operation:
    """One state operation of a transaction template (immutable once declared)."""

    step: str
    index: int
    kind: OpKind
    table: str
    key: tuple[Expr, ...] = ()
    values: Mapping[str, Expr] = field(default_factory=dict)
    when: Expr | None = None
    requires: tuple[Require, ...] = ()
    if_missing: IfMissing = "abort"
    if_exists: IfExists = "abort"
    as_of: Expr | None = None
    at: Expr | None = None
    effective: Expr | None = None
    index_column: str | None = None

    def expressions(self) -> list[Expr]:
        """Every expression of the operation."""
        exprs: list[Expr] = [
            *self.key,
            *self.values.values(),
            *(r.condition for r in self.requires),
        ]
        exprs += [e for e in (self.when, self.as_of, self.at, self.effective) if e is not None]
        return exprs

    def label(self) -> str:
        return f"op{self.index} {self.kind} {self.table}"


class OpHandle:
    """The results of one operation, usable in later expressions of the same transaction.

    ``handle["col"]`` is the row after the operation (for ``read``, the row read; for ``window``,
    an aggregate), ``handle.before("col")`` the row before it, ``handle.found`` whether the row
    existed before it, ``handle.count`` how many rows an ``update_where`` changed. All are null
    when the operation was skipped by ``when``.
    """

    def __init__(self, step: TransactionStep, op: Operation, table: StateTable) -> None:
        self._step = step
        self._op = op
        self._table = table

    @property
    def operation(self) -> Operation:
        return self._op

    def _ref(self, column: str, version: Literal["after", "before"]) -> Ref:
        if self._op.kind == "update_where":
            raise DataflowDefinitionError(
                f"{self._op.label()} changes many rows; only .count is available",
                step=self._step.id,
            )
        readable = self._table.readable_types()
        if column not in readable:
            raise DataflowDefinitionError(
                f"{self._op.label()} has no column {column!r}; it has {sorted(readable)}",
                step=self._step.id,
            )
        return Ref(self._step.id, self._op.index, column, version)

    def __getitem__(self, column: str) -> Expr:
        return self._ref(column, "after")

    def before(self, column: str) -> Expr:
        if self._op.kind == "window":
            raise DataflowDefinitionError(
                f"{self._op.label()}: window results have no before-values", step=self._step.id
            )
        return self._ref(column, "before")

    @property
    def found(self) -> Expr:
        return Ref(self._step.id, self._op.index, "found")

    @property
    def count(self) -> Expr:
        if self._op.kind != "update_where":
            raise DataflowDefinitionError(
                f"{self._op.label()}: .count exists only for update_where", step=self._step.id
            )
        return Ref(self._step.id, self._op.index, "count")


def _requires(spec: RequireSpec) -> tuple[Require, ...]:
    if spec is None:
        return ()
    pair = isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[1], str)
    items: list[Any] = [spec] if isinstance(spec, Expr) or pair else list(spec)
    out = []
    for item in items:
        if isinstance(item, tuple):
            cond, reason = item
            out.append(Require(wrap(cond), reason))
        else:
            out.append(Require(wrap(item), f"condition failed: {describe(wrap(item))}"))
    return tuple(out)


def _keys(spec: KeySpec) -> tuple[Expr, ...]:
    items: Sequence[Expr | str] = [spec] if isinstance(spec, Expr | str) else spec
    return tuple(Col(k) if isinstance(k, str) else wrap(k) for k in items)


class TransactionStep:
    """Builder and definition of one transactional step (see the module docstring)."""

    def __init__(
        self,
        step_id: str,
        input_id: str | None,
        resolve_table: Callable[[object, str], StateTable],
    ) -> None:
        self.id = step_id
        self.input = input_id
        self._resolve = resolve_table
        self.operations: list[Operation] = []
        self.tables: dict[str, StateTable] = {}
        self.emit_columns: dict[str, Expr] = {}
        self.emit_when: Expr | None = None
        self.emit_input = False
        self._emitted = False

    # -- declaring operations ---------------------------------------------------------------

    def read(
        self,
        table: object,
        key: KeySpec,
        *,
        as_of: object | None = None,
        if_missing: Literal["null", "abort"] = "null",
        when: object | None = None,
        require: RequireSpec = None,
    ) -> OpHandle:
        """Read a row; ``as_of`` (µs, history tables) reads the version valid at that time.

        A missing row reads as nulls with ``found`` false, or aborts with ``if_missing="abort"``.
        ``as_of`` later than the event time aborts the transaction.
        """
        return self._add(
            "read", table, key=key, as_of=as_of, if_missing=if_missing, when=when, require=require
        )

    def write(
        self,
        table: object,
        key: KeySpec,
        values: Mapping[str, object],
        *,
        effective: object | None = None,
        when: object | None = None,
        require: RequireSpec = None,
    ) -> OpHandle:
        """Write a whole row (columns not given take their defaults); history: a new version."""
        return self._add(
            "write", table, key=key, values=values, effective=effective, when=when, require=require
        )

    def update(
        self,
        table: object,
        key: KeySpec,
        set: Mapping[str, object],  # noqa: A002 - reads like SQL
        *,
        if_missing: Literal["abort", "skip", "insert"] = "abort",
        effective: object | None = None,
        when: object | None = None,
        require: RequireSpec = None,
    ) -> OpHandle:
        """Read-modify-write: ``set`` columns to expressions of ``old(...)``, the event and results.

        All ``set`` expressions see the row before the operation. A missing row aborts, is skipped
        (``found`` false), or is first created from the table defaults (``if_missing="insert"``).
        ``require`` sees ``old(...)``.
        """
        return self._add(
            "update",
            table,
            key=key,
            values=set,
            if_missing=if_missing,
            effective=effective,
            when=when,
            require=require,
        )

    def insert(
        self,
        table: object,
        key: KeySpec,
        values: Mapping[str, object] | None = None,
        *,
        if_exists: Literal["abort", "skip", "update"] = "abort",
        effective: object | None = None,
        when: object | None = None,
        require: RequireSpec = None,
    ) -> OpHandle:
        """Insert a new row, generating its surrogate key; an existing key aborts, is skipped or
        is updated with ``values`` (``if_exists``)."""
        return self._add(
            "insert",
            table,
            key=key,
            values=values or {},
            if_exists=if_exists,
            effective=effective,
            when=when,
            require=require,
        )

    def delete(
        self,
        table: object,
        key: KeySpec,
        *,
        if_missing: Literal["abort", "skip"] = "abort",
        effective: object | None = None,
        when: object | None = None,
        require: RequireSpec = None,
    ) -> OpHandle:
        """Delete the row (history: close the current version at the event time)."""
        return self._add(
            "delete",
            table,
            key=key,
            if_missing=if_missing,
            effective=effective,
            when=when,
            require=require,
        )

    def update_where(
        self,
        table: object,
        column: str,
        equals: object,
        set: Mapping[str, object],  # noqa: A002
        *,
        effective: object | None = None,
        when: object | None = None,
        require: RequireSpec = None,
    ) -> OpHandle:
        """Update every current row whose indexed ``column`` equals ``equals``, in key order
        (history: each gets a new version). ``require`` is checked for each row."""
        return self._add(
            "update_where",
            table,
            key=(),
            values=set,
            index_column=column,
            index_value=equals,
            effective=effective,
            when=when,
            require=require,
        )

    def window(
        self,
        table: object,
        key: KeySpec,
        values: Mapping[str, object] | None = None,
        *,
        at: object | None = None,
        when: object | None = None,
        require: RequireSpec = None,
    ) -> OpHandle:
        """Append ``values`` at time ``at`` (default ``_ts``) to the key's window and read the
        table's aggregates over ``(at - span, at]``. Times must not go backwards per key (a late
        entry aborts the transaction)."""
        return self._add(
            "window", table, key=key, values=values or {}, at=at, when=when, require=require
        )

    def emit(
        self,
        columns: Mapping[str, object] | None = None,
        /,
        *,
        when: object | None = None,
        include_input: bool = False,
        **named: object,
    ) -> None:
        """Post-processing: one output row per committed transaction (where ``when`` holds) with
        the given columns, computed from the event and the operations' results."""
        if self._emitted:
            raise DataflowDefinitionError("emit() may be called once per step", step=self.id)
        merged = {**(columns or {}), **named}
        for name in merged:
            if name.startswith("_"):
                raise DataflowDefinitionError(
                    f"output column {name!r}: names starting with '_' are reserved", step=self.id
                )
        self.emit_columns = {name: wrap(value) for name, value in merged.items()}
        self.emit_when = None if when is None else wrap(when)
        self.emit_input = include_input
        self._emitted = True
        for expr in self.emit_columns.values():
            self._check_refs(expr, None, "emit")
            self._forbid_old(expr, "emit")

    # -- internals ----------------------------------------------------------------------------

    def _add(
        self,
        kind: OpKind,
        table_ref: object,
        *,
        key: KeySpec = (),
        values: Mapping[str, object] | None = None,
        if_missing: str = "abort",
        if_exists: str = "abort",
        as_of: object | None = None,
        at: object | None = None,
        effective: object | None = None,
        index_column: str | None = None,
        index_value: object | None = None,
        when: object | None = None,
        require: RequireSpec = None,
    ) -> OpHandle:
        if self._emitted:
            raise DataflowDefinitionError("declare operations before emit()", step=self.id)
        table = self._resolve(table_ref, self.id)
        index = len(self.operations)
        label = f"op{index} {kind} {table.name}"
        if kind not in _ALLOWED[table.kind]:
            raise DataflowDefinitionError(
                f"{label}: a {table.kind} table allows {sorted(_ALLOWED[table.kind])}", step=self.id
            )
        keys = _keys(key) if kind != "update_where" else (wrap(index_value),)
        if kind != "update_where" and len(keys) != len(table.key):
            raise DataflowDefinitionError(
                f"{label}: key has {len(keys)} part(s) but {table.name!r} is keyed by "
                f"{list(table.key_names)}",
                step=self.id,
            )
        if kind == "update_where" and index_column not in table.indexes:
            raise DataflowDefinitionError(
                f"{label}: column {index_column!r} is not indexed; declare "
                f"indexes=({index_column!r},) on {table.name!r}",
                step=self.id,
            )
        settable = table.value_types
        value_exprs = {name: wrap(v) for name, v in (values or {}).items()}
        for name in value_exprs:
            if name not in settable:
                raise DataflowDefinitionError(
                    f"{label}: {table.name!r} has no settable column {name!r}; it has "
                    f"{sorted(settable)}",
                    step=self.id,
                )
        if as_of is not None and not isinstance(table, HistoryTable):
            raise DataflowDefinitionError(f"{label}: as_of needs a history table", step=self.id)
        if effective is not None and not isinstance(table, HistoryTable):
            raise DataflowDefinitionError(
                f"{label}: effective applies to history tables only", step=self.id
            )
        allowed_missing = {
            "read": ("null", "abort"),
            "update": ("abort", "skip", "insert"),
            "delete": ("abort", "skip"),
        }.get(kind, ("abort",))
        if if_missing not in allowed_missing:
            raise DataflowDefinitionError(
                f"{label}: if_missing={if_missing!r}; expected one of {allowed_missing}",
                step=self.id,
            )
        if if_exists not in ("abort", "skip", "update"):
            raise DataflowDefinitionError(
                f"{label}: if_exists={if_exists!r}; expected abort, skip or update", step=self.id
            )
        op = Operation(
            step=self.id,
            index=index,
            kind=kind,
            table=table.name,
            key=keys,
            values=value_exprs,
            when=None if when is None else wrap(when),
            requires=_requires(require),
            if_missing=if_missing,  # type: ignore[arg-type]
            if_exists=if_exists,  # type: ignore[arg-type]
            as_of=None if as_of is None else wrap(as_of),
            at=None if at is None else wrap(at),
            effective=None if effective is None else wrap(effective),
            index_column=index_column,
        )
        for expr in op.expressions():
            self._check_refs(expr, index, label)
        for maybe in (*op.key, op.when, op.as_of, op.at, op.effective):
            if maybe is not None:
                self._forbid_old(maybe, label)
        if kind in ("insert", "write"):
            for expr in op.values.values():
                self._forbid_old(expr, label + " (no old row on insert/write)")
        self.operations.append(op)
        self.tables[table.name] = table
        return OpHandle(self, op, table)

    def _check_refs(self, expr: Expr, before_index: int | None, where: str) -> None:
        limit = len(self.operations) if before_index is None else before_index
        for node in walk(expr):
            if isinstance(node, Ref):
                if node.step != self.id:
                    raise DataflowDefinitionError(
                        f"{where}: uses a result of step {node.step!r}; results are visible only "
                        "inside their own transaction (emit them and read the output instead)",
                        step=self.id,
                    )
                if node.op_index >= limit:
                    raise DataflowDefinitionError(
                        f"{where}: uses op{node.op_index}, which is not declared before it",
                        step=self.id,
                    )

    def _forbid_old(self, expr: Expr, where: str) -> None:
        for node in walk(expr):
            if isinstance(node, Old):
                raise DataflowDefinitionError(
                    f"{where}: old({node.column!r}) is only meaningful in set/require of an "
                    "operation on an existing row",
                    step=self.id,
                )

    @property
    def has_dependent_keys(self) -> bool:
        """Whether some key or ``when`` reads an earlier operation's result (the read/write set
        is then known only during execution)."""
        for op in self.operations:
            for expr in (*op.key, op.when):
                if expr is not None and any(isinstance(n, Ref) for n in walk(expr)):
                    return True
        return False

    def summary(self) -> dict[str, Any]:
        """A plain description of the template, for plans and reports."""
        return {
            "step": self.id,
            "operations": [op.label() for op in self.operations],
            "dependent_keys": self.has_dependent_keys,
        }


def table_label(table: StateTable) -> str:
    kind = {Table: "table", HistoryTable: "history table", WindowTable: "window table"}
    return f"{kind[type(table)]} {table.name!r}"
