"""Ingest through the service: dead letters and their replay, and the HTTP push source
(``GET /deadletters``, ``POST /deadletters/replay``, ``POST /streams/{stream}/events``)."""

from __future__ import annotations

from typing import Annotated, Any

import pyarrow as pa
from fastapi import Query, Request
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from api.exceptions import InvalidRequest, NoEventsPushed, UnsupportedMediaType
from api.models import ErrorBody, PushedEvents, PushReceiptBody, ReplayBody, ReplayResult
from api.responses import DeadLetter
from api.routes.common import ARROW_STREAM, ERRORS, JSON_TYPE, ServiceDep, new_router

router = new_router()


@router.get("/deadletters", response_model=list[DeadLetter], responses=ERRORS, tags=["ingest"])
def dead_letters(
    service: ServiceDep,
    stream: Annotated[str | None, Query(max_length=256)] = None,
    pending: bool = False,
    after_id: Annotated[int | None, Query(ge=0, le=2**62)] = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
    reason: Annotated[str | None, Query(max_length=256)] = None,
) -> list[DeadLetter]:
    """Rejected records and events with their position and reason, oldest first; ``reason``
    keeps those whose reason contains it (case-insensitive)."""
    return service.dead_letters(stream, pending, after_id, limit, reason)


@router.post("/deadletters/replay", response_model=ReplayResult, responses=ERRORS, tags=["ingest"])
def replay(body: ReplayBody, service: ServiceDep) -> ReplayResult:
    """Re-offer dead letters through Kafka: by id (the stored event unchanged) or as fixed
    events; the batch that applies one marks it replayed."""
    return service.replay(body)


@router.post(
    "/streams/{stream}/events",
    response_model=PushReceiptBody,
    responses={
        **ERRORS,
        409: {
            "model": ErrorBody,
            "description": "expect_pos is not the stream's next position (detail.next_pos); "
            "nothing was taken",
        },
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
async def push(
    stream: str,
    request: Request,
    service: ServiceDep,
    expect_pos: Annotated[
        int | None,
        Query(
            ge=0,
            le=2**62,
            description="take the offer only if its first event gets this position (the "
            "stream's next one); else 409 position_conflict with detail.next_pos, nothing taken. "
            "Retry an offer whose answer was lost with the same expect_pos: it is taken once.",
        ),
    ] = None,
) -> PushReceiptBody:
    """Events for ``stream``, collected like a file's: JSON ``{"events": [...]}``
    (``application/json``) or an Arrow IPC stream (``application/vnd.apache.arrow.stream``)
    with the stream's columns (and ``_ts``). Returns once the events are in Kafka, with their
    positions and logical batch ids; rows that do not parse, and events whose ``_ts`` is not
    integer µs in range, become dead letters (listed in the receipt). Refused with nothing
    taken: another content type (415), fields the stream does not have (400
    ``unknown_fields``), no events (400/422), an event larger than a Kafka record (413), an
    ``expect_pos`` that is not the stream's next position (409 ``position_conflict``)."""
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
    receipt: PushReceiptBody = await run_in_threadpool(service.push, stream, events, expect_pos)
    return receipt
