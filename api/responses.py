"""The answers of the REST API that :mod:`api.models` does not hold: batches, migration, dead
letters, operations and health (pydantic models; they are the OpenAPI spec of those answers).

The service (:class:`api.service.QueryService`) returns these models and the routes serve them
as they are, so ``/openapi.json`` describes exactly what goes over the wire. Field order is the
order of the keys on the wire. Where an answer has keys that appear only in some states (a
target that cannot be reached has no watermark), the route serves the model with
``response_model_exclude_unset=True``: a key is on the wire iff the service set it, explicit
nulls included.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from migration.migrator import MigrationReport

PipelineState = Literal["absent", "starting", "running", "stopped", "failed"]


# -- the batch ledger and dead letters ---------------------------------------------------------


class BatchInfo(BaseModel):
    """One batch of the ledger: its counts, when it arrived and committed (ISO text), how long
    it ran in the engine, and per stream the logical batch it consumed up to."""

    batch_id: int
    status: str
    events: int | None
    records: int | None
    committed_txns: int | None
    aborted_txns: int | None
    dead_letters: int | None
    output_rows: int | None
    arrived_at: str | None
    executed_ms: float | None
    committed_at: str | None
    streams: dict[str, Any]


class DeadLetter(BaseModel):
    """A rejected record or event: where it came from (stream, step, Kafka position, source
    position, event time), why, whether a later batch replayed it, and the original: ``event``
    when the stored payload is a JSON object, else the raw ``payload`` text."""

    id: int
    batch_id: int
    stream: str | None
    step: str | None
    topic: str | None
    partition: int | None
    offset: int | None
    pos: int | None
    ts: int | None
    reason: str | None
    replayed_in: int | None
    encoding: str
    payload_bytes: int | None
    event: dict[str, Any] | None
    payload: str | None


# -- migration ---------------------------------------------------------------------------------


class BootstrapRelation(BaseModel):
    """One relation of a bootstrap: rows copied, the staging watermark it is copied at, whether
    its copy committed, where its rows came from."""

    rows: int
    through: int | None = None
    done: bool
    source: str


class BootstrapStatus(BaseModel):
    """A target's bootstrap (a target added after staging released batches): ``state``
    (``copying``, ``loaded``: its ledger holds the snapshot ``through``, later batches are
    loading; ``caught_up``: queries read it; ``failed``: it resumes), the peer the sinks came
    from and its watermark, ``sinks_from`` (sink rows of earlier batches were not available),
    relations copied of all, rows, seconds, the error that stopped it; ``method``, the path it
    took in this process (``file``: a copy of a DuckDB peer's file; ``rows``: relations copied
    row by row in bulk; empty when read from the target's record)."""

    state: Literal["copying", "loaded", "caught_up", "failed"]
    through: int | None = None
    peer: str | None = None
    peer_watermark: int | None = None
    sinks_from: int
    relations_copied: int
    relations_total: int
    rows: int
    seconds: float
    error: str | None = None
    method: Literal["file", "rows", ""] = ""
    relations: dict[str, BootstrapRelation]


class TargetStatus(BaseModel):
    """What one warehouse target holds: reachable ones have their watermark, the batches still
    pending, what is merged into the full tables and the rows waiting in the delta tables;
    unreachable ones have the ``error``. ``mode`` says whether the pipeline pushes to it or it
    pulls; ``readable`` whether queries read it (not while it is bootstrapped and has not caught
    up), ``bootstrap`` its bootstrap, if it had one."""

    acknowledged: int
    reachable: bool
    watermark: int | None = None
    pending_batches: int | None = None
    merged_through: int | None = None
    merged_at: str | None = None
    unmerged_rows: int | None = None
    busy: bool | None = None
    readable: bool | None = None
    bootstrap: BootstrapStatus | None = None
    error: str | None = None
    mode: Literal["push", "pull"] | None = None


class MigrationStatus(BaseModel):
    """Staging's watermark and release point; per target what it holds (``GET /migration``)."""

    stream: str
    staged_watermark: int
    released_through: int
    targets: dict[str, TargetStatus]


class TargetRoundInfo(BaseModel):
    """What one migration round did for one target: the batches after ``from`` up to
    ``watermark``, the rows moved and merged, or the error that stopped it."""

    model_config = ConfigDict(serialize_by_alias=True)

    from_: int = Field(alias="from")
    watermark: int
    batches: int
    rows: int
    merged_rows: int | None
    error: str | None
    bootstrap: BootstrapStatus | None = None


class MigrationRound(BaseModel):
    """One migration round (``POST /migration/push`` or ``/migration/pull``)."""

    via: Literal["push", "pull"]
    staged_watermark: int
    released_through: int
    seconds: float
    targets: dict[str, TargetRoundInfo]

    @classmethod
    def of(cls, via: Literal["push", "pull"], report: MigrationReport) -> MigrationRound:
        """The answer for a round the migrator reported (also what ``streamdi migrate --json``
        writes)."""
        return cls(
            via=via,
            staged_watermark=report.staged_watermark,
            released_through=report.released_through,
            seconds=report.seconds,
            targets={
                n: TargetRoundInfo.model_validate(
                    {
                        "from": r.start,
                        "watermark": r.watermark,
                        "batches": r.batches,
                        "rows": r.rows,
                        "merged_rows": r.merge.rows if r.merge else None,
                        "error": r.error,
                        "bootstrap": r.bootstrap.as_dict() if r.bootstrap else None,
                    }
                )
                for n, r in report.targets.items()
            },
        )


# -- operations and health ---------------------------------------------------------------------


class ServiceInfo(BaseModel):
    version: str
    pid: int
    uptime_s: float


class PipelineInfo(BaseModel):
    state: PipelineState
    error: str | None
    paused: bool


class BrokerInfo(BaseModel):
    """The Kafka broker of the hosted pipeline: where, whether embedded, whether it answers (and
    for how long it has not), the embedded broker's pid, the restarts the service did, and the
    last problem seen."""

    bootstrap_servers: str
    embedded: bool
    up: bool
    down_for_s: float | None
    pid: int | None
    restarts: int
    error: str | None


class StagingInfo(BaseModel):
    path: str
    watermark: int
    released_through: int
    bytes: int
    newest_batch_age_s: float


class StreamProgress(BaseModel):
    last_batch: int
    lag_records: int | None


class TargetLag(BaseModel):
    acknowledged: int
    lag_batches: int
    lag_seconds: float


class EngineInfo(BaseModel):
    events_per_second: float


class ServiceStatus(BaseModel):
    """A summary for operators (``GET /status``, ``streamdi status``): the service, the hosted
    pipeline (paused or not), staging's watermark and size, per stream its last batch and
    consumer lag, per target its acknowledged batch and migration lag, the engine's rate, the
    broker (up or not, its restarts)."""

    service: ServiceInfo
    pipeline: PipelineInfo
    staging: StagingInfo
    streams: dict[str, StreamProgress]
    migration: dict[str, TargetLag]
    engine: EngineInfo
    #: None when no pipeline is hosted.
    broker: BrokerInfo | None = None


class Health(BaseModel):
    """Liveness (``GET /health``): ``ok`` unless the hosted pipeline failed (then ``error``)."""

    status: Literal["ok", "failed"]
    pipeline: PipelineState
    error: str | None
    uptime_s: float


class Readiness(BaseModel):
    """Readiness (``GET /ready``): ``ready`` once the hosted pipeline consumes, else the
    ``reasons``."""

    status: Literal["ready", "not ready"]
    pipeline: PipelineState
    staged_watermark: int
    targets: list[str]
    reasons: list[str]
