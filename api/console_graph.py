"""The dataflow as a graph for the console (``GET /console/dataflow``), derived from the compiled
dataflow staging holds (:class:`~etl_dataflows.dataflow.CompiledDataflow`).

Nodes: one per source (``source:<id>``), per step that is neither a source nor a sink
(``step:<id>``), per state table (``table:<name>``) and per sink (``sink:<name>``). Edges, in
the dataflow's order: ``input`` from each step's inputs into it, ``emits`` from a sink's input
into the sink, and per transactional step ``writes`` to each table it changes and ``reads`` from
each table it only reads. The counts come from the caller: the recorder's totals since the
service started (:class:`api.console_recorder.StepTotals`) and staging's row counts.
"""

from __future__ import annotations

from collections.abc import Mapping

from api.console_models import (
    DataflowEdge,
    DataflowGraph,
    DataflowNode,
    EdgeKind,
    SinkNode,
    SourceNode,
    StepNode,
    TableNode,
)
from api.console_recorder import StepTotals
from etl_dataflows.dataflow import (
    CompiledDataflow,
    FilterStep,
    FlatMapStep,
    MapStep,
    MergeStep,
    SinkStep,
    SourceStep,
    Step,
    ValidateStep,
    step_inputs,
)
from etl_dataflows.transaction import TransactionStep
from etl_dataflows.types import META_COLUMNS

_STEP_KINDS: tuple[tuple[type, str], ...] = (
    (MapStep, "map"),
    (FilterStep, "filter"),
    (FlatMapStep, "flat_map"),
    (ValidateStep, "validate"),
    (MergeStep, "merge"),
    (TransactionStep, "transact"),
)


def step_kind(step: Step) -> str:
    """The method of :class:`~etl_dataflows.dataflow.Dataflow` that declares ``step``."""
    for cls, name in _STEP_KINDS:
        if isinstance(step, cls):
            return name
    return type(step).__name__


def node_id(flow: CompiledDataflow, step_id: str) -> str:
    """The graph id of the step, source or sink named ``step_id``."""
    step = flow.step(step_id)
    if isinstance(step, SourceStep):
        return f"source:{step_id}"
    if isinstance(step, SinkStep):
        return f"sink:{step_id}"
    return f"step:{step_id}"


def dataflow_graph(
    flow: CompiledDataflow,
    totals: Mapping[str, StepTotals],
    *,
    table_rows: Mapping[str, int],
    sink_rows: Mapping[str, int],
    staged_watermark: int,
) -> DataflowGraph:
    """``flow`` as a graph; see the module docstring. ``table_rows`` and ``sink_rows`` are
    staging's counts at ``staged_watermark`` (0 for a name not given)."""
    nodes: list[DataflowNode] = []
    edges: list[DataflowEdge] = []
    for step in flow.steps:
        seen = totals.get(step.id, StepTotals())
        for upstream in step_inputs(step):
            kind: EdgeKind = "emits" if isinstance(step, SinkStep) else "input"
            edges.append(
                DataflowEdge(
                    source=node_id(flow, upstream), target=node_id(flow, step.id), kind=kind
                )
            )
        if isinstance(step, SourceStep):
            schema = flow.schemas[step.id]
            columns = {c: str(t or "string") for c, t in schema.items() if c not in META_COLUMNS}
            nodes.append(SourceNode(id=f"source:{step.id}", name=step.id, columns=columns))
            continue
        if isinstance(step, SinkStep):
            nodes.append(
                SinkNode(
                    id=f"sink:{step.id}",
                    name=step.id,
                    staged_rows=sink_rows.get(step.id, 0),
                    rows=seen.rows_out,
                )
            )
            continue
        nodes.append(
            StepNode(
                id=f"step:{step.id}",
                name=step.id,
                step_kind=step_kind(step),
                compiled=seen.compiled,
                batches=seen.batches,
                events=seen.events,
                rows_out=seen.rows_out,
                committed_txns=seen.committed_txns,
                aborted_txns=seen.aborted_txns,
                dead_letters=seen.dead_letters,
                last_strategy=seen.last_strategy,
            )
        )
        if isinstance(step, TransactionStep):
            edges.extend(_table_edges(step))
    for name, table in flow.tables.items():
        nodes.append(
            TableNode(
                id=f"table:{name}",
                name=name,
                table_kind=table.kind,
                staged_rows=table_rows.get(name, 0),
            )
        )
    return DataflowGraph(
        name=flow.name, staged_watermark=staged_watermark, nodes=nodes, edges=edges
    )


def _table_edges(step: TransactionStep) -> list[DataflowEdge]:
    written: dict[str, None] = {}
    read: dict[str, None] = {}
    for op in step.operations:
        (read if op.kind == "read" else written)[op.table] = None
    me = f"step:{step.id}"
    out = [DataflowEdge(source=me, target=f"table:{t}", kind="writes") for t in written]
    out += [
        DataflowEdge(source=f"table:{t}", target=me, kind="reads") for t in read if t not in written
    ]
    return out
