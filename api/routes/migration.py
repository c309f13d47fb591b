"""Migration status and control: ``GET /migration``, ``POST /migration/push|pull``."""

from __future__ import annotations

from api.models import MigrateBody
from api.responses import MigrationRound, MigrationStatus
from api.routes.common import ERRORS, ServiceDep, new_router

router = new_router()


@router.get(
    "/migration",
    response_model=MigrationStatus,
    # a target's keys depend on whether it could be reached: only those set go on the wire
    response_model_exclude_unset=True,
    responses=ERRORS,
    tags=["migration"],
)
def migration_status(service: ServiceDep) -> MigrationStatus:
    """Staging's watermark and release point; per target what it holds and whether it is
    pushed to or pulls."""
    return service.migration_status()


@router.post("/migration/push", response_model=MigrationRound, responses=ERRORS, tags=["migration"])
def push_now(service: ServiceDep, body: MigrateBody | None = None) -> MigrationRound:
    """Push every pending batch to the targets now (merge when due, unless told)."""
    return service.migrate("push", body or MigrateBody())


@router.post("/migration/pull", response_model=MigrationRound, responses=ERRORS, tags=["migration"])
def pull_now(service: ServiceDep, body: MigrateBody | None = None) -> MigrationRound:
    """The targets take every pending batch now and merge it."""
    return service.migrate("pull", body or MigrateBody())
