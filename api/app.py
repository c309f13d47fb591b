"""The FastAPI app of the query service: routes, errors as JSON, bearer-token auth, metrics.

``create_app(service, settings)`` serves a :class:`~api.service.QueryService`:

=================================  ===============================================================
``POST /query``                    a union query (SQL or structured); the first page of its answer
``GET /query/{answer_id}``         another page of the same answer (same watermark)
``GET /tables``                    logical tables: schema, rows staged, changes pending, per target
``GET /batches``                   the batch ledger
``GET /migration``                 migration status per target
``POST /migration/push|pull``      a migration round now
``GET /deadletters``               dead letters (paged by id)
``POST /deadletters/replay``       re-offer dead letters, as stored or fixed
``POST /streams/{stream}/events``  the HTTP push source (JSON, or an Arrow IPC stream)
``POST /ingest/pause|resume``      stop / restart consuming (events keep arriving in Kafka)
``GET /status``                    a summary for operators (``streamdi status``)
``GET /health``, ``GET /ready``    liveness and readiness
``GET /metrics``                   Prometheus text
``GET /docs``, ``/openapi.json``   the OpenAPI description
=================================  ===============================================================

Every error is ``{"error": {"code", "reason", "detail"?}}`` with a stable code
(:data:`api.exceptions.ErrorCode`); bad input is a 4xx, a 500 ``internal_error`` is a bug (and
keeps the connection). With ``API__TOKEN`` set, every route wants exactly one
``Authorization: Bearer <token>``. Request bodies are bounded in size and time
(``API__MAX_BODY_MB``, ``API__BODY_TIMEOUT_S``); see :mod:`api.middleware`.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

import pyarrow as pa
from fastapi import FastAPI, Path, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from api.exceptions import InvalidRequest, NoEventsPushed, UnsupportedMediaType
from api.handlers import error_response, install_error_handlers
from api.json_body import StrictJSONRoute
from api.middleware import install_guards
from api.models import (
    AnswerPage,
    ErrorBody,
    MigrateBody,
    PushedEvents,
    PushReceiptBody,
    QueryBody,
    ReplayBody,
    ReplayResult,
    TableInfo,
)
from api.openapi import describe_api
from api.service import QueryService
from streamdi import __version__
from streamdi.settings import StreamdiSettings

logger = logging.getLogger(__name__)

ARROW_STREAM = "application/vnd.apache.arrow.stream"
JSON_TYPE = "application/json"

_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": text}
    for code, text in {
        400: "the request or the query was refused (see error.code)",
        401: "a bearer token is required (API__TOKEN)",
        404: "no such answer, stream or dead letter",
        408: "the query ran past its time limit, or the request body arrived too slowly",
        409: "a pinned watermark is not reached or no longer readable; the stream takes no "
        "pushes; no pipeline to pause or resume",
        422: "the request does not match the schema",
        503: "a warehouse or the collector is unavailable, or the service is not ready",
    }.items()
}


def create_app(service: QueryService, settings: StreamdiSettings) -> FastAPI:
    """The app serving ``service``; see the module docstring. Its guards
    (:mod:`api.middleware`), error handlers (:mod:`api.handlers`) and OpenAPI additions
    (:mod:`api.openapi`) are installed here; the routes follow."""
    token = settings.api.token.get_secret_value() if settings.api.token is not None else None

    app = FastAPI(
        title="streamdi query service",
        version=__version__,
        description="Union queries over rows still staged in the ETL engine and rows already "
        "in the PostgreSQL and DuckDB warehouses, at a batch watermark, with their freshness; "
        "tables, batches, migration control, dead letters, an HTTP push source, health and "
        "metrics.",
    )
    app.router.route_class = StrictJSONRoute
    app.state.service = service
    install_error_handlers(app)
    install_guards(
        app,
        metrics=service.metrics,
        token=token,
        max_bytes=int(settings.api.max_body_mb * 2**20),
        timeout_s=settings.api.body_timeout_s,
    )
    describe_api(app, bearer=token is not None, streams=sorted(service.push_sources))

    # -- queries -----------------------------------------------------------------------------------

    @app.post(
        "/query",
        response_model=None,
        responses={200: {"model": AnswerPage}, **_ERRORS},
        summary="Run a union query over staged and migrated data",
        tags=["query"],
    )
    def query(body: QueryBody) -> JSONResponse:
        """One read-only SELECT over the logical tables (or a structured query). ``plan``:
        ``island`` unions staging and the warehouse in the service, ``migrate`` pushes the
        pending deltas and queries the warehouse, ``auto`` chooses. The answer carries its
        ``watermark``, freshness and the first page; ``GET /query/{answer_id}`` pages on."""
        return JSONResponse(service.query(body))

    @app.get(
        "/query/{answer_id}",
        response_model=None,
        responses={200: {"model": AnswerPage}, **_ERRORS},
        summary="Another page of an answer",
        tags=["query"],
    )
    def page(
        answer_id: Annotated[str, Path(min_length=1, max_length=128)],
        offset: Annotated[int, Query(ge=0, le=2**62)] = 0,
        limit: Annotated[int | None, Query(ge=1, le=1_000_000)] = None,
    ) -> JSONResponse:
        return JSONResponse(service.page(answer_id, offset, limit))

    # -- tables, batches, migration ----------------------------------------------------------------

    @app.get("/tables", response_model=list[TableInfo], responses=_ERRORS, tags=["data"])
    def tables() -> list[dict[str, Any]]:
        """The logical tables: columns, row id, rows staged, changes pending migration, and per
        warehouse target its watermark and rows."""
        return service.tables()

    @app.get("/batches", responses=_ERRORS, tags=["data"])
    def batches(
        after: Annotated[int, Query(ge=0, le=2**62)] = 0,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
    ) -> list[dict[str, Any]]:
        """The batch ledger: batches after ``after``, oldest first."""
        return service.batches(after, limit)

    @app.get("/migration", responses=_ERRORS, tags=["migration"])
    def migration_status() -> dict[str, Any]:
        """Staging's watermark and release point; per target what it holds and whether it is
        pushed to or pulls."""
        return service.migration_status()

    @app.post("/migration/push", responses=_ERRORS, tags=["migration"])
    def push_now(body: MigrateBody | None = None) -> dict[str, Any]:
        """Push every pending batch to the targets now (merge when due, unless told)."""
        return service.migrate("push", body or MigrateBody())

    @app.post("/migration/pull", responses=_ERRORS, tags=["migration"])
    def pull_now(body: MigrateBody | None = None) -> dict[str, Any]:
        """The targets take every pending batch now and merge it."""
        return service.migrate("pull", body or MigrateBody())

    # -- dead letters and the push source ----------------------------------------------------------

    @app.get("/deadletters", responses=_ERRORS, tags=["ingest"])
    def dead_letters(
        stream: Annotated[str | None, Query(max_length=256)] = None,
        pending: bool = False,
        after_id: Annotated[int | None, Query(ge=0, le=2**62)] = None,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
    ) -> list[dict[str, Any]]:
        """Rejected records and events with their position and reason, oldest first."""
        return service.dead_letters(stream, pending, after_id, limit)

    @app.post(
        "/deadletters/replay", response_model=ReplayResult, responses=_ERRORS, tags=["ingest"]
    )
    def replay(body: ReplayBody) -> dict[str, Any]:
        """Re-offer dead letters through Kafka: by id (the stored event unchanged) or as fixed
        events; the batch that applies one marks it replayed."""
        return service.replay(body)

    @app.post(
        "/streams/{stream}/events",
        response_model=PushReceiptBody,
        responses={
            **_ERRORS,
            413: {"model": ErrorBody, "description": "an event is larger than a Kafka record"},
            415: {
                "model": ErrorBody,
                "description": f"the content type is neither {JSON_TYPE} nor {ARROW_STREAM}",
            },
        },
        tags=["ingest"],
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {
                        "schema": PushedEvents.model_json_schema(
                            ref_template="#/components/schemas/{model}"
                        )
                    },
                    ARROW_STREAM: {"schema": {"type": "string", "format": "binary"}},
                },
            }
        },
    )
    async def push(stream: str, request: Request) -> dict[str, Any]:
        """Events for ``stream``, collected like a file's: JSON ``{"events": [...]}``
        (``application/json``) or an Arrow IPC stream (``application/vnd.apache.arrow.stream``)
        with the stream's columns (and ``_ts``). Returns once the events are in Kafka, with their
        positions and logical batch ids; rows that do not parse, and events whose ``_ts`` is not
        integer µs in range, become dead letters (listed in the receipt). Refused with nothing
        taken: another content type (415), fields the stream does not have (400
        ``unknown_fields``), no events (400/422), an event larger than a Kafka record (413)."""
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind not in (JSON_TYPE, ARROW_STREAM):
            raise UnsupportedMediaType(
                f"content type {kind or '(none)'!r} is not accepted; send {JSON_TYPE} "
                f'({{"events": [...]}}) or {ARROW_STREAM} (an Arrow IPC stream)',
                accepted=[JSON_TYPE, ARROW_STREAM],
            )
        body = await request.body()
        events: list[dict[str, Any]] | pa.Table
        if kind == ARROW_STREAM:
            if not body:
                raise NoEventsPushed("the body is empty: an Arrow IPC stream of events expected")
            try:
                with pa.ipc.open_stream(pa.py_buffer(body)) as reader:
                    events = reader.read_all()
            except (pa.ArrowException, OSError, ValueError) as exc:
                raise InvalidRequest(f"not an Arrow IPC stream: {exc}") from exc
        else:
            try:
                events = PushedEvents.model_validate_json(body).events
            except ValidationError as exc:
                problems = "; ".join(
                    f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}"
                    for e in exc.errors()[:10]
                )
                raise InvalidRequest(f"expected {{'events': [objects]}}: {problems}") from exc
        result: dict[str, Any] = await run_in_threadpool(service.push, stream, events)
        return result

    # -- operations --------------------------------------------------------------------------------

    @app.post("/ingest/pause", responses=_ERRORS, tags=["service"])
    def pause() -> dict[str, Any]:
        """Stop consuming from Kafka: the batch in hand still commits; pushed and collected
        events keep arriving in Kafka (the consumer lag grows) until ``/ingest/resume``."""
        return service.pause()

    @app.post("/ingest/resume", responses=_ERRORS, tags=["service"])
    def resume() -> dict[str, Any]:
        """Consume again from the next uncommitted offset."""
        return service.resume()

    @app.get("/status", responses=_ERRORS, tags=["service"])
    def status() -> dict[str, Any]:
        """Pipeline state, paused or not, staging watermark and size, per stream its last
        batch and consumer lag, per target its acknowledged batch and migration lag."""
        return service.status()

    # -- health and metrics ------------------------------------------------------------------------

    @app.get("/health", tags=["service"], responses={503: {"model": ErrorBody}})
    def health() -> JSONResponse:
        """Liveness: 200 while the process serves and its pipeline has not failed."""
        alive, body = service.health()
        if alive:
            return JSONResponse(body)
        return error_response(503, "not_ready", f"the pipeline failed: {body['error']}", body)

    @app.get("/ready", tags=["service"], responses={503: {"model": ErrorBody}})
    def ready() -> JSONResponse:
        """Readiness: 200 once the hosted pipeline consumes."""
        ok, body = service.ready()
        if ok:
            return JSONResponse(body)
        return error_response(503, "not_ready", "; ".join(body["reasons"]), body)

    @app.get(
        "/metrics",
        tags=["service"],
        response_class=Response,
        responses={200: {"content": {"text/plain": {}}}},
    )
    def metrics() -> Response:
        """Prometheus metrics: requests, queries by plan and target (latency), pushed events,
        batch latency, engine throughput, consumer lag per stream, staging size, migration lag
        per target, watermarks, kept answers."""
        return Response(service.metrics.render(), media_type=service.metrics.content_type)

    return app
