"""What every router shares: the service dependency, the error answers, the router factory."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request

from api.json_body import StrictJSONRoute
from api.models import ErrorBody
from api.service import QueryService

ARROW_STREAM = "application/vnd.apache.arrow.stream"
JSON_TYPE = "application/json"

#: The error answers a route can give (each an :class:`~api.models.ErrorBody`).
ERRORS: dict[int | str, dict[str, Any]] = {
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


async def current_service(request: Request) -> QueryService:
    """The service the app serves (:func:`api.app.create_app` puts it in ``app.state``)."""
    service: QueryService = request.app.state.service
    return service


#: A route parameter that receives the app's :class:`~api.service.QueryService`.
ServiceDep = Annotated[QueryService, Depends(current_service)]


def new_router() -> APIRouter:
    """A router whose routes read JSON bodies strictly (:class:`~api.json_body.StrictJSONRoute`)."""
    return APIRouter(route_class=StrictJSONRoute)
