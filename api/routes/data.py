"""The data the service holds: ``GET /tables`` and the batch ledger, ``GET /batches``."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query

from api.models import TableInfo
from api.responses import BatchInfo
from api.routes.common import ERRORS, ServiceDep, new_router

router = new_router()


@router.get("/tables", response_model=list[TableInfo], responses=ERRORS, tags=["data"])
def tables(service: ServiceDep) -> list[TableInfo]:
    """The logical tables: columns, row id, rows staged, changes pending migration, and per
    warehouse target its watermark and rows."""
    return service.tables()


@router.get("/batches", response_model=list[BatchInfo], responses=ERRORS, tags=["data"])
def batches(
    service: ServiceDep,
    after: Annotated[int, Query(ge=0, le=2**62)] = 0,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
) -> list[BatchInfo]:
    """The batch ledger: batches after ``after``, oldest first."""
    return service.batches(after, limit)
