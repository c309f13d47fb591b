"""One partition's share of a compiled step, as a Spark task runs it (and as tests can run it).

A :class:`PartitionWork` carries the partition's transactions (its events, in their batch order,
with their row numbers in the batch) and the state rows of the keys they touch, in the tables'
image form (Arrow). :func:`run_work` loads those rows into array tables of its own, runs the step's
compiled kernel over the transactions in timestamp order — the local executor's own code: the
same hoisting, the same generated kernel (imported from the on-disk kernel cache), the same
finishing — and returns a :class:`PartitionResult`: the output rows and aborts (with their row
numbers, so the driver can merge partitions in timestamp order), and the net state changes as image
rows. Nothing here imports pyspark: the task runs inside a Spark Python worker, but depends only on
the engine.
"""

from __future__ import annotations

import pickle
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from etl_dataflows.dataflow import CompiledDataflow
from etl_dataflows.executors.local.arrays import ArrayTable
from etl_dataflows.executors.local.compiled_step import CompiledStep, Prepared
from etl_dataflows.stateless import DeadLetters
from etl_dataflows.tables import Table
from etl_dataflows.transaction import TransactionStep


@dataclass
class PartitionWork:
    """What travels to a task: see the module docstring. ``sequences`` are the tables' next
    surrogate keys; only the partition that owns them may draw."""

    step: str
    events: pa.Table
    rows: np.ndarray
    state: dict[str, pa.Table]
    sequences: dict[str, int]


@dataclass
class PartitionResult:
    """What a task sends back (see the module docstring); ``seconds`` is its compute time."""

    output: pa.Table
    output_rows: np.ndarray
    aborts: pa.Table
    abort_rows: np.ndarray
    upserts: dict[str, pa.Table] = field(default_factory=dict)
    deletes: dict[str, pa.Table] = field(default_factory=dict)
    sequences: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    transactions: int = 0


def emitted_and_failed(
    prepared: Prepared, outputs: dict[str, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """The rows whose output was emitted and the rows that aborted, both in timestamp order (the
    order :meth:`CompiledStep.finish` lists them in)."""
    order = prepared.order
    emitted = order[outputs["em"][order]]
    failed = order[outputs["st_out"][order] != 0]
    return emitted, failed


def run_work(flow: CompiledDataflow, work: PartitionWork) -> PartitionResult:
    """Run one partition's transactions (see the module docstring)."""
    started = time.perf_counter()
    step = flow.step(work.step)
    assert isinstance(step, TransactionStep)
    tables: dict[str, ArrayTable] = {}
    for name, image in work.state.items():
        table = flow.tables[name]
        assert isinstance(table, Table)
        arrays = ArrayTable(table, capacity=max(1024, 2 * image.num_rows))
        arrays.load(image)
        arrays.sequence = work.sequences.get(name, table.surrogate_start)
        arrays.begin_batch()
        tables[name] = arrays
    compiled = CompiledStep(flow, step, tables)
    prepared = compiled.prepare(work.events)
    outputs, _ = compiled.execute(prepared, "sequential")
    # Dead letters are written by the driver, in the batch's order, from the aborts.
    outcome = compiled.finish(prepared, outputs, DeadLetters(flow.sources, [step.id]))
    emitted, failed = emitted_and_failed(prepared, outputs)
    result = PartitionResult(
        output=outcome.output,
        output_rows=work.rows[emitted],
        aborts=outcome.aborts if isinstance(outcome.aborts, pa.Table) else _no_aborts(),
        abort_rows=work.rows[failed],
        transactions=work.events.num_rows,
    )
    for name, arrays in tables.items():
        delta = arrays.end_batch()
        result.upserts[name] = delta.upserts
        result.deletes[name] = delta.deletes
        result.sequences[name] = arrays.sequence
    result.seconds = time.perf_counter() - started
    return result


def _no_aborts() -> pa.Table:
    from etl_dataflows.batch import ABORT_SCHEMA

    return ABORT_SCHEMA.empty_table()


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
        work = work_broadcasts[index].value
        assert isinstance(work, PartitionWork)
        yield run_work(_flow(flow_key, flow_broadcast), work)

    return run
