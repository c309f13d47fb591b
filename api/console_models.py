"""The answers of the console's JSON routes (:mod:`api.routes.console`), as pydantic models, so
``/openapi.json`` describes them.

Times are epoch seconds (floats), durations carry their unit in the name (``_ms``, ``_s``).
``GET /console/overview`` (:class:`ConsoleOverview`) is polled every second by each open page;
``GET /console/batches`` serves :class:`BatchTimelineEntry`; ``GET /console/dataflow``
:class:`DataflowGraph`; ``GET /console/report`` :class:`RunReport`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from api.responses import PipelineInfo

#: A figure of an engine decision (:data:`etl_dataflows.batch.Figure`).
Figure = int | float | bool | str | dict[str, float]


# -- the batch timeline --------------------------------------------------------------------------


class StepRun(BaseModel):
    """How one transactional step ran in one batch: the engine's ``strategy`` and ``why``,
    whether it ran ``compiled`` (false for ``interpreted`` and for the serial executor, which
    records no decision: then ``strategy`` is ``serial``), the transactions it ran, and every
    figure the decision recorded (statistics, timings in ms; which ones depends on the
    strategy). ``local_strategy``: under Spark's ``driver``, the local executor's choice."""

    step: str
    strategy: str
    why: str
    compiled: bool
    transactions: int | None
    local_strategy: str | None = None
    figures: dict[str, Figure] = Field(default_factory=dict)


class BatchTimelineEntry(BaseModel):
    """One batch committed while the service ran: counts, when its first record arrived and
    when its staging commit returned, engine and commit time, its freshness (arrival to
    commit), the engine's decision per step, and per warehouse target when the target
    acknowledged it (null: not yet). Batches committed in one group commit share
    ``commit_ms``."""

    batch_id: int
    events: int
    records: int
    committed_txns: int
    aborted_txns: int
    dead_letters: int
    arrived_at: float
    executed_ms: float
    commit_ms: float
    committed_at: float
    freshness_s: float
    steps: list[StepRun]
    targets: dict[str, float | None]


# -- the overview --------------------------------------------------------------------------------


class StreamOverview(BaseModel):
    """One stream: the last logical batch applied, the Kafka records not yet committed to
    staging (null: not measured yet, or no pipeline), the events applied in all."""

    last_batch: int
    lag_records: int | None
    events: int


class TargetOverview(BaseModel):
    """One warehouse target as the migrator last saw it (no warehouse is asked for this): the
    last batch it acknowledged and when the service learnt it, the last batch merged into its
    full tables (null: unknown yet, or it does not answer), batches and seconds behind staging,
    whether queries may read it, whether the pipeline pushes to it or it pulls, whether it
    answered the last time the migrator tried (null: not tried yet) and the error if not."""

    acknowledged: int
    acknowledged_at: float | None
    merged_through: int | None
    lag_batches: int
    lag_seconds: float
    readable: bool
    mode: Literal["push", "pull"]
    reachable: bool | None
    error: str | None


class SeriesPoint(BaseModel):
    """One second (that has ended) starting at ``t``: events and batches committed in it, the
    p50 and p99 freshness of those batches (nearest rank; null when none), the staged watermark
    at its end."""

    t: float
    events: int
    batches: int
    freshness_p50_s: float | None
    freshness_p99_s: float | None
    staged_watermark: int


class ConsoleOverview(BaseModel):
    """Everything the console's first screen shows, cheap to serve every second: the server's
    clock, the pipeline, throughput (events per second over the last 10 s of commits) and
    events since the service started, staging's watermark and release point, per stream and
    per target their progress, the per-second series of the last 300 s (oldest first, the
    second under way left out), the newest 20 batches (newest last), and whether
    ``GET /console/report`` answers (``report``: the page shows its link only then, without a
    request that would 404)."""

    at: float
    pipeline: PipelineInfo
    events_per_second: float
    events_total: int
    staged_watermark: int
    released_through: int
    streams: dict[str, StreamOverview]
    targets: dict[str, TargetOverview]
    series: list[SeriesPoint]
    recent_batches: list[BatchTimelineEntry]
    report: bool


# -- the dataflow graph --------------------------------------------------------------------------


class SourceNode(BaseModel):
    """A source of the dataflow (a stream) and its columns with their types."""

    id: str
    kind: Literal["source"] = "source"
    name: str
    columns: dict[str, str]


class StepNode(BaseModel):
    """A step: its kind (``map``, ``filter``, ``flat_map``, ``validate``, ``merge``,
    ``transact``), its counts over the batches committed since the service started (events in,
    rows out, transactions committed and aborted, dead letters), and for a transactional step
    the strategy of its last batch and whether it ran compiled (null before its first batch,
    and for stateless steps)."""

    id: str
    kind: Literal["step"] = "step"
    name: str
    step_kind: str
    compiled: bool | None
    batches: int
    events: int
    rows_out: int
    committed_txns: int
    aborted_txns: int
    dead_letters: int
    last_strategy: str | None


class TableNode(BaseModel):
    """A state table: its kind (``table``, ``history``, ``window``) and the rows staging holds
    at the watermark (every version of a history table)."""

    id: str
    kind: Literal["table"] = "table"
    name: str
    table_kind: str
    staged_rows: int


class SinkNode(BaseModel):
    """A sink: the output rows staging still holds (not yet released to every target) and the
    rows it received since the service started."""

    id: str
    kind: Literal["sink"] = "sink"
    name: str
    staged_rows: int
    rows: int


DataflowNode = Annotated[SourceNode | StepNode | TableNode | SinkNode, Field(discriminator="kind")]


EdgeKind = Literal["input", "reads", "writes", "emits"]


class DataflowEdge(BaseModel):
    """An edge: ``input`` (rows flow from a source or step into a step), ``reads`` (a step
    reads a table it does not write), ``writes`` (a step writes a table), ``emits`` (rows flow
    into a sink)."""

    model_config = ConfigDict(serialize_by_alias=True)

    source: str = Field(serialization_alias="from")
    target: str = Field(serialization_alias="to")
    kind: EdgeKind


class DataflowGraph(BaseModel):
    """The dataflow the service stages, as a graph (node ids are ``<kind>:<name>``), with
    staging's counts at ``staged_watermark``."""

    name: str
    staged_watermark: int
    nodes: list[DataflowNode]
    edges: list[DataflowEdge]


# -- the run report ------------------------------------------------------------------------------


class PhaseReport(BaseModel):
    """One phase of a TPC-DI run: wall time, source rows, their rate, and (incremental updates)
    the freshness reached."""

    model_config = ConfigDict(extra="allow")

    seconds: float
    rows: int
    rows_per_second: float | None = None
    freshness_s: float | None = None


class AuditCheck(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str
    ok: bool
    detail: str | None = None
    clause: str | None = None
    seconds: float | None = None


class AuditReport(BaseModel):
    """The automated audit: checks passed and failed, each check with its clause."""

    model_config = ConfigDict(extra="allow")

    ok: int
    fail: int
    seconds: float | None = None
    checks: list[AuditCheck] = Field(default_factory=list)


class RunReport(BaseModel):
    """The report of the ``streamdi tpcdi run`` this service serves, as its ``--json`` writes
    it: scale factor, target(s), phases, the metric of clause 7 (TH, TI1, TI2) and TPC_DI_RPS,
    the audit, peak memory, and the run's details (``run``)."""

    model_config = ConfigDict(extra="allow")

    sf: float | None = None
    target: str | None = None
    phases: dict[str, PhaseReport] = Field(default_factory=dict)
    metric: dict[str, Any] | None = None
    tpc_di_rps: int | None = None
    audit: AuditReport | None = None
    peak_mem_mb: float | None = None
    chart: str | None = None
    run: dict[str, Any] | None = None
