"""The query service's operations, independent of HTTP: the FastAPI app (:mod:`api.app`), the
benchmarks and the tests call the same :class:`QueryService`.

It works on the staging store and migrator the pipeline uses (one process owns the DuckDB files),
so a union query, a push trigger and the pipeline's own migration rounds share one ledger and one
lock. :meth:`QueryService.build` makes the warehouse readers from the migrator's targets.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Literal

import pyarrow as pa

from api.answers import AnswerCache, bounded_page, expanded_instant, json_rows, type_name
from api.console_recorder import ConsoleRecorder
from api.exceptions import (
    ApiError,
    DeadLetterNotFound,
    IngestNotHosted,
    PushUnavailable,
    StreamNotPushable,
    TargetUnreachable,
    UnknownStream,
    UnknownTarget,
)
from api.hosted import BrokerHealth, EventSink, IngestControl, Replayer
from api.metrics import ServiceMetrics
from api.models import (
    AnswerPage,
    AutoDecision,
    ColumnInfo,
    Freshness,
    MigrateBody,
    PushReceiptBody,
    QueryBody,
    RefusedReplay,
    RejectedEvent,
    ReplayBody,
    ReplayResult,
    TableInfo,
)
from api.planner import PlanModel
from api.responses import (
    BatchInfo,
    BrokerInfo,
    DeadLetter,
    EngineInfo,
    Health,
    MigrationRound,
    MigrationStatus,
    PipelineInfo,
    PipelineState,
    Readiness,
    ServiceInfo,
    ServiceStatus,
    StagingInfo,
    StreamProgress,
    TargetLag,
    TargetStatus,
)
from api.running import QueryRunner
from api.safety import QueryLimits, check_query
from api.sandbox import UnionSandbox
from api.union import UnionPlanner, UnionRequest, UnionResult, mapped_errors
from migration.migrator import Migrator
from migration.reader import ReaderOptions, WarehouseReader
from staging.dead_letters import dead_letter_view, replay_as_stored
from staging.segments import staging_disk_bytes
from staging.snapshot import open_snapshot
from staging.store import StagingStore
from streamdi import __version__
from streamdi.settings import ApiSettings, StreamdiSettings
from warehouse.exceptions import WarehouseUnavailable
from warehouse.postgres_login import LoginPlan, RoleLimits

logger = logging.getLogger(__name__)


def build_readers(
    migrator: Migrator | None, settings: StreamdiSettings
) -> dict[str, WarehouseReader]:
    """A reader per target of ``migrator``, sharing its targets (their layout, the DuckDB
    instance, the PostgreSQL server); each target makes its own (:meth:`BaseTarget.reader`)."""
    if migrator is None:
        return {}
    options = ReaderOptions(login=login_plan(settings.api), pool_size=settings.api.postgres_pool)
    readers: dict[str, WarehouseReader] = {}
    for name, target in migrator.targets.items():

        def ensure(name: str = name) -> object:
            return migrator.opened(name)

        readers[name] = target.reader(ensure, options)
    return readers


def login_plan(api: ApiSettings) -> LoginPlan:
    """How user queries log in to PostgreSQL (``API__POSTGRES_READER_*``)."""
    timeout_ms = int((api.query_timeout_s + api.query_grace_s) * 1000)
    return LoginPlan(
        reader_dsn=api.postgres_reader_dsn.get_secret_value()
        if api.postgres_reader_dsn is not None
        else None,
        role=api.postgres_reader_role,
        limits=RoleLimits(
            statement_timeout_ms=timeout_ms,
            work_mem=api.postgres_reader_work_mem,
            temp_file_limit=api.postgres_reader_temp_file_limit,
            connection_limit=api.postgres_pool + 4,
        ),
    )


def query_limits(api: ApiSettings) -> QueryLimits:
    """The size and shape limits of user queries (``API__MAX_QUERY_*``)."""
    return QueryLimits(
        max_chars=api.max_query_chars,
        max_nodes=api.max_query_nodes,
        max_depth=api.max_query_depth,
        max_tables=api.max_query_tables,
        max_selects=api.max_query_selects,
    )


def _event_time(micros: int) -> str:
    """An event time (µs) as ISO text with its zone; one outside the years 1-9999 (stored by
    a version that did not check event times) in ISO 8601's expanded form instead of failing."""
    try:
        return datetime.fromtimestamp(micros / 1e6, UTC).isoformat()
    except (OverflowError, ValueError, OSError):
        return expanded_instant(int(micros)) + "+00:00"


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.replace(tzinfo=UTC).isoformat()


class QueryService:
    """See the module docstring. ``push_sources`` are the streams the HTTP push source feeds;
    ``replayer`` re-offers dead letters (needs the broker); ``pipeline_state`` tells whether a
    hosted pipeline runs (``absent`` when none is hosted); ``run_report`` is the report of the
    TPC-DI run the service serves (``GET /console/report``).

    :attr:`console` records what the console shows (:mod:`api.console_recorder`): the service
    makes it an observer of ``migrator``; the composition root makes its ``observe_batch`` an
    observer of the hosted pipeline's committed batches."""

    def __init__(
        self,
        store: StagingStore,
        settings: StreamdiSettings,
        *,
        migrator: Migrator | None = None,
        readers: Mapping[str, WarehouseReader] | None = None,
        push_sources: Mapping[str, EventSink] | None = None,
        pushable: Mapping[str, bool] | None = None,
        replayer: Replayer | None = None,
        pipeline_state: Callable[[], tuple[PipelineState, str | None]] | None = None,
        model: PlanModel | None = None,
        ingest: IngestControl | None = None,
        broker: Callable[[], BrokerHealth] | None = None,
        run_report: Mapping[str, Any] | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.migrator = migrator
        api = settings.api
        self.sandbox = UnionSandbox(
            memory_limit=api.sandbox_memory_limit,
            threads=api.sandbox_threads,
            timeout_s=api.query_timeout_s,
        )
        self.readers = dict(readers) if readers is not None else build_readers(migrator, settings)
        self.planner = UnionPlanner(store, migrator, self.readers, self.sandbox, api, model)
        self.limits = query_limits(api)
        self.answers = AnswerCache(ttl_s=api.answer_ttl_s, max_bytes=api.answer_cache_mb << 20)
        self.runner = QueryRunner(
            slots=api.max_concurrent_queries,
            timeout_s=api.query_timeout_s,
            grace_s=api.query_grace_s,
            rss_limit_bytes=api.rss_limit_mb << 20,
            rss_sample_s=api.rss_sample_ms / 1000,
        )
        self.push_sources = dict(push_sources or {})
        self._pushable = dict(pushable or {})
        self.replayer = replayer
        self._pipeline_state = pipeline_state
        self.ingest = ingest
        self._broker = broker
        self.metrics = ServiceMetrics(self._gauges)
        self.started_at = time.time()
        self.run_report = dict(run_report) if run_report is not None else None
        self.console = ConsoleRecorder(
            targets=list(migrator.targets) if migrator is not None else (),
            acknowledged=migrator.acknowledged() if migrator is not None else None,
            watermark=store.watermark,
        )
        if migrator is not None:
            migrator.observers.append(self.console.observe_target)

    def close(self) -> None:
        if self.migrator is not None and self.console.observe_target in self.migrator.observers:
            self.migrator.observers.remove(self.console.observe_target)
        for reader in self.readers.values():
            reader.close()
        self.sandbox.close()

    # -- queries -----------------------------------------------------------------------------------

    def start(self) -> None:
        """Set up and verify what user queries run as on each warehouse (the PostgreSQL reader
        login). Raises :class:`~warehouse.exceptions.ReaderLoginRefused` on an unsafe
        configuration; a warehouse that cannot be reached now is tried again by the first
        query."""
        for name, reader in self.readers.items():
            try:
                reader.prepare()
            except WarehouseUnavailable as exc:
                logger.warning("warehouse not reachable at start target=%s: %s", name, exc)

    def shutdown(self, wait_s: float) -> int:
        """Refuse new queries and interrupt the running ones; how many still run after
        ``wait_s`` (see :meth:`api.running.QueryRunner.shutdown`)."""
        return self.runner.shutdown(wait_s)

    def query(self, body: QueryBody) -> AnswerPage:
        """Run a union query (checked, then run within its bounds: :mod:`api.running`); the
        first page of its answer."""
        label = body.plan if body.include_staged else "warehouse"
        target = body.target or "default"
        try:
            result = self.runner.run(lambda: self._run(body))
        except ApiError as exc:
            self.metrics.queries.labels(label, target, exc.code).inc()
            raise
        self.metrics.queries.labels(result.plan, result.target or "none", "ok").inc()
        self.metrics.query_seconds.labels(result.plan, result.target or "none").observe(
            result.seconds
        )
        answer = self.answers.put(result, body.include_staged, self.planner.describe(result))
        size = body.page_size or self.settings.api.page_size
        return self._page(answer.answer_id, 0, size)

    def _run(self, body: QueryBody) -> UnionResult:
        checked = check_query(body.text(), self._columns(), body.dialect, self.limits)
        request = UnionRequest(checked, body.plan, body.include_staged, body.target, body.watermark)
        return self.planner.run(request)

    def page(self, answer_id: str, offset: int, limit: int | None) -> AnswerPage:
        """A page of a kept answer."""
        return self._page(answer_id, offset, limit or self.settings.api.page_size)

    def _page(self, answer_id: str, offset: int, limit: int) -> AnswerPage:
        answer = self.answers.get(answer_id)
        limit = min(limit, self.settings.api.max_page_size)
        result = answer.result
        table = result.table
        total = table.num_rows
        start = min(max(offset, 0), total)
        rows = bounded_page(table, start, limit, self.settings.api.max_page_mb << 20)
        end = start + rows.num_rows
        facts = answer.facts
        now = time.time()
        committed = facts.get("committed_at")
        newest = facts.get("newest_event_us")
        decision = result.decision
        return AnswerPage(
            answer_id=answer.answer_id,
            plan=result.plan,
            requested_plan=result.requested_plan,
            target=result.target,
            include_staged=answer.include_staged,
            watermark=result.watermark,
            warehouse_watermark=result.warehouse_watermark,
            staged_watermark=result.staged_watermark,
            streams=facts.get("streams", {}),
            freshness=Freshness(
                committed_at=_iso(committed),
                committed_age_ms=None
                if committed is None
                else (now - committed.replace(tzinfo=UTC).timestamp()) * 1000,
                newest_event_time=None if newest is None else _event_time(newest),
                newest_event_age_ms=None if newest is None else now * 1000 - newest / 1000,
            ),
            staged_rows=result.staged_rows,
            warehouse_rows=result.warehouse_rows,
            staged_fraction=result.staged_fraction,
            pushed_rows=result.pushed_rows,
            decision=None
            if decision is None
            else AutoDecision(
                plan=decision.plan,
                staged_fraction=decision.staged_fraction,
                estimates=decision.estimates,
                rule=decision.rule,
            ),
            seconds=result.seconds,
            timings=result.timings,
            columns=[ColumnInfo(name=f.name, type=type_name(f.type)) for f in table.schema],
            rows=json_rows(rows),
            offset=start,
            total_rows=total,
            truncated=result.truncated,
            next_offset=end if end < total else None,
            expires_in_s=max(0.0, answer.expires_at - time.monotonic()),
        )

    def _columns(self) -> dict[str, list[str]]:
        return {name: list(t.columns) for name, t in self.planner.tables.items()}

    # -- tables and batches ------------------------------------------------------------------------

    def tables(self) -> list[TableInfo]:
        """Every logical table with its schema, rows staged and changes pending, and what each
        warehouse holds of it."""
        acks = self.migrator.acknowledged() if self.migrator is not None else {}
        out: list[TableInfo] = []
        with open_snapshot(self.store) as snap:
            pending_from = min(
                (acks.get(t, 0) for t in self.readers), default=snap.released_through()
            )
            for name, table in self.planner.tables.items():
                out.append(
                    TableInfo(
                        name=name,
                        kind=table.kind,
                        columns=[ColumnInfo(name=c, type=t) for c, t in table.columns.items()],
                        row_id=list(table.row_id),
                        staged_rows=snap.row_count(name) if table.is_state else None,
                        pending_changes=snap.change_count(name, after=pending_from),
                        targets={},
                    )
                )
        for target, reader in self.readers.items():
            try:
                with (
                    mapped_errors(target),
                    reader.snapshot(timeout_s=self.settings.api.query_timeout_s) as wh,
                ):
                    for entry in out:
                        entry.targets[target] = {
                            "watermark": wh.watermark,
                            "merged_through": wh.merged_through,
                            "rows": wh.count(entry.name, wh.watermark),
                        }
            except TargetUnreachable as exc:
                for entry in out:
                    entry.targets[target] = {"error": exc.reason}
        return out

    def batches(self, after: int, limit: int) -> list[BatchInfo]:
        """The batch ledger: batches after ``after``, oldest first."""
        with open_snapshot(self.store) as snap:
            rows: list[dict[str, Any]] = snap.batches(after=after, limit=limit).to_pylist()
        for row in rows:
            for key in ("arrived_at", "committed_at"):
                row[key] = _iso(row[key])
            try:
                row["streams"] = json.loads(row["streams"] or "{}")
            except ValueError:
                row["streams"] = {}
        return [BatchInfo(**row) for row in rows]

    # -- migration ---------------------------------------------------------------------------------

    def _migrator(self) -> Migrator:
        if self.migrator is None:
            raise UnknownTarget("no MIGRATION__TARGETS are configured", code="no_target")
        return self.migrator

    def migration_status(self) -> MigrationStatus:
        """Staging's watermark and release point; per target what it holds and whether it is
        pushed to or pulls (only the keys the target's state has are set)."""
        migrator = self._migrator()
        status = migrator.status()
        push = set(self.settings.migration.push_targets)
        for name, entry in status["targets"].items():
            entry["mode"] = "push" if name in push else "pull"
        targets = {name: TargetStatus(**entry) for name, entry in status["targets"].items()}
        return MigrationStatus(**{**status, "targets": targets})

    def migrate(self, via: Literal["push", "pull"], body: MigrateBody) -> MigrationRound:
        """One migration round now (the pipeline's worker and this share the migrator's lock)."""
        migrator = self._migrator()
        names = list(body.targets) if body.targets else list(migrator.targets)
        unknown = [n for n in names if n not in migrator.targets]
        if unknown:
            raise UnknownTarget(
                f"targets {unknown} are not configured; MIGRATION__TARGETS has "
                f"{sorted(migrator.targets)}"
            )
        merge = body.merge or ("force" if via == "pull" else "auto")
        try:
            report = migrator.migrate(names, via=via, merge=merge)
        except WarehouseUnavailable as exc:
            raise TargetUnreachable(str(exc)) from exc
        return MigrationRound.of(via, report)

    # -- dead letters ------------------------------------------------------------------------------

    def dead_letters(
        self,
        stream: str | None,
        pending: bool,
        after_id: int | None,
        limit: int,
        reason: str | None = None,
    ) -> list[DeadLetter]:
        """Rejected records and events with their position and reason, oldest first;
        ``reason`` keeps those whose reason contains it (case-insensitive)."""
        table = self.store.dead_letters(
            stream=stream, pending_only=pending, after_id=after_id, limit=limit, reason=reason
        )
        return [DeadLetter(**dead_letter_view(row)) for row in table.to_pylist()]

    def replay(self, body: ReplayBody) -> ReplayResult:
        """Re-offer dead letters through Kafka (the broker the pipeline reads)."""
        if self.replayer is None:
            raise PushUnavailable("re-offering needs the broker of a running `streamdi serve`")
        entries: list[tuple[int, Any]] = []
        refused: list[RefusedReplay] = []
        if body.ids:
            found = {
                int(row["id"]): row for row in self.store.dead_letters(ids=body.ids).to_pylist()
            }
            missing = [i for i in body.ids if i not in found]
            if missing and not body.entries and len(missing) == len(body.ids):
                raise DeadLetterNotFound(f"no dead letters with ids {missing[:20]}", ids=missing)
            for dead_id in body.ids:
                row = found.get(dead_id)
                if row is None:
                    refused.append(RefusedReplay(id=dead_id, reason="no such dead letter"))
                    continue
                stored, why = replay_as_stored(row)
                if stored is None:
                    refused.append(RefusedReplay(id=dead_id, reason=why or ""))
                    continue
                entries.append((dead_id, stored))
        for i, entry in enumerate(body.entries):
            entries.append((entry.id if entry.id is not None else -1 - i, entry.model_dump()))
        try:
            sent, more = self.replayer(entries)
        except ApiError:
            raise
        except Exception as exc:  # a broker error: the events were not re-offered
            raise PushUnavailable(f"re-offering failed: {exc}") from exc
        refused.extend(RefusedReplay(id=n if n >= 0 else None, reason=r) for n, r in more)
        return ReplayResult(sent=sent, refused=refused)

    # -- the HTTP push source ----------------------------------------------------------------------

    def push(
        self,
        stream: str,
        events: list[dict[str, Any]] | pa.Table,
        expect_pos: int | None = None,
    ) -> PushReceiptBody:
        """Offer ``events`` to ``stream``'s collector; the receipt once they are in Kafka.
        With ``expect_pos``, only if the first event gets that position (a conditional offer,
        :mod:`ingest.push`; :class:`~api.exceptions.PositionConflict` otherwise)."""
        if stream not in self.store.flow.sources:
            raise UnknownStream(
                f"no stream {stream!r}; the dataflow's sources are {list(self.store.flow.sources)}",
                stream=stream,
            )
        source = self.push_sources.get(stream)
        if source is None:
            if self._pushable.get(stream) is False:
                raise StreamNotPushable(
                    f"stream {stream!r} is fed by its bound input; it takes no HTTP pushes",
                    stream=stream,
                )
            raise PushUnavailable(
                f"stream {stream!r} has no running collector (the service hosts no pipeline)"
            )
        receipt = source.offer(
            events, timeout_s=self.settings.api.push_timeout_s, expect_pos=expect_pos
        )
        self.metrics.pushed.labels(stream).inc(receipt.events)
        return PushReceiptBody(
            stream=stream,
            events=receipt.events,
            rejects=receipt.rejects,
            first_pos=receipt.first_pos,
            last_pos=receipt.last_pos,
            first_batch=receipt.first_batch,
            last_batch=receipt.last_batch,
            rejected=[RejectedEvent(pos=p, reason=r) for p, r in receipt.rejected],
            warnings=list(receipt.warnings),
        )

    # -- health ------------------------------------------------------------------------------------

    def pipeline(self) -> tuple[PipelineState, str | None]:
        if self._pipeline_state is None:
            return "absent", None
        return self._pipeline_state()

    def health(self) -> tuple[bool, Health]:
        """Whether the service is alive (its hosted pipeline has not failed), and the answer."""
        state, error = self.pipeline()
        alive = state != "failed"
        return alive, Health(
            status="ok" if alive else "failed",
            pipeline=state,
            error=error,
            uptime_s=time.time() - self.started_at,
        )

    def broker(self) -> BrokerInfo | None:
        """The hosted pipeline's broker as last seen, or None when no pipeline is hosted."""
        if self._broker is None:
            return None
        seen = self._broker()
        return BrokerInfo(
            bootstrap_servers=seen.bootstrap_servers,
            embedded=seen.embedded,
            up=seen.up,
            down_for_s=(
                None if seen.down_since is None else round(time.time() - seen.down_since, 3)
            ),
            pid=seen.pid,
            restarts=seen.restarts,
            error=seen.last_error,
        )

    def ready(self) -> tuple[bool, Readiness]:
        """Whether the service is ready (its hosted pipeline consumes), and the answer."""
        state, error = self.pipeline()
        reasons = []
        if state in ("starting", "stopped", "failed"):
            reasons.append(f"pipeline {state}" + (f": {error}" if error else ""))
        broker = self.broker()
        if broker is not None and not broker.up:
            reasons.append(
                f"broker unavailable at {broker.bootstrap_servers} for {broker.down_for_s or 0:.0f}"
                f" s ({broker.error}); the pipeline waits and retries"
            )
        return not reasons, Readiness(
            status="ready" if not reasons else "not ready",
            pipeline=state,
            staged_watermark=self.store.watermark,
            targets=sorted(self.readers),
            reasons=reasons,
        )

    # -- ingest control and status ----------------------------------------------------------------

    def _control(self) -> IngestControl:
        if self.ingest is None:
            raise IngestNotHosted("this service hosts no pipeline to pause or resume")
        return self.ingest

    def pause(self) -> ServiceStatus:
        """Stop consuming (the batch in hand still commits); events keep arriving in Kafka."""
        self._control().pause()
        return self.status()

    def resume(self) -> ServiceStatus:
        """Consume again from the next uncommitted offset."""
        self._control().resume()
        return self.status()

    def status(self) -> ServiceStatus:
        """A summary for operators (``streamdi status``): pipeline, ingest, staging, migration."""
        gauges = self._gauges()
        state, error = self.pipeline()
        with open_snapshot(self.store) as snap:
            progress = snap.streams()
        return ServiceStatus(
            service=ServiceInfo(
                version=__version__,
                pid=os.getpid(),
                uptime_s=round(time.time() - self.started_at, 3),
            ),
            pipeline=PipelineInfo(state=state, error=error, paused=bool(gauges["paused"])),
            staging=StagingInfo(
                path=str(self.settings.staging_path),
                watermark=gauges["staged"],
                released_through=gauges["released"],
                bytes=gauges["staging_bytes"],
                newest_batch_age_s=round(gauges["age_s"], 3),
            ),
            streams={
                stream: StreamProgress(
                    last_batch=progress[stream].last_batch if stream in progress else 0,
                    lag_records=gauges["consumer_lag"].get(stream),
                )
                for stream in self.store.flow.sources
            },
            migration={
                target: TargetLag(
                    acknowledged=gauges["acks"].get(target, 0),
                    lag_batches=lag[0],
                    lag_seconds=round(lag[1], 3),
                )
                for target, lag in gauges["migration_lag"].items()
            },
            engine=EngineInfo(events_per_second=round(self.metrics.engine_rate(), 1)),
            broker=self.broker(),
        )

    def _gauges(self) -> dict[str, Any]:
        acks = self.migrator.acknowledged() if self.migrator is not None else {}
        released = self.migrator.staged.released_through() if self.migrator is not None else 0
        age = 0.0
        migration_lag: dict[str, tuple[int, float]] = {}
        now = time.time()
        with open_snapshot(self.store) as snap:
            watermark = snap.watermark
            info = snap.batch(watermark) if watermark else None
            for target in self.migrator.targets if self.migrator is not None else ():
                acked = acks.get(target, 0)
                oldest = snap.batch(acked + 1) if acked < watermark else None
                committed = oldest.get("committed_at") if oldest is not None else None
                seconds = 0.0
                if committed is not None:
                    seconds = now - committed.replace(tzinfo=UTC).timestamp()
                migration_lag[target] = (max(0, watermark - acked), max(0.0, seconds))
        if info is not None and info.get("committed_at") is not None:
            age = now - info["committed_at"].replace(tzinfo=UTC).timestamp()
        state, _ = self.pipeline()
        path = self.settings.staging_path
        staging_bytes = staging_disk_bytes(path)
        return {
            "staged": self.store.watermark,
            "released": released,
            "acks": acks,
            "age_s": age,
            "pipeline_up": 1 if state == "running" else 0,
            "answers": len(self.answers),
            "answer_bytes": self.answers.bytes,
            "migration_lag": migration_lag,
            "consumer_lag": dict(self.ingest.consumer_lag) if self.ingest is not None else {},
            "paused": 1 if self.ingest is not None and self.ingest.paused.is_set() else 0,
            "staging_bytes": staging_bytes,
            "broker": self.broker(),
        }
