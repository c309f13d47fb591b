"""Errors as JSON: the one shape every error answer has, and the app's exception handlers.

Every error is ``{"error": {"code", "reason", "detail"?}}`` with a stable ``code``
(:data:`api.exceptions.ErrorCode`): a client branches on the code, a person reads the reason.
:func:`install_error_handlers` maps what the routes and the framework raise to that shape:

* :class:`~api.exceptions.ApiError`: its own status and code;
* a request that does not match the schema (FastAPI's validation, a body that is not JSON):
  422 ``invalid_request`` naming each problem;
* the router's and the guards' refusals (``HTTPException``): 404 ``not_found``, 405
  ``method_not_allowed`` (with ``Allow``), a :class:`Refusal`'s own code, else
  ``invalid_request``.

Exceptions nothing maps (bugs) are answered by :class:`api.middleware.InternalErrorGuard`.
"""

from __future__ import annotations

import json
import logging
import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from api.exceptions import ApiError, ErrorCode

logger = logging.getLogger(__name__)

#: The longest reason a validation error carries (a huge bad body must not make a huge answer).
MAX_REASON = 2000


class Refusal(StarletteHTTPException):
    """A request refused by the HTTP layer rather than a route (its credentials, its body), with
    its stable ``code``. An ``HTTPException`` because FastAPI's body parsing passes those through
    (it turns every other exception raised while reading a body into a generic 400)."""

    def __init__(
        self,
        status: int,
        code: ErrorCode,
        reason: str,
        *,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(status, reason, headers=headers)
        self.code: ErrorCode = code
        self.reason = reason


class ErrorJSONResponse(JSONResponse):
    """JSON that renders whatever an error carries: a lone surrogate (JSON's ``"\\udc00"`` is
    valid JSON but not text) becomes ``?``, NaN and infinities null, another value JSON has no
    form for its ``str``.
    Errors echo what the client sent, so rendering one must not fail on it."""

    def render(self, content: Any) -> bytes:
        return json.dumps(
            _finite(content), ensure_ascii=False, default=str, separators=(",", ":")
        ).encode("utf-8", errors="replace")


def _finite(value: Any) -> Any:
    """``value`` with NaN and infinities as null (JSON has no form for them)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def error_response(
    status: int,
    code: ErrorCode,
    reason: str,
    detail: dict[str, Any] | None = None,
    *,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """The JSON answer of an error; a 401 always carries ``WWW-Authenticate: Bearer``."""
    error: dict[str, Any] = {"code": code, "reason": reason}
    if detail:
        error["detail"] = detail
    response = ErrorJSONResponse({"error": error}, status_code=status, headers=headers)
    if status == 401:
        response.headers["WWW-Authenticate"] = "Bearer"
    return response


def _validation_reason(exc: RequestValidationError) -> str:
    problems = []
    for e in exc.errors()[:20]:
        msg = e.get("msg", "invalid")
        if e.get("type") == "json_invalid" and e.get("ctx", {}).get("error"):
            msg = f"{msg}: {e['ctx']['error']}"  # what is wrong with the JSON, not only where
        problems.append(f"{'.'.join(str(p) for p in e.get('loc', ()))}: {msg}")
    return "; ".join(problems)[:MAX_REASON] or "invalid request"


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers the module docstring lists on ``app``."""

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.code, exc.reason, exc.detail)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(422, "invalid_request", _validation_reason(exc))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        headers = dict(exc.headers or {})
        if isinstance(exc, Refusal):
            return error_response(exc.status_code, exc.code, exc.reason, headers=headers)
        if exc.status_code == 404:
            return error_response(404, "not_found", f"no route {request.url.path}"[:MAX_REASON])
        if exc.status_code == 405:
            return error_response(
                405,
                "method_not_allowed",
                f"{request.method} is not allowed here (Allow: {headers.get('Allow', '')})",
                headers=headers,
            )
        reason = str(exc.detail)
        if exc.__cause__ is not None:  # FastAPI's "error parsing the body": say what it was
            reason = f"{reason}: {type(exc.__cause__).__name__}: {exc.__cause__}"
        return error_response(
            exc.status_code, "invalid_request", reason[:MAX_REASON], headers=headers
        )
