"""The routes of the query service, one router per area (see :mod:`api.app` for the table).

Each module holds an :class:`fastapi.APIRouter` and its routes; every JSON route declares its
answer's model (:mod:`api.models`, :mod:`api.responses`), so ``/openapi.json`` describes every
answer. The routes reach the service through :data:`api.routes.common.ServiceDep`.
"""

from __future__ import annotations

from fastapi import APIRouter

from api.routes import console, data, ingest, migration, operations, query

#: The routers in the order their routes appear in the OpenAPI description.
ROUTERS: tuple[APIRouter, ...] = (
    query.router,
    data.router,
    migration.router,
    ingest.router,
    operations.router,
    console.router,
)
