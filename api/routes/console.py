"""The console's JSON (``GET /console/overview|batches|dataflow|report``); the answers are
built by :mod:`api.console_view` from the service's recorder (:mod:`api.console_recorder`).
Every route here wants the token like every other JSON route (``API__TOKEN``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query

from api import console_view
from api.console_models import BatchTimelineEntry, ConsoleOverview, DataflowGraph, RunReport
from api.console_recorder import RING_CAPACITY
from api.routes.common import ERRORS, ServiceDep, new_router

router = new_router()


@router.get("/console/overview", response_model=ConsoleOverview, responses=ERRORS, tags=["console"])
def overview(service: ServiceDep) -> ConsoleOverview:
    """What the console's first screen shows, cheap enough to poll every second: pipeline
    state, events per second and in all, staged watermark and release point, per stream its
    progress and lag, per target what it acknowledged and merged and its lag (from the
    migrator's memory: no warehouse is asked), the per-second series of the last 300 s
    (events, batches, freshness p50/p99, watermark) and the newest 20 batches."""
    return console_view.overview(service)


@router.get(
    "/console/batches",
    response_model=list[BatchTimelineEntry],
    responses=ERRORS,
    tags=["console"],
)
def batches(
    service: ServiceDep,
    after: Annotated[int, Query(ge=0, le=2**62)] = 0,
    limit: Annotated[int, Query(ge=1, le=RING_CAPACITY)] = 100,
) -> list[BatchTimelineEntry]:
    """The batch timeline, oldest first: batches after ``after`` among the last 1000 committed
    while this service ran (older ones: ``GET /batches``), each with its engine decision per
    step (strategy, why, compiled), engine and commit time, freshness, and when each warehouse
    target acknowledged it."""
    return console_view.timeline(service, after, limit)


@router.get("/console/dataflow", response_model=DataflowGraph, responses=ERRORS, tags=["console"])
def dataflow(service: ServiceDep) -> DataflowGraph:
    """The dataflow as a graph: sources, steps, state tables and sinks with their edges; per
    step its counts since the service started and whether it ran compiled; per table and sink
    the rows staging holds."""
    return console_view.dataflow(service)


@router.get("/console/report", response_model=RunReport, responses=ERRORS, tags=["console"])
def report(service: ServiceDep) -> RunReport:
    """The report of the ``streamdi tpcdi run`` this service serves (``--serve``): phases,
    freshness, the audit's checks, TPC_DI_RPS. 404 ``not_found`` when it serves no run."""
    return console_view.run_report(service)
