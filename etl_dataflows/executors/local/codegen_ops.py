"""Generating operation-level kernels, for the ``tstream`` baseline.

TStream decomposes transactions into operations, groups them into chains per key and runs the
chains in parallel, an operation waiting (busy) for the operations it depends on. This module writes
``run_ops``: worker threads claim operation tasks in timestamp order; a task waits for the
operations of its own transaction whose results it reads (``done`` flags) and for its turn on its
key's chain, runs the operation, stores its results for later operations and releases the chain.

Operations of one transaction run separately, so a transaction that fails may already have written
some keys: aborts are lazy (see :mod:`etl_dataflows.executors.tstream`). A transaction assumed to
abort runs as a *probe*: its operations read and evaluate at their chain positions but write
nothing (each sees its own transaction's earlier writes from the stored results instead).

Results of operation ``k`` live in three 2-D arrays indexed ``[field, txn]`` — ``RI`` (int64),
``RF`` (float64), ``RB`` (bool) — at the field indices this generator assigns.
"""

from __future__ import annotations

from collections.abc import Iterable

from etl_dataflows.dataflow import CompiledDataflow
from etl_dataflows.executors.local.codegen import CodeWriter, KernelGenerator
from etl_dataflows.expressions import Expr, Ref, walk
from etl_dataflows.tables import Table
from etl_dataflows.transaction import Operation, TransactionStep
from etl_dataflows.types import ColumnType

_ARRAY = {"int64": "RI", "timestamp": "RI", "date": "RI", "float64": "RF", "bool": "RB"}


class OpKernelGenerator(KernelGenerator):
    """Writes the operation-level module of one compiled step (see the module docstring)."""

    def __init__(self, flow: CompiledDataflow, step: TransactionStep) -> None:
        super().__init__(flow, step)
        self.op_mode = True
        self.probe = "probe"
        self._fields: dict[tuple[int, str], tuple[str, int]] = {}
        self._count = {"RI": 0, "RF": 0, "RB": 0}

    def field(self, k: int, name: str, kind: str) -> str:
        """``RX[index, i]`` for field ``name`` of operation ``k`` (registered on first use)."""
        key = (k, name)
        if key not in self._fields:
            array = _ARRAY[kind]
            self._fields[key] = (array, self._count[array])
            self._count[array] += 1
        array, index = self._fields[key]
        return f"{array}[{index}, i]"

    def _kernel_columns(self, op: Operation) -> dict[str, ColumnType]:
        return {c: t for c, t in self.columns(op).items() if t in _ARRAY}

    def _referenced_ops(self, exprs: Iterable[Expr]) -> list[int]:
        return sorted({n.op_index for e in exprs for n in walk(e) if isinstance(n, Ref)})

    def _declare_op(self, op: Operation) -> None:
        w = self.out
        j = op.index
        for name in ("ran", "fnd", "wr", "ex"):
            w.line(f"{name}{j} = False")
        for column, kind in self.columns(op).items():
            zero = {"float64": "0.0", "bool": "False"}.get(kind, "np.int64(0)")
            for prefix in ("a", "b", "o"):
                w.line(f"{prefix}{j}_{column} = {zero}")
                w.line(f"{prefix}v{j}_{column} = False")

    def _load_results(self, k: int) -> None:
        w = self.out
        op = self.step.operations[k]
        self._declare_op(op)
        for name in ("ran", "fnd", "wr", "ex"):
            w.line(f"{name}{k} = {self.field(k, name, 'bool')}")
        for column, kind in self._kernel_columns(op).items():
            for prefix in ("a", "b"):
                w.line(f"{prefix}{k}_{column} = {self.field(k, f'{prefix}_{column}', kind)}")
                w.line(f"{prefix}v{k}_{column} = {self.field(k, f'{prefix}v_{column}', 'bool')}")

    def _store_results(self, k: int) -> None:
        w = self.out
        op = self.step.operations[k]
        for name in ("ran", "fnd", "wr", "ex"):
            w.line(f"{self.field(k, name, 'bool')} = {name}{k}")
        for column, kind in self._kernel_columns(op).items():
            for prefix in ("a", "b"):
                w.line(f"{self.field(k, f'{prefix}_{column}', kind)} = {prefix}{k}_{column}")
                w.line(f"{self.field(k, f'{prefix}v_{column}', 'bool')} = {prefix}v{k}_{column}")

    def _store_status(self, k: int) -> None:
        w = self.out
        w.line(f"{self.field(k, 'st', 'int64')} = st")
        w.line(f"{self.field(k, 'rs', 'int64')} = rs")
        w.line(f"{self.field(k, 'ev', 'float64')} = ev")

    def after_load(self, op: Operation) -> None:
        w = self.out
        j = op.index
        earlier = [k for k in self.step.operations[:j] if k.kind != "read" and k.table == op.table]
        if not earlier:
            return
        with w.block("if probe:"):
            for k in earlier:
                cond = f"{self.field(k.index, 'wr', 'bool')} and s{k.index}[i] == s{j}[i]"
                with w.block(f"if {cond}:"):
                    w.line(f"fnd{j} = {self.field(k.index, 'ex', 'bool')}")
                    for column, kind in self._kernel_columns(op).items():
                        w.line(f"b{j}_{column} = {self.field(k.index, f'a_{column}', kind)}")
                        w.line(f"bv{j}_{column} = {self.field(k.index, f'av_{column}', 'bool')}")

    def _branch_writer(self) -> CodeWriter:
        return self.out.branch(depth=3)

    def dependencies(self) -> list[list[int]]:
        """Per operation (and the output, last), the operations of the same transaction whose
        results it reads."""
        deps = [self._referenced_ops(op.expressions()) for op in self.step.operations]
        emits = list(self.step.emit_columns.values())
        if self.step.emit_when is not None:
            emits.append(self.step.emit_when)
        deps.append(self._referenced_ops(emits))
        return deps

    def generate_ops(self) -> tuple[str, list[str], list[list[int]], dict[str, int]]:
        """The module source, its argument names (after the driver's own), the dependencies per
        task kind, and the number of result fields per array."""
        step = self.step
        self.hoist_keys_and_whens()
        deps = self.dependencies()
        branches: list[str] = []
        for op in step.operations:
            # One function holds every branch: temporaries must not be reused across branches
            # (numba would unify their types).
            self.out = self._branch_writer()
            self.out.line("st = 0")
            self.out.line("rs = -1")
            self.out.line("ev = 0.0")
            for k in deps[op.index]:
                self._load_results(k)
            self._declare_op(op)
            self.operation(op)
            self._store_results(op.index)
            self._store_status(op.index)
            keyword = "if" if op.index == 0 else "elif"
            branches.append(f"        {keyword} j == {op.index}:\n" + "\n".join(self.out.lines))
        self.out = self._branch_writer()
        for line in ("st = 0", "rs = -1", "ev = 0.0"):
            self.out.line(line)
        for k in deps[-1]:
            self._load_results(k)
        kernel_outputs, hoisted_outputs, _ = self.emit()
        self._store_status(len(step.operations))
        branches.append("        else:\n" + "\n".join(self.out.lines))
        self.kernel_outputs, self.hoisted_outputs = kernel_outputs, hoisted_outputs
        args = self.argument_names(kernel_outputs)
        joined = ", ".join(args)
        source = f'''"""Generated by streamdi (operations) for step {step.id!r}; do not edit."""
import numba
import numpy as np

from etl_dataflows.executors.local.atomics import atomic_add, atomic_load, atomic_store
from etl_dataflows.executors.local.kernels import add_overflows, mul_overflows, sub_overflows
from etl_dataflows.executors.local.kernels import spin_loop as _spin


@numba.njit(nogil=True, cache=True, error_model="numpy")
def run_ops(
    task_txn, task_op, task_ptr, task_res, task_turn, served, claim, done, dep_ptr, dep_op,
    probe_of, n_txn, RI, RF, RB, {joined},
):
    total = task_txn.shape[0]
    while True:
        t = atomic_add(claim, 0, 1)
        if t >= total:
            break
        i = task_txn[t]
        j = task_op[t]
        for d in range(dep_ptr[j], dep_ptr[j + 1]):
            while atomic_load(done, dep_op[d] * n_txn + i) == 0:
                pass
        for e in range(task_ptr[t], task_ptr[t + 1]):
            while atomic_load(served, task_res[e]) != task_turn[e]:
                pass
        probe = probe_of[i]
{chr(10).join(branches)}
        atomic_store(done, j * n_txn + i, 1)
        for e in range(task_ptr[t], task_ptr[t + 1]):
            atomic_add(served, task_res[e], 1)
'''
        return source, args, deps, dict(self._count)

    def status_fields(self) -> list[tuple[int, int, int]]:
        """Per task kind (operations, then the output): the (st, rs, ev) field indices."""
        out = []
        for k in range(len(self.step.operations) + 1):
            out.append(
                (self._fields[(k, "st")][1], self._fields[(k, "rs")][1], self._fields[(k, "ev")][1])
            )
        return out


def is_compiled_table(table: object) -> bool:
    return isinstance(table, Table)
