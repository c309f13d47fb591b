"""What the OpenAPI description says beyond the routes' own declarations.

:func:`describe_api` adds, to the description FastAPI builds from the routes:

* the answers of the HTTP layer (:mod:`api.middleware`) on every operation they can reach: with
  ``API__TOKEN``, 401 ``unauthorized`` and 400 ``ambiguous_credentials``, and the bearer
  security scheme; on an operation with a request body, 413 ``body_too_large`` and 408
  ``body_timeout``;
* the streams the push route takes, as the ``stream`` parameter's ``enum`` (another name is a 404
  ``unknown_stream``);
* OpenAPI links between operations (:data:`LINKS`): an answer's id to its pages, a table's name
  to a query over it, a dead letter to its replay and its stream, a push receipt's batches to the
  ledger and to a query pinned at them. Clients read them as documentation; schemathesis'
  stateful tests follow them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from api.models import ErrorBody

_ERROR_REF = {"$ref": "#/components/schemas/ErrorBody"}


@dataclass(frozen=True)
class Link:
    """An OpenAPI link: from ``source``'s 200 answer to ``target`` (both ``"METHOD /path"``),
    with runtime expressions for the target's parameters and (part of) its body."""

    name: str
    source: str
    target: str
    description: str
    parameters: dict[str, Any] = field(default_factory=dict)
    body: dict[str, Any] | None = None


LINKS: tuple[Link, ...] = (
    Link(
        "NextPage",
        "POST /query",
        "GET /query/{answer_id}",
        "Another page of this answer, at the same watermark.",
        parameters={"answer_id": "$response.body#/answer_id"},
    ),
    Link(
        "SamePageAgain",
        "GET /query/{answer_id}",
        "GET /query/{answer_id}",
        "This answer again (until it expires).",
        parameters={"answer_id": "$response.body#/answer_id"},
    ),
    Link(
        "SelectFromTable",
        "GET /tables",
        "POST /query",
        "Every row of the first table.",
        body={"sql": "SELECT * FROM {$response.body#/0/name}"},
    ),
    Link(
        "StructuredOverTable",
        "GET /tables",
        "POST /query",
        "A structured query over the first table.",
        body={"structured": {"table": "$response.body#/0/name"}},
    ),
    Link(
        "QueryAtBatch",
        "GET /batches",
        "POST /query",
        "A query pinned at the first listed batch.",
        body={"watermark": "$response.body#/0/batch_id"},
    ),
    Link(
        "BatchesAfter",
        "GET /batches",
        "GET /batches",
        "The ledger after the first listed batch.",
        parameters={"after": "$response.body#/0/batch_id"},
    ),
    Link(
        "ReplayAsStored",
        "GET /deadletters",
        "POST /deadletters/replay",
        "Re-offer the first dead letter unchanged.",
        body={"ids": ["$response.body#/0/id"]},
    ),
    Link(
        "ReplayFixed",
        "GET /deadletters",
        "POST /deadletters/replay",
        "Re-offer the first dead letter's event (fixed by the client) for its stream.",
        body={
            "entries": [
                {
                    "id": "$response.body#/0/id",
                    "stream": "$response.body#/0/stream",
                    "event": "$response.body#/0/event",
                }
            ]
        },
    ),
    Link(
        "PushToStream",
        "GET /deadletters",
        "POST /streams/{stream}/events",
        "More events for the first dead letter's stream.",
        parameters={"stream": "$response.body#/0/stream"},
    ),
    Link(
        "LedgerOfPush",
        "POST /streams/{stream}/events",
        "GET /batches",
        "The batches from the one that carried these events.",
        parameters={"after": "$response.body#/first_batch"},
    ),
    Link(
        "QueryAtPush",
        "POST /streams/{stream}/events",
        "POST /query",
        "A query pinned at the batch that carried the last of these events.",
        body={"watermark": "$response.body#/last_batch"},
    ),
    Link(
        "DeadLettersOfStream",
        "POST /streams/{stream}/events",
        "GET /deadletters",
        "The stream's dead letters (its rejects among them).",
        parameters={"stream": "$request.path.stream"},
    ),
    Link(
        "ResumeAfterPause",
        "POST /ingest/pause",
        "POST /ingest/resume",
        "Consume again.",
    ),
    Link(
        "StatusAfterPause",
        "POST /ingest/pause",
        "GET /status",
        "The paused pipeline's status.",
    ),
)


def describe_api(app: FastAPI, *, bearer: bool, streams: Sequence[str]) -> None:
    """Make ``app`` describe itself with the additions the module docstring lists; ``bearer``:
    whether ``API__TOKEN`` is set; ``streams``: the streams the push route takes (none: the
    parameter stays a plain string)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            _add_http_answers(schema, bearer)
            _add_links(schema)
            if streams:
                _name_streams(schema, streams)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _operations(schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every operation of ``schema`` by ``"METHOD /path"``."""
    return {
        f"{method.upper()} {path}": operation
        for path, item in schema.get("paths", {}).items()
        for method, operation in item.items()
        if method in ("get", "put", "post", "delete", "patch", "head", "options", "trace")
    }


def _error(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ERROR_REF}}}


def _add_http_answers(schema: dict[str, Any], bearer: bool) -> None:
    components = schema.setdefault("components", {})
    if "ErrorBody" not in components.get("schemas", {}):
        defs = ErrorBody.model_json_schema(ref_template="#/components/schemas/{model}")
        nested = defs.pop("$defs", {})
        components.setdefault("schemas", {}).update({"ErrorBody": defs, **nested})
    if bearer:
        components["securitySchemes"] = {
            "bearer": {"type": "http", "scheme": "bearer", "description": "API__TOKEN"}
        }
        schema["security"] = [{"bearer": []}]
    for operation in _operations(schema).values():
        responses = operation.setdefault("responses", {})
        if bearer:
            responses.setdefault(
                "401", _error("a bearer token is required (API__TOKEN): missing, wrong or empty")
            )
            responses.setdefault(
                "400", _error("refused (see error.code): two Authorization headers")
            )
        if "requestBody" in operation:
            responses.setdefault("413", _error("the body exceeds API__MAX_BODY_MB"))
            responses.setdefault("408", _error("the body did not arrive in API__BODY_TIMEOUT_S"))


def _add_links(schema: dict[str, Any]) -> None:
    operations = _operations(schema)
    for link in LINKS:
        source, target = operations.get(link.source), operations.get(link.target)
        if source is None or target is None or "operationId" not in target:
            raise ValueError(f"link {link.name}: no operation {link.source} or {link.target}")
        definition: dict[str, Any] = {
            "operationId": target["operationId"],
            "description": link.description,
        }
        if link.parameters:
            definition["parameters"] = dict(link.parameters)
        if link.body is not None:
            definition["requestBody"] = link.body
        answer = source.setdefault("responses", {}).setdefault("200", {"description": "OK"})
        answer.setdefault("links", {})[link.name] = definition


def _name_streams(schema: dict[str, Any], streams: Sequence[str]) -> None:
    push = _operations(schema).get("POST /streams/{stream}/events")
    if push is None:
        return
    for parameter in push.get("parameters", []):
        if parameter.get("name") == "stream" and parameter.get("in") == "path":
            parameter.setdefault("schema", {})["enum"] = list(streams)
            parameter["description"] = "A stream of the dataflow that takes HTTP pushes."
