"""An in-memory harness for dataflows: build batches from Python rows, run them through an
executor, collect what came out, and compare two runs.

::

    batch = make_batch(flow, 1, transfers=[{"src": 1, "dst": 2, "amount": 5, "_ts": 10}])
    run = run_in_memory(flow, [batch], executor="serial", state=initial)
    run.sink.rows("balances")

Comparing two runs (:func:`assert_same_results`) checks exactly what executors must agree on: the
committed set (the aborts), the outputs, the dead letters, the deltas, and the final state.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from etl_dataflows.batch import BatchResult, EngineBatch
from etl_dataflows.dataflow import CompiledDataflow, Dataflow
from etl_dataflows.executors import create_executor
from etl_dataflows.state import StateImage
from etl_dataflows.types import POS, TS, arrow_array


def _compiled(flow: Dataflow | CompiledDataflow) -> CompiledDataflow:
    return flow.build() if isinstance(flow, Dataflow) else flow


def events_table(
    flow: Dataflow | CompiledDataflow,
    source: str,
    rows: Sequence[Mapping[str, Any]],
    first_pos: int = 0,
) -> pa.Table:
    """An Arrow table of events for ``source`` from dict rows of engine values.

    Each row carries the source's columns (missing ones are null) and ``_ts``; ``_pos`` defaults to
    ``first_pos`` plus the row's index.
    """
    compiled = _compiled(flow)
    schema = compiled.schemas[source]
    arrays = [arrow_array([r.get(n) for r in rows], kind) for n, kind in schema.items()]
    arrays.append(pa.array([r[TS] for r in rows], type=pa.int64()))
    arrays.append(
        pa.array([r.get(POS, first_pos + i) for i, r in enumerate(rows)], type=pa.int64())
    )
    return pa.Table.from_arrays(arrays, names=[*schema, TS, POS])


def make_batch(
    flow: Dataflow | CompiledDataflow, batch_id: int, **sources: Sequence[Mapping[str, Any]]
) -> EngineBatch:
    """A batch with the given rows per source (keyword = source step id)."""
    compiled = _compiled(flow)
    return EngineBatch(
        batch_id, {name: events_table(compiled, name, rows) for name, rows in sources.items()}
    )


@dataclass
class TestingSink:
    """Everything a run produced, batch after batch."""

    __test__ = False  # not a pytest test class

    outputs: dict[str, list[pa.Table]] = field(default_factory=dict)
    dead_letters: list[pa.Table] = field(default_factory=list)
    aborts: list[pa.Table] = field(default_factory=list)

    def collect(self, result: BatchResult) -> None:
        for name, table in result.outputs.items():
            self.outputs.setdefault(name, []).append(table)
        self.dead_letters.append(result.dead_letters)
        self.aborts.append(result.aborts)

    def table(self, name: str) -> pa.Table | None:
        tables = self.outputs.get(name)
        return pa.concat_tables(tables) if tables else None

    def rows(self, name: str) -> list[dict[str, Any]]:
        table = self.table(name)
        return [] if table is None else table.to_pylist()

    def dead_letter_rows(self) -> list[dict[str, Any]]:
        return pa.concat_tables(self.dead_letters).to_pylist() if self.dead_letters else []

    def abort_rows(self) -> list[dict[str, Any]]:
        return pa.concat_tables(self.aborts).to_pylist() if self.aborts else []


@dataclass
class RunResult:
    """The results of :func:`run_in_memory`."""

    executor: str
    results: list[BatchResult]
    sink: TestingSink
    final_state: StateImage


def run_in_memory(
    flow: Dataflow | CompiledDataflow,
    batches: Iterable[EngineBatch],
    *,
    executor: str = "serial",
    state: StateImage | None = None,
) -> RunResult:
    """Run ``batches`` in order through a fresh executor and collect everything."""
    runner = create_executor(executor, _compiled(flow), state)
    try:
        sink = TestingSink()
        results = []
        for batch in batches:
            result = runner.run_batch(batch)
            sink.collect(result)
            results.append(result)
        return RunResult(executor, results, sink, runner.state_image())
    finally:
        runner.close()


def _diff_tables(what: str, a: pa.Table, b: pa.Table) -> str | None:
    if a.equals(b):
        return None
    if a.schema != b.schema:
        return f"{what}: schemas differ:\n{a.schema}\nvs\n{b.schema}"
    rows_a, rows_b = a.to_pylist(), b.to_pylist()
    if len(rows_a) != len(rows_b):
        return f"{what}: {len(rows_a)} rows vs {len(rows_b)} rows"
    for i, (ra, rb) in enumerate(zip(rows_a, rows_b, strict=True)):
        if ra != rb:
            return f"{what}: first difference at row {i}:\n{ra}\nvs\n{rb}"
    return f"{what}: tables differ"


def assert_same_results(expected: RunResult, actual: RunResult) -> None:
    """Raise ``AssertionError`` describing the first difference between two runs."""
    label = f"{actual.executor} vs {expected.executor}"
    if len(expected.results) != len(actual.results):
        raise AssertionError(
            f"{label}: {len(actual.results)} batch results vs {len(expected.results)}"
        )
    for er, ar in zip(expected.results, actual.results, strict=True):
        where = f"{label}, batch {er.batch_id}"
        problems = [
            _diff_tables(f"{where} aborts", er.aborts, ar.aborts),
            _diff_tables(f"{where} dead letters", er.dead_letters, ar.dead_letters),
        ]
        if set(er.outputs) != set(ar.outputs):
            problems.append(f"{where}: outputs {sorted(ar.outputs)} vs {sorted(er.outputs)}")
        for name in sorted(set(er.outputs) & set(ar.outputs)):
            problems.append(
                _diff_tables(f"{where} output {name!r}", er.outputs[name], ar.outputs[name])
            )
        for name in sorted(set(er.deltas) | set(ar.deltas)):
            ed, ad = er.deltas.get(name), ar.deltas.get(name)
            if ed is None or ad is None:
                problems.append(f"{where}: delta of {name!r} missing on one side")
                continue
            problems.append(_diff_tables(f"{where} upserts of {name!r}", ed.upserts, ad.upserts))
            problems.append(_diff_tables(f"{where} deletes of {name!r}", ed.deletes, ad.deletes))
        if er.sequences != ar.sequences:
            problems.append(f"{where}: sequences {ar.sequences} vs {er.sequences}")
        found = [p for p in problems if p]
        if found:
            raise AssertionError(found[0])
    es, as_ = expected.final_state, actual.final_state
    if es.sequences != as_.sequences:
        raise AssertionError(f"{label}: final sequences {as_.sequences} vs {es.sequences}")
    for name in sorted(set(es.tables) | set(as_.tables)):
        if name not in es.tables or name not in as_.tables:
            raise AssertionError(f"{label}: final state of {name!r} missing on one side")
        problem = _diff_tables(
            f"{label} final state of {name!r}", es.tables[name], as_.tables[name]
        )
        if problem:
            raise AssertionError(problem)
