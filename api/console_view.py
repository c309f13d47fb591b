"""The console's answers, built from the service's recorder and what it keeps in memory
(:mod:`api.routes.console` serves them).

* :func:`overview` — ``GET /console/overview``, polled every second by every open page. It asks
  no warehouse and takes no lock the pipeline or the migration holds: the pipeline, the
  throughput, the series, the newest batches and the targets come from the recorder
  (:class:`api.console_recorder.ConsoleRecorder`), the watermarks from the store's and the
  migrator's memory. Staging is read (one snapshot) only when it holds batches the recorder did
  not see committed (the first call after a start) or a target's oldest unacknowledged batch is
  older than the recorder's ring.
* :func:`timeline` — ``GET /console/batches``: the recorder's ring.
* :func:`dataflow` — ``GET /console/dataflow``: the graph (:mod:`api.console_graph`) with the
  recorder's step totals and one staging snapshot's row counts.
* :func:`run_report` — ``GET /console/report``: the TPC-DI run's report the service was given,
  or :class:`~api.exceptions.ReportNotFound`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from contextlib import ExitStack
from datetime import UTC
from typing import TYPE_CHECKING

from api.console_graph import dataflow_graph
from api.console_models import (
    BatchTimelineEntry,
    ConsoleOverview,
    DataflowGraph,
    RunReport,
    SeriesPoint,
    StepRun,
    StreamOverview,
    TargetOverview,
)
from api.console_recorder import RecordedBatch, RecorderView, compiled
from api.exceptions import ReportNotFound
from api.responses import PipelineInfo
from staging.snapshot import StagingSnapshot, open_snapshot

if TYPE_CHECKING:
    from api.service import QueryService

#: What a transactional step without an engine decision (the serial executor) shows.
SERIAL_WHY = "the serial executor records no decision: one transaction at a time, interpreted"


def timeline_entry(batch: RecordedBatch, targets: Iterable[str]) -> BatchTimelineEntry:
    """One ring entry as the timeline shows it; ``targets`` are listed even when they have not
    acknowledged the batch yet (null)."""
    facts = batch.facts
    steps: list[StepRun] = []
    decided: set[str] = set()
    for decision in facts.decisions:
        decided.add(decision.step)
        local = decision.local.strategy if decision.local is not None else None
        transactions = decision.figures.get("transactions")
        steps.append(
            StepRun(
                step=decision.step,
                strategy=decision.strategy,
                why=decision.why,
                compiled=compiled(decision.strategy, local),
                transactions=transactions if isinstance(transactions, int) else None,
                local_strategy=local,
                figures=dict(decision.figures),
            )
        )
    for step, stats in facts.steps.items():
        # a transactional step the executor ran without a decision: committed or aborted some
        if step not in decided and (stats.committed or stats.aborted):
            steps.append(
                StepRun(
                    step=step,
                    strategy="serial",
                    why=SERIAL_WHY,
                    compiled=False,
                    transactions=stats.committed + stats.aborted,
                )
            )
    return BatchTimelineEntry(
        batch_id=facts.batch_id,
        events=facts.events,
        records=facts.records,
        committed_txns=sum(s.committed for s in facts.steps.values()),
        aborted_txns=sum(s.aborted for s in facts.steps.values()),
        dead_letters=facts.dead_letters,
        arrived_at=facts.arrived_at,
        executed_ms=round(facts.executed_s * 1000, 3),
        commit_ms=round(facts.commit_s * 1000, 3),
        committed_at=facts.committed_at,
        freshness_s=round(facts.latency_s, 6),
        steps=steps,
        targets={t: batch.targets.get(t) for t in sorted({*targets, *batch.targets})},
    )


def timeline(service: QueryService, after: int, limit: int) -> list[BatchTimelineEntry]:
    """The ring's batches after ``after``, oldest first."""
    targets = _target_names(service)
    return [timeline_entry(b, targets) for b in service.console.batches(after, limit)]


def _target_names(service: QueryService) -> list[str]:
    return list(service.migrator.targets) if service.migrator is not None else []


class _LazySnapshot:
    """At most one staging snapshot per answer, opened on first use."""

    def __init__(self, service: QueryService, stack: ExitStack) -> None:
        self._service = service
        self._stack = stack
        self._snap: StagingSnapshot | None = None

    def get(self) -> StagingSnapshot:
        if self._snap is None:
            self._snap = self._stack.enter_context(open_snapshot(self._service.store))
        return self._snap


def overview(service: QueryService) -> ConsoleOverview:
    """``GET /console/overview``; see the module docstring."""
    recorder = service.console
    with ExitStack() as stack:
        snapshot = _LazySnapshot(service, stack)
        if service.store.watermark > recorder.last_batch:
            snap = snapshot.get()
            recorder.seed_streams(snap.streams(), snap.watermark)
        view = recorder.view()
        # read after the view: staging commits a batch before the recorder hears of it, so the
        # watermark is never behind a batch the view shows
        staged = service.store.watermark
        targets = _targets(service, view, staged, snapshot)
    state, error = service.pipeline()
    ingest = service.ingest
    lag = dict(ingest.consumer_lag) if ingest is not None else {}
    names = _target_names(service)
    return ConsoleOverview(
        at=time.time(),
        pipeline=PipelineInfo(
            state=state,
            error=error,
            paused=ingest is not None and ingest.paused.is_set(),
        ),
        events_per_second=round(view.events_per_second, 1),
        events_total=view.events_total,
        staged_watermark=staged,
        released_through=service.migrator.staged.released_through()
        if service.migrator is not None
        else 0,
        streams={
            stream: StreamOverview(
                last_batch=view.streams[stream].last_batch if stream in view.streams else 0,
                lag_records=lag.get(stream),
                events=view.streams[stream].events if stream in view.streams else 0,
            )
            for stream in service.store.flow.sources
        },
        targets=targets,
        series=[
            SeriesPoint(
                t=p.t,
                events=p.events,
                batches=p.batches,
                freshness_p50_s=None if p.freshness_p50_s is None else round(p.freshness_p50_s, 6),
                freshness_p99_s=None if p.freshness_p99_s is None else round(p.freshness_p99_s, 6),
                staged_watermark=p.staged_watermark,
            )
            for p in view.series
        ],
        recent_batches=[timeline_entry(b, names) for b in view.recent],
        report=service.run_report is not None,
    )


def _targets(
    service: QueryService, view: RecorderView, staged: int, snapshot: _LazySnapshot
) -> dict[str, TargetOverview]:
    migrator = service.migrator
    if migrator is None:
        return {}
    push = set(service.settings.migration.push_targets)
    now = time.time()
    out: dict[str, TargetOverview] = {}
    for name in migrator.targets:
        state = view.targets.get(name)
        acked = state.acknowledged if state is not None else 0
        seconds = 0.0
        if acked < staged:
            oldest = service.console.committed_at(acked + 1)
            if oldest is None:  # committed before the ring's oldest batch: staging knows
                info = snapshot.get().batch(acked + 1)
                committed = info.get("committed_at") if info is not None else None
                if committed is not None:  # naive UTC, as staging stores it
                    oldest = committed.replace(tzinfo=UTC).timestamp()
            seconds = max(0.0, now - oldest) if oldest is not None else 0.0
        out[name] = TargetOverview(
            acknowledged=acked,
            acknowledged_at=state.acknowledged_at if state is not None else None,
            merged_through=state.merged_through if state is not None else None,
            lag_batches=max(0, staged - acked),
            lag_seconds=round(seconds, 3),
            readable=migrator.bootstraps.readable(name) is not False,
            mode="push" if name in push else "pull",
            reachable=state.reachable if state is not None else None,
            error=state.error if state is not None else None,
        )
    return out


def dataflow(service: QueryService) -> DataflowGraph:
    """``GET /console/dataflow``; see the module docstring."""
    flow = service.store.flow
    with open_snapshot(service.store) as snap:
        table_rows = {name: snap.row_count(name) for name in flow.tables}
        sink_rows = {name: snap.change_count(name) for name in flow.sinks}
        watermark = snap.watermark
    return dataflow_graph(
        flow,
        service.console.steps(),
        table_rows=table_rows,
        sink_rows=sink_rows,
        staged_watermark=watermark,
    )


def run_report(service: QueryService) -> RunReport:
    """``GET /console/report``: the run's report, or 404 ``not_found``."""
    if service.run_report is None:
        raise ReportNotFound(
            "this service serves no TPC-DI run: its report is shown after "
            "`streamdi tpcdi run --serve`"
        )
    return RunReport.model_validate(service.run_report)
