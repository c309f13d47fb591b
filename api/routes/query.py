"""Union queries: ``POST /query`` and its pages, ``GET /query/{answer_id}``."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query
from fastapi.responses import JSONResponse

from api.models import AnswerPage, QueryBody
from api.routes.common import ERRORS, ServiceDep, new_router

router = new_router()


def _served(page: AnswerPage) -> JSONResponse:
    # The page is built and checked by the service; serving its dump skips a second validation
    # of every row (a page can hold a million values).
    return JSONResponse(page.model_dump())


@router.post(
    "/query",
    response_model=AnswerPage,
    responses=ERRORS,
    summary="Run a union query over staged and migrated data",
    tags=["query"],
)
def query(body: QueryBody, service: ServiceDep) -> JSONResponse:
    """One read-only SELECT over the logical tables (or a structured query). ``plan``:
    ``island`` unions staging and the warehouse in the service, ``migrate`` pushes the
    pending deltas and queries the warehouse, ``auto`` chooses. The answer carries its
    ``watermark``, freshness and the first page; ``GET /query/{answer_id}`` pages on."""
    return _served(service.query(body))


@router.get(
    "/query/{answer_id}",
    response_model=AnswerPage,
    responses=ERRORS,
    summary="Another page of an answer",
    tags=["query"],
)
def page(
    answer_id: Annotated[str, Path(min_length=1, max_length=128)],
    service: ServiceDep,
    offset: Annotated[int, Query(ge=0, le=2**62)] = 0,
    limit: Annotated[int | None, Query(ge=1, le=1_000_000)] = None,
) -> JSONResponse:
    return _served(service.page(answer_id, offset, limit))
