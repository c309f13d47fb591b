"""One partition's share of a compiled step, as a Spark task runs it (and as tests can run it).

A :class:`PartitionWork` carries the partition's transactions — their events in batch order, their
row numbers in the batch, and for every key group (:class:`~.routing.KeyGroup`) the *local slot*
of each transaction's key — and the state of the keys they touch, as Arrow tables in the local
executor's array layout (one row per local slot: ``exists``, the surrogate key, each value column
and its validity). :func:`run_work` puts that state into array tables of its own and runs the
step's compiled kernel over the transactions in timestamp order with the local executor's own
code: the same hoisting, the same generated kernel (imported from the on-disk kernel cache), the
same finishing. It returns a :class:`PartitionResult`: the output rows (without the event's meta
columns, which the driver has) and aborts, with their row numbers so the driver can merge the
partitions in timestamp order, and the rows whose state changed, by local slot.

Keys never need hashing here: the driver resolved them to slots when it routed the batch, so a task
does no key lookups and the driver writes the changes back by slot. Nothing here imports pyspark:
the task runs inside a Spark Python worker but depends only on the engine.
"""

from __future__ import annotations

import os
import pickle
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from etl_dataflows.batch import ABORT_SCHEMA
from etl_dataflows.dataflow import CompiledDataflow
from etl_dataflows.executors.local.arrays import ArrayTable
from etl_dataflows.executors.local.compiled_step import CompiledStep, Prepared
from etl_dataflows.stateless import DeadLetters
from etl_dataflows.tables import Table
from etl_dataflows.transaction import TransactionStep
from etl_dataflows.types import META_COLUMNS

EXISTS, SURROGATE, SLOT = "_exists", "_sk", "_slot"


def valid_name(column: str) -> str:
    return f"{column}__valid"


def group_name(table: str, hoisted: int) -> str:
    """The name of the key group of ``table`` keyed by hoisted expression ``hoisted``."""
    return f"{table}:{hoisted}"


@dataclass
class PartitionWork:
    """What travels to a task (see the module docstring). ``slots`` has one int32 column per key
    group (-1 where no operation of the group runs); ``sequences`` are the tables' next surrogate
    keys (only the partition that owns them may draw)."""

    step: str
    events: pa.Table
    rows: np.ndarray
    slots: pa.Table
    state: dict[str, pa.Table]
    sequences: dict[str, int]


@dataclass
class PartitionResult:
    """What a task sends back (see the module docstring); ``seconds`` is its compute time and
    ``timings`` where it went."""

    output: pa.Table
    output_rows: np.ndarray
    aborts: pa.Table
    abort_rows: np.ndarray
    changes: dict[str, pa.Table] = field(default_factory=dict)
    sequences: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    transactions: int = 0
    timings: dict[str, float] = field(default_factory=dict)


def state_rows(arrays: ArrayTable, slots: np.ndarray) -> pa.Table:
    """The array-layout rows of ``slots`` (see the module docstring)."""
    columns: dict[str, Any] = {EXISTS: arrays.exists[slots]}
    if arrays.table.surrogate:
        columns[SURROGATE] = arrays.sk[slots]
    for column in arrays.values:
        columns[column] = arrays.values[column][slots]
        columns[valid_name(column)] = arrays.valid[column][slots]
    return pa.table(columns)


def write_state(arrays: ArrayTable, slots: np.ndarray, rows: pa.Table) -> None:
    """Set the array-layout ``rows`` at ``slots``."""

    def numpy(name: str) -> np.ndarray:
        return np.asarray(rows.column(name).to_numpy(zero_copy_only=False))

    arrays.exists[slots] = numpy(EXISTS)
    if arrays.table.surrogate:
        arrays.sk[slots] = numpy(SURROGATE)
    for column in arrays.values:
        arrays.values[column][slots] = numpy(column)
        arrays.valid[column][slots] = numpy(valid_name(column))


def emitted_and_failed(
    prepared: Prepared, outputs: dict[str, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """The rows whose output was emitted and the rows that aborted, both in timestamp order (the
    order :meth:`CompiledStep.finish` lists them in)."""
    order = prepared.order
    emitted = order[outputs["em"][order]]
    failed = order[outputs["st_out"][order] != 0]
    return emitted, failed


def _changed(before: dict[str, np.ndarray], arrays: ArrayTable, size: int) -> np.ndarray:
    exists = arrays.exists[:size]
    changed = before[EXISTS] != exists
    if arrays.table.surrogate:
        changed |= exists & (before[SURROGATE] != arrays.sk[:size])
    for column in arrays.values:
        valid = arrays.valid[column][:size]
        moved = before[column] != arrays.values[column][:size]
        changed |= exists & ((before[valid_name(column)] != valid) | (valid & moved))
    return np.flatnonzero(changed)


def run_work(flow: CompiledDataflow, work: PartitionWork) -> PartitionResult:
    """Run one partition's transactions (see the module docstring)."""
    started = time.perf_counter()
    step = flow.step(work.step)
    assert isinstance(step, TransactionStep)
    tables: dict[str, ArrayTable] = {}
    before: dict[str, dict[str, np.ndarray]] = {}
    for name, image in work.state.items():
        table = flow.tables[name]
        assert isinstance(table, Table)
        size = image.num_rows
        arrays = ArrayTable(table, capacity=max(size, 1))
        write_state(arrays, np.arange(size), image)
        arrays.sequence = work.sequences[name]
        tables[name] = arrays
        before[name] = {
            column: np.asarray(image.column(column).to_numpy(zero_copy_only=False))
            for column in image.column_names
        }
    compiled = CompiledStep(flow, step, tables)
    loaded = time.perf_counter()
    hoisting = compiled.hoist(work.events)
    # Writable copies: the kernel was compiled (and cached on disk) for writable slot arrays;
    # Arrow's read-only views would make numba compile another specialization.
    slots = [
        work.slots.column(group_name(op.table, compiled.kernel.key_hoist[op.index]))
        .to_numpy()
        .astype(np.int64)
        for op in step.operations
    ]
    prepared = Prepared(
        hoisting.events, hoisting.n, hoisting.order, hoisting.hoisted, slots, hoisting.seconds
    )
    ready = time.perf_counter()
    outputs, _ = compiled.execute(prepared, "sequential")
    executed = time.perf_counter()
    # Dead letters are written by the driver, in the batch's order, from the aborts.
    outcome = compiled.finish(prepared, outputs, DeadLetters(flow.sources, [step.id]))
    emitted, failed = emitted_and_failed(prepared, outputs)
    output = outcome.output.drop_columns(
        [c for c in META_COLUMNS if c in outcome.output.schema.names]
    )
    finished = time.perf_counter()
    result = PartitionResult(
        output=output,
        output_rows=work.rows[emitted],
        aborts=outcome.aborts
        if isinstance(outcome.aborts, pa.Table)
        else ABORT_SCHEMA.empty_table(),
        abort_rows=work.rows[failed],
        transactions=work.events.num_rows,
    )
    for name, arrays in tables.items():
        size = work.state[name].num_rows
        changed = _changed(before[name], arrays, size)
        rows = state_rows(arrays, changed)
        result.changes[name] = rows.append_column(SLOT, pa.array(changed, type=pa.int32()))
        result.sequences[name] = arrays.sequence
    result.seconds = time.perf_counter() - started
    result.timings = {
        "load": loaded - started,
        "prepare": ready - loaded,
        "execute": executed - ready,
        "finish": finished - executed,
        "changes": started + result.seconds - finished,
        "pid": float(os.getpid()),
    }
    return result


#: Dataflows unpickled in this worker process, by the key their executor gave them (a few only:
#: a worker serves the executors of one process).
_FLOWS: OrderedDict[str, CompiledDataflow] = OrderedDict()
_KEEP_FLOWS = 8


def _flow(key: str, pickled: Any) -> CompiledDataflow:
    flow = _FLOWS.get(key)
    if flow is None:
        flow = pickle.loads(pickled.value)
        _FLOWS[key] = flow
        while len(_FLOWS) > _KEEP_FLOWS:
            _FLOWS.popitem(last=False)
    else:
        _FLOWS.move_to_end(key)
    assert isinstance(flow, CompiledDataflow)
    return flow


def spark_task(flow_key: str, flow_broadcast: Any, work_broadcasts: list[Any]) -> Any:
    """The function a Spark pass maps over its partitions: partition ``i`` runs the work in
    ``work_broadcasts[i]`` against the dataflow in ``flow_broadcast``."""

    def run(index: int, _: Iterator[Any]) -> Iterator[PartitionResult]:
        started = time.perf_counter()
        work = work_broadcasts[index].value
        flow = _flow(flow_key, flow_broadcast)
        fetched = time.perf_counter() - started
        assert isinstance(work, PartitionWork)
        result = run_work(flow, work)
        result.timings["fetch"] = fetched
        yield result

    return run
