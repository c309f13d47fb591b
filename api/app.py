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
``GET /console/overview``          the console's first screen: throughput, watermarks, series
``GET /console/batches``           the batch timeline: engine decisions, commit and ack times
``GET /console/dataflow``          the dataflow as a graph with per-step counts
``GET /console/report``            the report of the TPC-DI run served (``tpcdi run --serve``)
``GET /docs``, ``/openapi.json``   the OpenAPI description
``GET /``, ``/console/assets/*``   the console: a page that watches and operates the service
=================================  ===============================================================

Every error is ``{"error": {"code", "reason", "detail"?}}`` with a stable code
(:data:`api.exceptions.ErrorCode`); bad input is a 4xx, a 500 ``internal_error`` is a bug (and
keeps the connection). With ``API__TOKEN`` set, every route wants exactly one
``Authorization: Bearer <token>``, except the console's page and static assets (they hold no
data; the page asks for the token, :mod:`api.console`). Request bodies are bounded in size and time
(``API__MAX_BODY_MB``, ``API__BODY_TIMEOUT_S``); see :mod:`api.middleware`.

The routes live in :mod:`api.routes`, one router per area (``query``, ``data``, ``migration``,
``ingest``, ``operations``, ``console``); every JSON answer has its model (:mod:`api.models`,
:mod:`api.responses`), so ``/openapi.json`` describes every answer.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI

from api.console import ConsoleAssets, console_router
from api.handlers import install_error_handlers
from api.json_body import StrictJSONRoute
from api.middleware import install_guards
from api.openapi import describe_api
from api.routes import ROUTERS
from api.service import QueryService
from streamdi import __version__
from streamdi.settings import StreamdiSettings

logger = logging.getLogger(__name__)


def create_app(service: QueryService, settings: StreamdiSettings) -> FastAPI:
    """The app serving ``service``; see the module docstring. Its guards
    (:mod:`api.middleware`), error handlers (:mod:`api.handlers`) and OpenAPI additions
    (:mod:`api.openapi`) are installed here, then the routers of :mod:`api.routes`, which
    reach ``service`` through ``app.state.service``."""
    token = settings.api.token.get_secret_value() if settings.api.token is not None else None
    assets = ConsoleAssets.load()

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
        public_paths=assets.public_paths(),
    )
    describe_api(app, bearer=token is not None, streams=sorted(service.push_sources))
    for router in ROUTERS:
        app.include_router(router)
    app.include_router(console_router(assets))
    return app
