"""Vectorized scans over key chains, for batches whose active operations are commutative.

When every operation that runs in a batch is an unconditional integer increment
(``set={"c": old("c") + e}`` or ``- e`` with ``e`` depending on the event only) or a plain read —
no conditions, no surrogate keys, one missing-row policy per table — the batch needs no
transaction-at-a-time pass: per table, the operations are sorted into chains by (key, timestamp,
operation), each column's value after every operation is a segmented cumulative sum from the
key's starting value, and the outputs are evaluated column-at-a-time over those results (TStream's
"INC/DEC become a segmented cumsum plus the initial value").

Exactness: integer addition is associative, so the sums equal the serial ones; a null increment
makes the value null from there on, as in the serial executor; transactions that fail (a null
key, a missing row under ``if_missing="abort"``, an event value that cannot be computed) are known
before any state is read and are left out. Anything the scan cannot decide exactly — a possible
int64 overflow, an output that fails to evaluate — makes :meth:`ChainScan.run` return ``None``
before it changes any state, and the caller runs the compiled pass instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from etl_dataflows.executors.local.codegen import HOISTED_BASE
from etl_dataflows.expressions import (
    BinOp,
    Col,
    Expr,
    ExpressionError,
    Lit,
    Old,
    Ref,
    structure,
    walk,
)
from etl_dataflows.tables import Table
from etl_dataflows.vectorized import EventColumns, evaluate

_LIMIT = float(2**62)
_NEVER = np.iinfo(np.int64).max


@dataclass(frozen=True)
class Increment:
    """``column += sign * delta`` where ``delta`` is a hoisted expression or a literal."""

    column: str
    sign: int
    hoisted: int | None
    literal: int


def _increment(compiled: Any, column: str, expr: Expr) -> Increment | None:
    if not isinstance(expr, BinOp) or expr.op not in ("+", "-"):
        return None
    if isinstance(expr.left, Old) and expr.left.column == column:
        sign, delta = (1 if expr.op == "+" else -1), expr.right
    elif expr.op == "+" and isinstance(expr.right, Old) and expr.right.column == column:
        sign, delta = 1, expr.left
    else:
        return None
    if any(isinstance(n, Old | Ref) for n in walk(delta)):
        return None
    if isinstance(delta, Lit):
        if isinstance(delta.value, bool) or not isinstance(delta.value, int):
            return None
        return Increment(column, sign, None, delta.value)
    key = structure(delta)
    for h in compiled.kernel.hoisted:
        if structure(h.expr) == key:
            return Increment(column, sign, h.index, 0) if h.type == "int64" else None
    return None


class ChainScan:
    """The chain-scan strategy of one compiled step (see the module docstring)."""

    def __init__(self, compiled: Any) -> None:
        self.compiled = compiled
        self.kinds: list[str | None] = []
        self.increments: list[list[Increment]] = []
        for op in compiled.step.operations:
            table = compiled.flow.tables[op.table]
            kind: str | None = None
            increments: list[Increment] = []
            if op.requires or not isinstance(table, Table):
                kind = None
            elif op.kind == "read" and op.if_missing == "null" and op.as_of is None:
                kind = "read"
            elif op.kind == "update" and not (op.if_missing == "insert" and table.surrogate):
                found = [_increment(compiled, c, e) for c, e in op.values.items()]
                if all(f is not None for f in found) and all(
                    table.value_types[f.column] == "int64" for f in found if f is not None
                ):
                    kind, increments = "update", [f for f in found if f is not None]
            self.kinds.append(kind)
            self.increments.append(increments)
        self.possible = any(k is not None for k in self.kinds)
        reasons = [r.template for r in compiled.kernel.reasons]
        self._null_key = [
            reasons.index(
                f"{op.label()}: null key {list(compiled.flow.tables[op.table].key_names)}"
            )
            for op in compiled.step.operations
        ]
        self._missing = {
            op.index: reasons.index(f"{op.label()}: no row for key {{key}}")
            for op in compiled.step.operations
            if f"{op.label()}: no row for key {{key}}" in reasons
        }

    def _active(self, prepared: Any) -> list[np.ndarray]:
        rows = []
        for op in self.compiled.step.operations:
            when = self.compiled.kernel.when_hoist[op.index]
            if when is None:
                rows.append(np.ones(prepared.n, dtype=np.bool_))
            else:
                w = prepared.hoisted[when]
                rows.append(w.valid & w.values.astype(np.bool_) | w.errors)
        return rows

    def applies(self, prepared: Any) -> bool:
        """Whether every operation active in this batch is one the scan takes."""
        if not self.possible:
            return False
        active = self._active(prepared)
        policies: dict[str, set[str]] = {}
        for op, rows, kind in zip(self.compiled.step.operations, active, self.kinds, strict=True):
            if not rows.any():
                continue
            if kind is None:
                return False
            if kind == "update":
                policies.setdefault(op.table, set()).add(op.if_missing)
        return all(len(p) == 1 for p in policies.values())

    def run(self, prepared: Any, outputs: dict[str, np.ndarray]) -> dict[str, Any] | None:
        """Run the batch by scans into ``outputs`` (the kernel's output arrays) and the state;
        ``None`` (state untouched) when the batch needs the compiled pass."""
        compiled = self.compiled
        step, kernel, n = compiled.step, compiled.kernel, prepared.n
        active = self._active(prepared)
        hoisted = prepared.hoisted
        rank = np.empty(n, dtype=np.int64)
        rank[prepared.order] = np.arange(n, dtype=np.int64)
        fail_op = np.full(n, _NEVER, dtype=np.int64)
        fail_status = np.zeros(n, dtype=np.int8)
        fail_code = np.full(n, -1, dtype=np.int32)

        def fail(rows: np.ndarray, j: int, status: int, code: int) -> None:
            first = rows & (fail_op > j)
            fail_op[first] = j
            fail_status[first] = status
            fail_code[first] = code

        policy = {
            op.table: op.if_missing for op in step.operations if self.kinds[op.index] == "update"
        }
        for op in step.operations:
            j, rows = op.index, active[op.index]
            if not rows.any():
                continue
            when = kernel.when_hoist[j]
            if when is not None:
                fail(rows & hoisted[when].errors, j, 2, HOISTED_BASE + when)
            key = hoisted[kernel.key_hoist[j]]
            fail(rows & key.errors, j, 2, HOISTED_BASE + kernel.key_hoist[j])
            slots = prepared.slots[j]
            fail(rows & (slots < 0), j, 2, self._null_key[j])
            table = compiled.arrays[op.table]
            exists = np.zeros(n, dtype=np.bool_)
            exists[slots >= 0] = table.exists[slots[slots >= 0]]
            if self.kinds[j] == "update" and policy.get(op.table) == "abort":
                fail(rows & (slots >= 0) & ~exists, j, 1, self._missing[j])
            for inc in self.increments[j]:
                if inc.hoisted is not None:
                    fail(rows & hoisted[inc.hoisted].errors, j, 2, HOISTED_BASE + inc.hoisted)
        failed = fail_op != _NEVER

        results: dict[tuple[int, str], tuple[np.ndarray, np.ndarray]] = {}
        found = [np.zeros(n, dtype=np.bool_) for _ in step.operations]
        ran = [active[j] & ~failed for j in range(len(step.operations))]
        writes: list[tuple[Any, np.ndarray, dict[str, tuple[np.ndarray, np.ndarray]]]] = []
        for table_name in compiled.kernel.tables:
            out = self._scan_table(table_name, prepared, ran, rank, found, results, policy)
            if out is None:
                return None
            writes.append(out)
        emitted = self._emit(prepared, failed, ran, found, results, outputs)
        if emitted is None:
            return None
        # Decided: write the state (last value of every chain) and the kernel's outputs.
        for table, slots, columns in writes:
            if policy.get(table.table.name) == "insert":
                table.exists[slots] = True
            for column, (values, valid) in columns.items():
                table.values[column][slots] = values
                table.valid[column][slots] = valid
        outputs["st_out"][:] = fail_status
        outputs["rs_out"][:] = fail_code
        outputs["em"][:] = emitted & ~failed
        return {"scanned_tables": len(writes)}

    def _scan_table(
        self,
        table_name: str,
        prepared: Any,
        ran: list[np.ndarray],
        rank: np.ndarray,
        found: list[np.ndarray],
        results: dict[tuple[int, str], tuple[np.ndarray, np.ndarray]],
        policy: dict[str, str],
    ) -> tuple[Any, np.ndarray, dict[str, tuple[np.ndarray, np.ndarray]]] | None:
        """Scan every chain of one table; returns the final values to write (or None)."""
        compiled, n = self.compiled, prepared.n
        table = compiled.arrays[table_name]
        ops = [op for op in compiled.step.operations if op.table == table_name]
        txn, op_index = [], []
        for op in ops:
            rows = np.flatnonzero(ran[op.index])
            txn.append(rows)
            op_index.append(np.full(len(rows), op.index, dtype=np.int64))
        txn_a, op_a = np.concatenate(txn), np.concatenate(op_index)
        key_name, key_type = table.table.key[0]
        readable = [(c, k) for c, k in table.table.columns]
        if table.table.surrogate:
            readable.append((table.table.surrogate, "int64"))
        if key_type == "int64":
            readable.append((key_name, "int64"))
        for op in ops:  # operations that did not run read as null
            for column, kind in readable:
                for prefix in ("a", "b"):
                    results[(op.index, f"{prefix}:{column}")] = (
                        _full(n, kind),
                        np.zeros(n, dtype=np.bool_),
                    )
        if not len(txn_a):
            return table, np.zeros(0, np.int64), {}
        slot_a = np.empty(len(txn_a), dtype=np.int64)
        for op in ops:
            sel = op_a == op.index
            slot_a[sel] = prepared.slots[op.index][txn_a[sel]]
        order = np.lexsort((op_a, rank[txn_a], slot_a))
        txn_a, op_a, slot_a = txn_a[order], op_a[order], slot_a[order]
        m = len(slot_a)
        first = np.ones(m, dtype=np.bool_)
        first[1:] = slot_a[1:] != slot_a[:-1]
        segment = np.cumsum(first) - 1
        starts = np.flatnonzero(first)
        ends = np.concatenate([starts[1:] - 1, [m - 1]])
        existed = table.exists[slot_a[starts]][segment]
        is_update = np.array([self.kinds[j] == "update" for j in op_a], dtype=np.bool_)
        inserting = policy.get(table_name) == "insert"
        # A row exists before an entry if it existed at the start or an earlier update created it.
        created_before = (_segmented(is_update.astype(np.int64), first) - is_update) > 0
        exists_before = existed | (created_before & inserting)
        applies = is_update & (exists_before | inserting)
        exists_after = exists_before | applies
        for op in ops:
            sel = op_a == op.index
            found[op.index][txn_a[sel]] = exists_before[sel]
        columns: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        defaults = table.table.defaults
        for column, kind in table.table.columns:
            start = table.values[column][slot_a[starts]].copy()
            start_valid = table.valid[column][slot_a[starts]].copy()
            new = ~table.exists[slot_a[starts]]
            default = defaults.get(column)
            start[new] = 0 if default is None else default
            start_valid[new] = default is not None
            delta = np.zeros(m, dtype=start.dtype)
            broken = np.zeros(m, dtype=np.int64)
            touched = False
            for op in ops:
                for inc in self.increments[op.index]:
                    if inc.column != column:
                        continue
                    touched = True
                    sel = (op_a == op.index) & applies
                    rows = txn_a[sel]
                    if inc.hoisted is None:
                        delta[sel] = inc.sign * inc.literal
                    else:
                        h = prepared.hoisted[inc.hoisted]
                        delta[sel] = inc.sign * np.where(h.valid[rows], h.values[rows], 0)
                        broken[sel] = ~h.valid[rows]
            if touched:
                if kind != "int64":
                    return None
                bound = np.abs(start.astype(np.float64))[segment] + _segmented(
                    np.abs(delta.astype(np.float64)), first
                )
                if np.any(bound >= _LIMIT):
                    return None
            running_broken = _segmented(broken, first)
            after = start[segment] + _segmented(delta, first)
            after_valid = start_valid[segment] & (running_broken == 0) & exists_after
            before = after - delta
            before_valid = start_valid[segment] & ((running_broken - broken) == 0) & exists_before
            for op in ops:
                sel = op_a == op.index
                rows = txn_a[sel]
                a_v, a_ok = _full(n, kind), np.zeros(n, dtype=np.bool_)
                b_v, b_ok = _full(n, kind), np.zeros(n, dtype=np.bool_)
                a_v[rows], a_ok[rows] = after[sel], after_valid[sel]
                b_v[rows], b_ok[rows] = before[sel], before_valid[sel]
                results[(op.index, f"a:{column}")] = (a_v, a_ok)
                results[(op.index, f"b:{column}")] = (b_v, b_ok)
            keep = exists_after[ends]
            columns[column] = (after[ends][keep], after_valid[ends][keep])
        for op in ops:
            sel = op_a == op.index
            rows = txn_a[sel]
            extra = [(table.table.surrogate, table.sk)] if table.table.surrogate else []
            if key_type == "int64":
                extra.append((key_name, table.keys))
            for name, source in extra:
                values = np.zeros(n, dtype=np.int64)
                a_ok, b_ok = np.zeros(n, dtype=np.bool_), np.zeros(n, dtype=np.bool_)
                values[rows] = source[slot_a[sel]]
                a_ok[rows], b_ok[rows] = exists_after[sel], exists_before[sel]
                results[(op.index, f"a:{name}")] = (values, a_ok)
                results[(op.index, f"b:{name}")] = (values.copy(), b_ok)
        return table, slot_a[ends][exists_after[ends]], columns

    def _emit(
        self,
        prepared: Any,
        failed: np.ndarray,
        ran: list[np.ndarray],
        found: list[np.ndarray],
        results: dict[tuple[int, str], tuple[np.ndarray, np.ndarray]],
        outputs: dict[str, np.ndarray],
    ) -> np.ndarray | None:
        compiled = self.compiled
        step, kernel, n = compiled.step, compiled.kernel, prepared.n
        if not (step.emit_columns or step.emit_input):
            return np.zeros(n, dtype=np.bool_)
        columns = dict(EventColumns(prepared.events, compiled.event_types).items())
        for (j, name), column in results.items():
            prefix, col = name.split(":", 1)
            columns[f"__{prefix}{j}_{col}"] = column
        for j in range(len(step.operations)):
            columns[f"__found{j}"] = (found[j], ran[j])

        def substitute(expr: Expr) -> Expr:
            return _replace_refs(expr)

        commit = ~failed
        try:
            emit = np.ones(n, dtype=np.bool_)
            if step.emit_when is not None:
                values, valid = evaluate(substitute(step.emit_when), columns, n)
                emit = values.astype(np.bool_) & valid
            for name, _kind in kernel.kernel_outputs:
                values, valid = evaluate(substitute(step.emit_columns[name]), columns, n)
                outputs[f"o_{name}"][:] = values.astype(outputs[f"o_{name}"].dtype)
                outputs[f"o_{name}_v"][:] = valid
        except (ExpressionError, KeyError):
            return None
        for k in kernel.hoisted_outputs.values():
            if np.any(prepared.hoisted[k].errors & commit & emit):
                return None
        return emit


def _segmented(values: np.ndarray, first: np.ndarray) -> np.ndarray:
    """Cumulative sums restarting where ``first`` is True."""
    total = np.cumsum(values)
    starts = np.flatnonzero(first)
    offset = total[starts] - values[starts]
    segment = np.cumsum(first) - 1
    result: np.ndarray = total - offset[segment]
    return result


def _full(n: int, kind: str) -> np.ndarray:
    return np.zeros(
        n, dtype=np.float64 if kind == "float64" else np.bool_ if kind == "bool" else np.int64
    )


def _replace_refs(expr: Expr) -> Expr:
    """``expr`` with operation results replaced by the synthetic columns of the scan."""
    if isinstance(expr, Ref):
        if expr.column == "found":
            return Col(f"__found{expr.op_index}")
        prefix = "a" if expr.version == "after" else "b"
        return Col(f"__{prefix}{expr.op_index}_{expr.column}")
    children = expr.children()
    if not children:
        return expr
    from dataclasses import fields, replace

    changes: dict[str, Any] = {}
    for f in fields(expr):  # type: ignore[arg-type]
        value = getattr(expr, f.name)
        if isinstance(value, Expr):
            changes[f.name] = _replace_refs(value)
        elif isinstance(value, tuple) and value and all(isinstance(v, Expr) for v in value):
            changes[f.name] = tuple(_replace_refs(v) for v in value)
    return replace(expr, **changes)  # type: ignore[type-var]
