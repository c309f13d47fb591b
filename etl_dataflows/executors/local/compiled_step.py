"""Running one compiled transactional step over a batch.

1. *Prepare*: evaluate the hoisted event-only expressions column-at-a-time (a row whose value cannot
   be computed keeps its error for the kernel to raise only if that row reaches it), map every
   operation's key to a slot, remember the slots the step may write (for deltas and rollback), and
   order the transactions by ``(_ts, input row)``. In the extended form (see :mod:`.analysis`),
   also look up the rows of the pre-reads and encode the strings the kernel reads as codes.
2. *Execute* with the chosen strategy: the compiled sequential pass, or waves of conflict-free
   transactions run in parallel (:mod:`etl_dataflows.planning.levels`).
3. *Finish*: aborts with their reasons (errors also become dead letters), the output rows of the
   committed transactions in timestamp order, and the surrogate-key counters written back.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from etl_dataflows.batch import ABORT_SCHEMA
from etl_dataflows.dataflow import CompiledDataflow
from etl_dataflows.executors.base import TransactionOutcome
from etl_dataflows.executors.local.analysis import KERNEL_TYPES
from etl_dataflows.executors.local.arrays import (
    ArrayTable,
    _to_arrow,
    column_to_arrow,
    kernel_dtype,
)
from etl_dataflows.executors.local.chain_scan import ChainScan
from etl_dataflows.executors.local.codegen import (
    HOISTED_BASE,
    generate_kernel,
    kernel_module,
)
from etl_dataflows.executors.local.kernels import load_module, spin_iterations_per_ns
from etl_dataflows.executors.local.op_level import OpLevelRunner
from etl_dataflows.executors.local.strings import StringPool
from etl_dataflows.executors.local.window_arrays import WindowArrays
from etl_dataflows.expressions import (
    Col,
    Expr,
    ExpressionError,
    Func,
    Lit,
    Scope,
    compile_scalar,
    walk,
)
from etl_dataflows.planning.levels import LevelPlanner, run_locked, run_waves, waves_of
from etl_dataflows.planning.locks import LockPlan, LockUnit, lock_requests
from etl_dataflows.stateless import DeadLetters, describe_error, event_rows
from etl_dataflows.tables import Table
from etl_dataflows.transaction import TransactionStep
from etl_dataflows.types import (
    META_COLUMNS,
    META_TYPES,
    POS,
    SRC,
    TS,
    arrow_array,
    arrow_type,
    dictionary_encoded,
)
from etl_dataflows.vectorized import EventColumns, column_from_arrow, evaluate


@dataclass
class HoistedValues:
    """One hoisted expression's values over a batch: ``values`` (a filler where not ``valid``),
    ``errors`` (rows whose evaluation failed) and their ``messages``.

    A string column used as it is (``col("name")``) keeps its Arrow ``column`` and converts it to
    Python strings only when :attr:`values` is first read: an expression that is only emitted is
    taken from Arrow and never pays for the conversion."""

    _values: Any
    valid: np.ndarray
    errors: np.ndarray
    messages: dict[int, str] = field(default_factory=dict)
    column: pa.ChunkedArray | None = None

    @property
    def values(self) -> Any:
        if self._values is None and self.column is not None:
            self._values = column_from_arrow(self.column, "string")[0]
        return self._values


@dataclass
class Hoisting:
    """A batch's events with the hoisted expressions evaluated (no state involved)."""

    events: pa.Table
    n: int
    order: np.ndarray
    hoisted: list[HoistedValues]
    seconds: float


@dataclass
class Prepared:
    """A batch made ready for the kernel."""

    events: pa.Table
    n: int
    order: np.ndarray
    hoisted: list[HoistedValues]
    slots: list[np.ndarray]
    prepare_seconds: float
    levels: np.ndarray | None = None
    #: Extended form: pool codes of the string hoisted values the kernel reads, by index.
    codes: dict[int, np.ndarray] = field(default_factory=dict)
    #: Extended form: the pre-read arrays by kernel argument name.
    pre: dict[str, np.ndarray] = field(default_factory=dict)


#: Looks up the current rows of keys in a table the kernel does not hold (a pre-read): one row
#: (or None) per key, in order; one call per pre-read, not per key.
RowReader = Callable[[str, list[tuple[Any, ...]]], "list[dict[str, Any] | None]"]


class CompiledStep:
    """A transactional step compiled to a numba kernel (see the module docstring)."""

    def __init__(
        self,
        flow: CompiledDataflow,
        step: TransactionStep,
        arrays: Mapping[str, ArrayTable | WindowArrays],
        *,
        pool: StringPool | None = None,
        pre_reads: frozenset[int] = frozenset(),
        reader: RowReader | None = None,
    ) -> None:
        """``pool`` (and ``pre_reads`` with their ``reader``) select the extended form."""
        self.flow = flow
        self.step = step
        self.arrays = arrays
        self.pool = pool
        self.extended = pool is not None
        self.reader = reader
        if pre_reads and reader is None:
            raise ValueError(f"step {step.id!r} has pre-reads but no reader")
        self.kernel, self.args = generate_kernel(flow, step, pool, pre_reads)
        self._arg_names = frozenset(self.args)
        self.module = load_module(kernel_module(self.kernel, self.args))
        self.in_schema = flow.schemas[step.input or ""]
        self.out_schema = flow.schemas[step.id]
        self.tables = [arrays[name] for name in self.kernel.tables]
        self.draws_keys = [
            _has_surrogate(flow.tables[op.table])
            and (
                op.kind in ("insert", "write")
                or (op.kind == "update" and op.if_missing == "insert")
            )
            for op in step.operations
        ]
        self.generates_keys = any(self.draws_keys)

        self.op_cost_ns = [
            sum(_cost_of(node) for expr in op.expressions() for node in walk(expr))
            for op in step.operations
        ]
        self.cost_ns = sum(self.op_cost_ns)
        self._scalar: dict[int, Any] = {}
        self._planner = LevelPlanner()
        self._op_level: OpLevelRunner | None = None
        self._scan: ChainScan | None = None
        #: The types of the step's input columns and the metadata columns, as the vectorized
        #: evaluator (:class:`~etl_dataflows.vectorized.EventColumns`) reads them.
        self.event_types = {**self.in_schema, **META_TYPES}
        #: The surrogate-key counters of :attr:`tables` while :meth:`execute` runs (the kernel
        #: draws from them in place; a strategy that reruns transactions saves and restores them).
        self.sequences = np.zeros(0, dtype=np.int64)
        self._whens = {w for w in self.kernel.when_hoist if w is not None}
        self.table_of_op = [
            -1 if op.index in self.kernel.pre_reads else self.kernel.tables.index(op.table)
            for op in step.operations
        ]
        self._coded = [
            h.index
            for h in self.kernel.hoisted
            if h.type == "string" and h.in_kernel and pool is not None
        ]
        self._source_names = pa.array(list(flow.sources), type=pa.string())
        #: Window operations that append entries.
        self._appends = [op.index for op in step.operations if op.kind == "window" and op.values]
        #: Whether the step has a window operation (it runs sequentially).
        self.has_windows = any(op.kind == "window" for op in step.operations)

    # -- 1. prepare -----------------------------------------------------------------------------

    def _hoist(self, index: int, events: EventColumns, rows: np.ndarray | None) -> HoistedValues:
        """Evaluate hoisted expression ``index`` on the rows that may need it (all if None)."""
        n = events.table.num_rows
        hoisted = self.kernel.hoisted[index]
        kind = hoisted.type
        if rows is None and kind == "string" and isinstance(hoisted.expr, Col):
            column = events.table.column(hoisted.expr.name)
            valid = np.asarray(column.is_valid().to_numpy(zero_copy_only=False), dtype=np.bool_)
            return HoistedValues(None, valid, np.zeros(n, dtype=np.bool_), column=column)
        columns = events if rows is None else events.subset(rows)
        m = columns.num_rows
        errors = np.zeros(m, dtype=np.bool_)
        messages: dict[int, str] = {}
        try:
            values, valid = evaluate(hoisted.expr, columns, m)
        except ExpressionError:
            fn = self._scalar.setdefault(index, compile_scalar(hoisted.expr))
            out: list[Any] = []
            for i, row in enumerate(event_rows(columns.table, self.in_schema)):
                try:
                    out.append(fn(Scope(row, None, [])))
                except ExpressionError as exc:
                    out.append(None)
                    errors[i] = True
                    messages[i] = describe_error(exc)
            valid = np.array([v is not None for v in out], dtype=np.bool_)
            if kind in KERNEL_TYPES:
                fill = False if kind == "bool" else 0
                values = np.array([fill if v is None else v for v in out], dtype=kernel_dtype(kind))
            else:
                values = np.empty(m, dtype=object)
                values[:] = out
        if kind in KERNEL_TYPES:
            values = np.asarray(values, dtype=kernel_dtype(kind))
        if rows is None:
            return HoistedValues(
                np.ascontiguousarray(values),
                np.ascontiguousarray(valid, dtype=np.bool_),
                errors,
                messages,
            )
        full = (
            np.zeros(n, dtype=values.dtype) if values.dtype != object else np.empty(n, dtype=object)
        )
        full[rows] = values
        full_valid = np.zeros(n, dtype=np.bool_)
        full_valid[rows] = valid
        full_errors = np.zeros(n, dtype=np.bool_)
        full_errors[rows] = errors
        return HoistedValues(
            full, full_valid, full_errors, {int(rows[i]): msg for i, msg in messages.items()}
        )

    def hoist_values(self, events: pa.Table, indexes: Iterable[int]) -> dict[int, HoistedValues]:
        """Hoisted expressions ``indexes`` (positions in ``kernel.hoisted``) evaluated on every
        event of ``events``: what routing transactions to partitions needs before the rest is
        hoisted. Reads no state."""
        columns = EventColumns(events, self.event_types)
        return {index: self._hoist(index, columns, None) for index in indexes}

    def prepare(self, events: pa.Table) -> Prepared:
        """Hoist (:meth:`hoist`) then bind (:meth:`bind`)."""
        return self.bind(self.hoist(events))

    def hoist(self, events: pa.Table) -> Hoisting:
        """The stateless half of preparing: hoisted values and the timestamp order."""
        started = time.perf_counter()
        n = events.num_rows
        hoisted: list[HoistedValues | None] = [None] * len(self.kernel.hoisted)
        columns = EventColumns(events, self.event_types)
        # Keys and whens first (every row needs them); then the rest, only on the rows of the
        # operations that use them (a function is not called for rows that never reach it).
        for h in self.kernel.hoisted:
            if h.rows_of_ops is None:
                hoisted[h.index] = self._hoist(h.index, columns, None)
        for h in self.kernel.hoisted:
            if h.rows_of_ops is not None:
                mask = np.zeros(n, dtype=np.bool_)
                for j in h.rows_of_ops:
                    w = hoisted[self.kernel.when_hoist[j]]  # type: ignore[index]
                    assert w is not None
                    mask |= w.valid & w.values.astype(np.bool_) & ~w.errors
                hoisted[h.index] = self._hoist(h.index, columns, np.flatnonzero(mask))

        ready = [h for h in hoisted if h is not None]
        ts = columns[TS][0]
        if n < 2 or bool(np.all(ts[1:] >= ts[:-1])):
            order = np.arange(n, dtype=np.int64)
        else:
            order = np.argsort(ts, kind="stable").astype(np.int64)
        return Hoisting(events, n, order, ready, time.perf_counter() - started)

    def bind(self, hoisting: Hoisting) -> Prepared:
        """The stateful half: keys to slots (new keys get slots) and the slots remembered."""
        started = time.perf_counter()
        ready = hoisting.hoisted
        # Slots depend on the table and the key only: operations sharing both share the lookup,
        # done only for the rows where one of them runs (no slot for a key nobody touches).
        n = hoisting.n
        pre_reads = self.kernel.pre_reads
        needed: dict[tuple[str, tuple[int, ...]], np.ndarray] = {}
        for op in self.step.operations:
            group = (op.table, tuple(self.kernel.key_parts_hoist[op.index]))
            when = self.kernel.when_hoist[op.index]
            if when is None:
                active = np.ones(n, dtype=np.bool_)
            else:
                w = ready[when]
                active = w.valid & w.values.astype(np.bool_) & ~w.errors
            needed[group] = needed[group] | active if group in needed else active
        by_key: dict[tuple[str, tuple[int, ...]], np.ndarray] = {}
        pre: dict[str, np.ndarray] = {}
        for (table_name, parts), active in needed.items():
            usable = active.copy()
            for k in parts:
                usable &= ready[k].valid & ~ready[k].errors
            if table_name not in self.arrays:  # a pre-read: rows looked up, slot = event row
                by_key[(table_name, parts)] = np.where(usable, np.arange(n), -1)
                for op in self.step.operations:
                    if op.index in pre_reads and op.table == table_name:
                        pre.update(self._pre_read(op.index, table_name, parts, usable, ready))
                continue
            table = self.arrays[table_name]
            if not usable.any():
                by_key[(table_name, parts)] = np.full(n, -1, dtype=np.int64)
                continue
            keys: list[Any] = []
            for k, (_, kind) in zip(parts, table.table.key, strict=True):
                key = ready[k]
                if kind == "string" and key.column is not None:  # (no Python string per row)
                    column = key.column.combine_chunks()
                    if pa.types.is_dictionary(column.type):
                        column = column.cast(pa.string())
                    keys.append(pc.if_else(pa.array(usable), column, pa.scalar(None, column.type)))
                elif kind == "string":
                    masked = [v if ok else None for v, ok in zip(key.values, usable, strict=True)]
                    keys.append(pa.array(masked, type=pa.string()))
                else:
                    keys.append(key.values)
            by_key[(table_name, parts)] = table.slots(keys, usable)
        writers: set[tuple[str, tuple[int, ...]]] = set()
        slots = []
        for op in self.step.operations:
            group = (op.table, tuple(self.kernel.key_parts_hoist[op.index]))
            slots.append(by_key[group])
            if op.kind != "read":
                writers.add(group)
        written: dict[str, list[np.ndarray]] = {}
        for table_name, parts in sorted(writers):
            written.setdefault(table_name, []).append(by_key[(table_name, parts)])
        for table_name, slot_arrays in written.items():  # one call a table: its keys at once
            self.arrays[table_name].remember(
                slot_arrays[0] if len(slot_arrays) == 1 else np.concatenate(slot_arrays)
            )
        codes: dict[int, np.ndarray] = {}
        if self.pool is not None:
            for k in self._coded:
                hv = ready[k]
                if hv.column is not None:  # nulls where not valid, as below
                    codes[k] = self.pool.encode(hv.column)[0]
                    continue
                codes[k] = self.pool.encode(
                    pa.array(hv.values, type=pa.string(), mask=~hv.valid, from_pandas=True)
                )[0]
        seconds = hoisting.seconds + time.perf_counter() - started
        return Prepared(
            hoisting.events, hoisting.n, hoisting.order, ready, slots, seconds, codes=codes, pre=pre
        )

    def _pre_read(
        self,
        j: int,
        table_name: str,
        parts: tuple[int, ...],
        usable: np.ndarray,
        ready: list[HoistedValues],
    ) -> dict[str, np.ndarray]:
        """Pre-read ``j``: the current row of each usable event row's key, as kernel arrays by
        argument name (``pJ_ex``, ``pJ_C``, ``pJ_C_v``); rows are looked up once per distinct
        key."""
        assert self.reader is not None and self.pool is not None
        n = len(usable)
        rows = np.flatnonzero(usable)
        columns = self.kernel.pre_reads[j]
        kinds = self.flow.tables[table_name].readable_types()
        # distinct keys, and for every usable row the index of its key among them
        keys: list[tuple[Any, ...]]
        if len(parts) == 1 and ready[parts[0]].column is not None:
            keys, inverse = _distinct_strings(ready[parts[0]].column, rows)
        elif len(parts) == 1:
            distinct, inverse = np.unique(ready[parts[0]].values[rows], return_inverse=True)
            keys = [(k,) for k in distinct.tolist()]
        else:
            index: dict[tuple[Any, ...], int] = {}
            tuples = zip(*[ready[k].values[rows].tolist() for k in parts], strict=True)
            inverse = np.fromiter(
                (index.setdefault(t, len(index)) for t in tuples), dtype=np.int64, count=len(rows)
            )
            keys = list(index)
        m = len(keys)
        held = self.reader(table_name, keys)
        found_k = np.fromiter((r is not None for r in held), dtype=np.bool_, count=m)
        values_k: dict[str, list[Any]] = {
            c: [None if r is None else r.get(c) for r in held] for c in columns
        }
        found = np.zeros(n, dtype=np.bool_)
        found[rows] = found_k[inverse]
        out = {f"p{j}_ex": found}
        for c in columns:
            kind = kinds[c]
            if kind == "string":
                codes_k, valid_k = self.pool.encode(pa.array(values_k[c], type=pa.string()))
            else:
                valid_k = np.fromiter((v is not None for v in values_k[c]), dtype=np.bool_, count=m)
                fill: Any = False if kind == "bool" else 0
                codes_k = np.array(
                    [fill if v is None else v for v in values_k[c]], dtype=kernel_dtype(kind)
                )
            values = np.zeros(n, dtype=codes_k.dtype)
            valid = np.zeros(n, dtype=np.bool_)
            values[rows] = codes_k[inverse]
            valid[rows] = valid_k[inverse]
            out[f"p{j}_{c}"], out[f"p{j}_{c}_v"] = values, valid
        return out

    def warm_up(self, empty: pa.Table) -> None:
        """Compile the kernel for this step's argument types by running it on ``empty`` events."""
        self.execute(self.prepare(empty), "sequential")

    # -- 2. execute -----------------------------------------------------------------------------

    def _arguments(self, prepared: Prepared, outputs: dict[str, np.ndarray]) -> list[Any]:
        values: dict[str, Any] = {}
        for h, hv in zip(self.kernel.hoisted, prepared.hoisted, strict=True):
            if h.index in prepared.codes:
                values[f"h{h.index}"] = prepared.codes[h.index]
            elif f"h{h.index}" in self._arg_names:  # (a string only emitted is not an argument)
                values[f"h{h.index}"] = hv.values
            values[f"hv{h.index}"] = hv.valid
            values[f"he{h.index}"] = hv.errors
            if h.index in self._whens:
                values[f"hw{h.index}"] = hv.valid & hv.values.astype(np.bool_) & ~hv.errors
        for op in self.step.operations:
            values[f"s{op.index}"] = prepared.slots[op.index]
        values.update(prepared.pre)
        for t, table in enumerate(self.tables):
            if isinstance(table, WindowArrays):
                values.update(_window_arguments(t, table))
                continue
            values[f"t{t}_ex"] = table.exists
            values[f"t{t}_sk"] = table.sk
            for column in table.values:
                values[f"t{t}_{column}"] = table.values[column]
                values[f"t{t}_{column}_v"] = table.valid[column]
        values["seq"] = self.sequences
        values.update(outputs)
        values["spin"] = spin_iterations_per_ns() if self.cost_ns else 0.0
        values["spin_sink"] = self._sink
        return [values[name] for name in self.args]

    def execute(
        self, prepared: Prepared, strategy: str, workers: int = 1
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:

        n = prepared.n
        outputs: dict[str, np.ndarray] = {
            "st_out": np.zeros(n, dtype=np.int8),
            "rs_out": np.full(n, -1, dtype=np.int32),
            "ev_out": np.zeros(n, dtype=np.float64),
            "iv_out": np.zeros(n, dtype=np.int64),
            "em": np.zeros(n, dtype=np.bool_),
        }
        for t, table in enumerate(self.tables):
            if isinstance(table, WindowArrays):  # room for every entry the batch may append
                appends = sum(1 for j in self._appends if self.table_of_op[j] == t)
                table.reserve(appends * n)
        for name, kind in self.kernel.kernel_outputs:
            outputs[f"o_{name}"] = np.zeros(n, dtype=kernel_dtype(kind))  # type: ignore[arg-type]
            outputs[f"o_{name}_v"] = np.zeros(n, dtype=np.bool_)
        self.sequences = np.array([t.sequence for t in self.tables], dtype=np.int64)
        self._sink = np.zeros(1, dtype=np.int64)
        args = self._arguments(prepared, outputs)
        info: dict[str, Any] = {}
        started = time.perf_counter()
        if strategy == "waves":
            level_started = time.perf_counter()
            levels = self.levels(prepared)
            wave_txns, wave_starts = waves_of(levels, prepared.order)
            info["levels"] = int(len(wave_starts) - 1)
            info["plan_ms"] = round((time.perf_counter() - level_started) * 1000, 3)
            run_waves(self.module.run_range, wave_txns, wave_starts, args, workers)
        elif strategy == "chain_scan":
            if self._scan is None:
                self._scan = ChainScan(self)
            scanned = self._scan.run(prepared, outputs) if self._scan.applies(prepared) else None
            if scanned is None:
                info["fell_back"] = "sequential"
                self.module.run_range(prepared.order, 0, n, *args)
            else:
                info.update(scanned)
        elif strategy == "tstream":
            if self._op_level is None:
                self._op_level = OpLevelRunner(self)
            info.update(self._op_level.run(prepared, outputs, args, workers))
        elif strategy in ("lock", "pat", "chains"):
            # chains: the transaction-level precedence graph run without barriers — each
            # transaction waits for its predecessors on its own keys only (turns planned by
            # sorting); lock and pat are the baselines (see executors.baselines).
            plan_started = time.perf_counter()
            plan = self._lock_plan(prepared, "partition" if strategy == "pat" else "key", workers)
            if prepared.levels is not None and len(prepared.levels):
                info["levels"] = int(prepared.levels.max())
            info["locks"] = len(plan.resources)
            info["plan_ms"] = round((time.perf_counter() - plan_started) * 1000, 3)
            run_locked(
                self.module.run_tickets, prepared.order, plan, strategy == "lock", args, workers
            )
        else:
            self.module.run_range(prepared.order, 0, n, *args)

        info["execute_ms"] = round((time.perf_counter() - started) * 1000, 3)
        for t, table in enumerate(self.tables):
            table.sequence = int(self.sequences[t])
        return outputs, info

    def declared_cost_ns(self, prepared: Prepared) -> float:
        """Average declared user-function cost per transaction of this batch: each operation's
        ``cost()`` nanoseconds times the share of transactions where it runs."""
        if not self.cost_ns or not prepared.n:
            return 0.0
        total = 0.0
        for op in self.step.operations:
            if not self.op_cost_ns[op.index]:
                continue
            when = self.kernel.when_hoist[op.index]
            runs = prepared.n
            if when is not None:
                w = prepared.hoisted[when]
                runs = int(np.count_nonzero(w.valid & w.values.astype(np.bool_)))
            total += self.op_cost_ns[op.index] * runs
        return total / prepared.n

    def scan_applies(self, prepared: Prepared) -> bool:
        """Whether the chain scan can take this batch (O(n)); never for the extended form."""
        if self.extended:
            return False
        if self._scan is None:
            self._scan = ChainScan(self)
        return self._scan.applies(prepared)

    def levels(self, prepared: Prepared) -> np.ndarray:
        """Transaction levels of the batch (see :mod:`etl_dataflows.planning.levels`), computed
        once per batch."""
        if prepared.levels is None:
            slots, groups, capacities = self.resources(prepared)
            prepared.levels = self._planner.levels(prepared.order, slots, groups, capacities)
        return prepared.levels

    def resources(self, prepared: Prepared) -> tuple[list[np.ndarray], list[int], list[int]]:
        """What each transaction touches, per operation: the slot (-1 where the operation does not
        run) and its group (a table); an operation that may draw a surrogate key also touches its
        table's sequence (one more group of capacity 1), so keys are drawn in timestamp order."""
        slots, groups = [], []
        capacities = [t.capacity for t in self.tables]
        for op in self.step.operations:
            if op.index in self.kernel.pre_reads:  # its table does not change during the step
                continue
            when = self.kernel.when_hoist[op.index]
            slot = prepared.slots[op.index]
            if when is not None:
                w = prepared.hoisted[when]
                slot = np.where(w.valid & w.values.astype(np.bool_) & ~w.errors, slot, -1)
            slots.append(slot)
            groups.append(self.table_of_op[op.index])
            if self.draws_keys[op.index]:
                slots.append(np.where(slot >= 0, 0, -1).astype(np.int64))
                groups.append(len(capacities))
                capacities.append(1)
        return slots, groups, capacities

    def _lock_plan(self, prepared: Prepared, unit: LockUnit, workers: int) -> LockPlan:
        slots, groups, capacities = self.resources(prepared)
        return lock_requests(prepared.order, slots, groups, capacities, unit, max(workers, 2))

    # -- 3. finish ------------------------------------------------------------------------------

    def _reason(self, prepared: Prepared, i: int, code: int, value: float, number: int = 0) -> str:
        if code >= HOISTED_BASE:
            return prepared.hoisted[code - HOISTED_BASE].messages.get(i, "error")
        reason = self.kernel.reasons[code]
        text = reason.template
        if "{key}" in text and reason.key_of_op is not None:
            parts = [
                _plain(prepared.hoisted[k].values[i])
                for k in self.kernel.key_parts_hoist[reason.key_of_op]
            ]
            text = text.replace("{key}", str(parts))
        if "{value!r}" in text:
            text = text.replace("{value!r}", repr(float(value)))
        if "{hoisted}" in text and reason.hoisted is not None:
            quoted = _plain(prepared.hoisted[reason.hoisted].values[i])
            text = text.replace("{hoisted}", str(quoted))
        if "{number}" in text:
            text = text.replace("{number}", str(number))
        return text

    def finish(
        self, prepared: Prepared, outputs: dict[str, np.ndarray], dead: DeadLetters
    ) -> TransactionOutcome:
        order = prepared.order
        status = outputs["st_out"][order]
        failed = order[status != 0]
        aborts = self._aborts(prepared, outputs, failed, dead)
        emitted = order[outputs["em"][order]]
        output = self._output(prepared, outputs, emitted)
        committed = int(np.count_nonzero(status == 0))
        return TransactionOutcome(output=output, committed=committed, aborts=aborts)

    def _aborts(
        self,
        prepared: Prepared,
        outputs: dict[str, np.ndarray],
        failed: np.ndarray,
        dead: DeadLetters,
    ) -> pa.Table:
        """The aborted transactions (in timestamp order) as an abort table; errors are also
        dead-lettered. Reasons are looked up per reason code; only reasons quoting a key or a
        value are formatted row by row."""
        events = prepared.events
        if not len(failed):
            return _NO_ABORTS
        status = outputs["st_out"][failed]
        codes = outputs["rs_out"][failed]
        reasons = np.empty(len(failed), dtype=object)
        for code in np.unique(codes).tolist():
            rows = np.flatnonzero(codes == code)
            static = code < HOISTED_BASE and "{" not in self.kernel.reasons[code].template
            if static:
                reasons[rows] = self.kernel.reasons[code].template
                continue
            for r in rows.tolist():
                i = int(failed[r])
                reasons[r] = self._reason(
                    prepared, i, code, float(outputs["ev_out"][i]), int(outputs["iv_out"][i])
                )
        table = pa.Table.from_arrays(
            [
                pa.repeat(pa.scalar(self.step.id, pa.string()), len(failed)),
                self._source_names.take(take_rows(events.column(SRC), failed)),
                take_rows(events.column(POS), failed),
                take_rows(events.column(TS), failed),
                _ABORT_KINDS.take(pa.array((status != 1).astype(np.int8))),
                pa.array(reasons, type=pa.string()),
            ],
            schema=ABORT_SCHEMA,
        )
        errors = np.flatnonzero(status == 2)
        if len(errors):
            payloads = event_rows(
                events.take(pa.array(failed[errors], type=pa.int64())), self.in_schema
            )
            for payload, r in zip(payloads, errors.tolist(), strict=True):
                dead.add_row(self.step.id, payload, str(reasons[r]))
        return table

    def _output(
        self, prepared: Prepared, outputs: dict[str, np.ndarray], rows: np.ndarray
    ) -> pa.Table:
        events = prepared.events
        everything = len(rows) == events.num_rows and bool(np.all(rows == np.arange(len(rows))))

        def pick(name: str) -> pa.Array:
            column = events.column(name)
            return column.combine_chunks() if everything else take_rows(column, rows)

        kernel_kinds = dict(self.kernel.kernel_outputs)
        arrays = []
        for name, kind in self.out_schema.items():
            if name in self.kernel.hoisted_outputs:
                k = self.kernel.hoisted_outputs[name]
                hv = prepared.hoisted[k]
                expr = self.kernel.hoisted[k].expr
                if isinstance(expr, Col) and kind is not None and expr.name in events.column_names:
                    arrays.append(pick(expr.name).cast(arrow_type(kind)))
                elif kind is not None and hv.values.dtype == object:
                    arrays.append(
                        pa.array(hv.values[rows], type=arrow_type(kind), mask=~hv.valid[rows])
                    )
                elif kind is None:
                    picked = [hv.values[i] if hv.valid[i] else None for i in rows.tolist()]
                    arrays.append(arrow_array([_plain(v) for v in picked], None))
                else:
                    arrays.append(_to_arrow(hv.values[rows], hv.valid[rows], kind))
            elif name in kernel_kinds:
                assert kind is not None
                values, valid = outputs[f"o_{name}"][rows], outputs[f"o_{name}_v"][rows]
                arrays.append(column_to_arrow(values, valid, kind, self.pool))
            elif name in self.step.emit_columns:
                expr = self.step.emit_columns[name]
                value = getattr(expr, "value", None)
                arrays.append(arrow_array([value] * len(rows), kind))
            else:
                column = pick(name)
                arrays.append(column.cast(arrow_type(kind)) if kind else column)
        for name in META_COLUMNS:
            arrays.append(pick(name))
        names = [*self.out_schema, *META_COLUMNS]
        return pa.Table.from_arrays(arrays, names=names) if names else pa.table({})


#: The abort table of a batch with no aborts (shared: Arrow tables never change).
_NO_ABORTS = ABORT_SCHEMA.empty_table()

#: An abort's kind by status (1: a condition failed, 2: an error), as status != 1.
_ABORT_KINDS = pa.array(["condition", "error"], type=pa.string())

#: Arrow types whose values :func:`take_rows` takes through numpy (a zero-copy view, one gather).
_NUMPY_TAKEN = (pa.int64(), pa.int32(), pa.float64())


def take_rows(column: pa.ChunkedArray, rows: np.ndarray) -> pa.Array:
    """``column``'s values at ``rows`` (int64 positions) as one array. A single chunk of plain
    numbers without nulls is gathered in numpy (an Arrow ``take`` costs more in calling it than
    in taking, for the few columns of a batch); anything else by Arrow."""
    if column.num_chunks == 1 and not column.null_count and column.type in _NUMPY_TAKEN:
        return pa.array(column.chunk(0).to_numpy()[rows], type=column.type)
    return column.take(pa.array(rows, type=pa.int64())).combine_chunks()


def _distinct_strings(
    column: pa.ChunkedArray, rows: np.ndarray
) -> tuple[list[tuple[Any, ...]], np.ndarray]:
    """The distinct values of a string ``column`` at ``rows`` (none of them null) as one-part
    keys, and for every row the index of its value among them: dictionary-encoded in Arrow
    (:func:`~etl_dataflows.types.dictionary_encoded`; a dictionary column as it is), so only the
    distinct values become Python strings (sorting the rows' Python strings, as ``np.unique``
    did, was the larger part of a pre-read's cost on the TPC-DI stream). A dictionary that
    holds a value twice, or one no row uses, only reads a key more: each row still maps to its
    own value."""
    encoded = dictionary_encoded(take_rows(column, rows))
    keys = [(k,) for k in encoded.dictionary.to_pylist()]
    return keys, np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)


def _window_arguments(t: int, table: WindowArrays) -> dict[str, np.ndarray]:
    """Window table ``t``'s kernel arguments (see :mod:`.codegen`)."""
    values = {
        f"w{t}h": table.head,
        f"w{t}t": table.tail,
        f"w{t}n": table.entries_next,
        f"w{t}a": table.entries_at,
        f"w{t}e": table.entries_entry,
        f"w{t}s": table.entries_slot,
        f"w{t}u": table.used,
    }
    for column in table.values:
        values[f"w{t}_{column}"] = table.values[column]
        values[f"w{t}_{column}_v"] = table.valid[column]
    return values


def _has_surrogate(table: object) -> bool:
    return isinstance(table, Table) and table.surrogate is not None


def _cost_of(node: Expr) -> int:
    if isinstance(node, Func) and node.name == "cost":
        nanoseconds = node.args[1]
        assert isinstance(nanoseconds, Lit)
        return int(nanoseconds.value)
    return 0


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python value it holds."""
    return value.item() if hasattr(value, "item") else value
