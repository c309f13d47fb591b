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
from etl_dataflows.exceptions import BatchInputError
from etl_dataflows.executors import create_executor
from etl_dataflows.raw_values import convert_columns, python_columns
from etl_dataflows.state import StateImage
from etl_dataflows.types import POS, TS


def _compiled(flow: Dataflow | CompiledDataflow) -> CompiledDataflow:
    return flow.build() if isinstance(flow, Dataflow) else flow


def events_table(
    flow: Dataflow | CompiledDataflow,
    source: str,
    rows: Sequence[Mapping[str, Any]],
    first_pos: int = 0,
) -> pa.Table:
    """An Arrow table of events for ``source`` from dict rows of engine values.

    Each row carries some of the source's columns (missing ones are null) and ``_ts``, the event
    time (int64 µs); ``_pos`` defaults to ``first_pos`` plus the row's index. Values are read as
    ingest reads a Python or JSON event (:mod:`etl_dataflows.raw_values`). Raises
    :class:`~etl_dataflows.exceptions.BatchInputError` naming the source, the row (its index in
    ``rows``) and the column for an unknown source or column, a missing or non-integer ``_ts``
    or ``_pos``, or a value that does not fit its column, with the reason ingest gives when it
    dead-letters the same value ("column 'amount': cannot read 5.5 as int64").
    """
    compiled = _compiled(flow)
    if source not in compiled.sources:
        raise BatchInputError(
            f"make_batch: no source {source!r} in dataflow {compiled.name!r}; its sources: "
            f"{', '.join(compiled.sources)}"
        )
    columns = {name: kind or "string" for name, kind in compiled.schemas[source].items()}
    allowed = {*columns, TS, POS}
    if not allowed.issuperset(set().union(*rows)):  # (one pass in C; the row only on error)
        i, name = next((i, n) for i, r in enumerate(rows) for n in sorted(r) if n not in allowed)
        raise BatchInputError(
            f"make_batch: source {source!r} row {i}: no column {name!r}; the source's columns: "
            f"{', '.join(columns)}"
        )
    times = [r.get(TS, _MISSING) for r in rows]
    positions = [r.get(POS, first_pos + i) for i, r in enumerate(rows)]
    ts, pos = _meta_column(source, TS, times), _meta_column(source, POS, positions)
    raw, bad = python_columns(columns, rows)
    arrays, unreadable = convert_columns(raw, columns)
    for i, reason in unreadable.items():
        bad[i] = f"{bad[i]}; {reason}" if i in bad else reason
    if bad:
        first = min(bad)
        raise BatchInputError(f"make_batch: source {source!r} row {first}: {bad[first]}")
    return pa.Table.from_arrays([*arrays, ts, pos], names=[*columns, TS, POS])


_MISSING = object()


def _meta_column(source: str, name: str, values: list[Any]) -> pa.Array:
    """``values`` of meta column ``name`` as int64, or the error naming the first bad row."""
    if set(map(type, values)) <= {int}:
        try:
            return pa.array(values, type=pa.int64())
        except OverflowError:
            pass
    for i, value in enumerate(values):
        if value is _MISSING:
            raise BatchInputError(
                f"make_batch: source {source!r} row {i}: column {name!r} (the event time, int64 "
                "µs) is missing"
            )
        if isinstance(value, bool) or not isinstance(value, int) or not -(2**63) <= value < 2**63:
            raise BatchInputError(
                f"make_batch: source {source!r} row {i}: column {name!r} must be a 64-bit "
                f"integer, got {value!r}"
            )
    return pa.array(values, type=pa.int64())


def make_batch(
    flow: Dataflow | CompiledDataflow, batch_id: int, **sources: Sequence[Mapping[str, Any]]
) -> EngineBatch:
    """A batch with the given rows per source (keyword = source step id); see
    :func:`events_table` for the rows and the errors."""
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
