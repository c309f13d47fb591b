"""Operating the service: pause and resume ingest, status, health, readiness and metrics
(``POST /ingest/pause|resume``, ``GET /status``, ``GET /health``, ``GET /ready``,
``GET /metrics``)."""

from __future__ import annotations

from fastapi.responses import JSONResponse, Response

from api.handlers import error_response
from api.models import ErrorBody
from api.responses import Health, Readiness, ServiceStatus
from api.routes.common import ERRORS, ServiceDep, new_router

router = new_router()


@router.post("/ingest/pause", response_model=ServiceStatus, responses=ERRORS, tags=["service"])
def pause(service: ServiceDep) -> ServiceStatus:
    """Stop consuming from Kafka: the batch in hand still commits; pushed and collected
    events keep arriving in Kafka (the consumer lag grows) until ``/ingest/resume``."""
    return service.pause()


@router.post("/ingest/resume", response_model=ServiceStatus, responses=ERRORS, tags=["service"])
def resume(service: ServiceDep) -> ServiceStatus:
    """Consume again from the next uncommitted offset."""
    return service.resume()


@router.get("/status", response_model=ServiceStatus, responses=ERRORS, tags=["service"])
def status(service: ServiceDep) -> ServiceStatus:
    """Pipeline state, paused or not, staging watermark and size, per stream its last
    batch and consumer lag, per target its acknowledged batch and migration lag."""
    return service.status()


@router.get(
    "/health", response_model=Health, tags=["service"], responses={503: {"model": ErrorBody}}
)
def health(service: ServiceDep) -> JSONResponse:
    """Liveness: 200 while the process serves and its pipeline has not failed."""
    alive, body = service.health()
    if alive:
        return JSONResponse(body.model_dump())
    return error_response(503, "not_ready", f"the pipeline failed: {body.error}", body.model_dump())


@router.get(
    "/ready", response_model=Readiness, tags=["service"], responses={503: {"model": ErrorBody}}
)
def ready(service: ServiceDep) -> JSONResponse:
    """Readiness: 200 once the hosted pipeline consumes."""
    ok, body = service.ready()
    if ok:
        return JSONResponse(body.model_dump())
    return error_response(503, "not_ready", "; ".join(body.reasons), body.model_dump())


@router.get(
    "/metrics",
    tags=["service"],
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}}},
)
def metrics(service: ServiceDep) -> Response:
    """Prometheus metrics: requests, queries by plan and target (latency), pushed events,
    batch latency, engine throughput, consumer lag per stream, staging size, migration lag
    per target, watermarks, kept answers."""
    return Response(service.metrics.render(), media_type=service.metrics.content_type)
