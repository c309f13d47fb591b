"""The guards every request passes before (and after) a route, as plain ASGI middleware.

From the outside in (:func:`install_guards` adds them in this order):

1. :class:`RequestMetrics` counts every answer by method, route and status, 401s and 500s too.
2. :class:`InternalErrorGuard` turns an exception that escaped everything else (a bug) into a
   JSON 500 ``internal_error`` and keeps the connection usable.
3. :class:`BearerAuth` (with ``API__TOKEN``) refuses a request without exactly one valid
   ``Authorization: Bearer <token>`` header before any of its body is read, except a ``GET``
   of one of the console's static paths (``/`` and the shipped ``/console/assets/...``),
   which hold no data.
4. :class:`BodyLimit` bounds a request body's size (``API__MAX_BODY_MB``) and the time it may
   take to arrive (``API__BODY_TIMEOUT_S``) while it is read, never after buffering it.

They are plain ASGI rather than ``@app.middleware("http")`` so that nothing between them and the
server re-raises an exception after its response was sent: Starlette's ``ServerErrorMiddleware``
does that (so servers can log it), and uvicorn then closes the connection, which resets the
client's next request on it.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
import uuid
from typing import Any

from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.handlers import Refusal, error_response
from api.metrics import ServiceMetrics

logger = logging.getLogger(__name__)


class BodyLimit:
    """Bounds each request body: at most ``max_bytes`` (413 ``body_too_large``) and all of it
    within ``timeout_s`` of the first read (408 ``body_timeout``).

    A declared ``Content-Length`` above the limit is refused before the route runs; a chunked or
    understated body is counted as it arrives and refused at the first byte past the limit, so
    the service never holds more than ``max_bytes`` of one body. A route that catches the refusal
    and answers something else still has the refusal sent in its place.
    """

    def __init__(self, app: ASGIApp, *, max_bytes: int, timeout_s: float) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s

    def _too_large(self) -> Refusal:
        return Refusal(
            413,
            "body_too_large",
            f"the request body exceeds {self.max_bytes} bytes (API__MAX_BODY_MB)",
            headers={"Connection": "close"},
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await _send_refusal(self._too_large(), scope, send)
            return
        received = 0
        complete = False
        deadline: float | None = None
        refused: Refusal | None = None
        started = False

        async def limited_receive() -> Message:
            nonlocal received, complete, deadline, refused
            if complete:  # after the body, receive only waits for the client to go away
                return await receive()
            if deadline is None:
                deadline = time.monotonic() + self.timeout_s
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                refused = Refusal(
                    408,
                    "body_timeout",
                    f"the request body did not arrive within {self.timeout_s:g} s "
                    "(API__BODY_TIMEOUT_S)",
                    headers={"Connection": "close"},
                )
                raise refused from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    refused = self._too_large()
                    raise refused
                complete = not message.get("more_body", False)
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                if refused is not None and message["status"] != refused.status_code:
                    # the route swallowed the refusal: answer it instead of what the route says
                    raise refused
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except Exception:
            if refused is None or started:
                raise
            await _send_refusal(refused, scope, send)


class BearerAuth:
    """Lets a request through only with exactly one ``Authorization`` header holding
    ``Bearer <token>`` (the scheme in any case; the token compared in constant time).

    Missing, another scheme, an empty or wrong token: 401 ``unauthorized`` with
    ``WWW-Authenticate: Bearer``. Two or more ``Authorization`` headers: 400
    ``ambiguous_credentials`` (servers and proxies disagree on which one counts, so none does).
    The request's body is never read.

    The allowlist: a request needs no token iff :func:`is_public` says so for
    ``public_paths`` (the console's page and assets, from
    :meth:`api.console.ConsoleAssets.public_paths`). Nothing else is exempt, however spelled.
    """

    def __init__(
        self, app: ASGIApp, *, token: str, public_paths: frozenset[str] = frozenset()
    ) -> None:
        if not token:
            raise ValueError("an empty bearer token would admit anyone")
        self.app = app
        self._token = token.encode()
        self.public_paths = public_paths

    def _refusal(self, scope: Scope) -> Refusal | None:
        values = [v for k, v in scope["headers"] if k.lower() == b"authorization"]
        if len(values) > 1:
            return Refusal(
                400,
                "ambiguous_credentials",
                f"{len(values)} Authorization headers: send exactly one",
            )
        if values:
            scheme, _, credentials = values[0].partition(b" ")
            credentials = credentials.strip(b" \t")
            if (
                scheme.lower() == b"bearer"
                and credentials
                and hmac.compare_digest(credentials, self._token)
            ):
                return None
        return Refusal(
            401,
            "unauthorized",
            "a valid bearer token is required (Authorization: Bearer ...)",
            headers={"WWW-Authenticate": "Bearer"},
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or is_public(scope, self.public_paths):
            await self.app(scope, receive, send)
            return
        refusal = self._refusal(scope)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        scope["streamdi.refused"] = refusal.code
        await _send_refusal(refusal, scope, send)


def is_public(scope: Scope, public_paths: frozenset[str]) -> bool:
    """Whether ``scope`` may pass :class:`BearerAuth` without a token: a ``GET`` whose path is
    exactly one of ``public_paths``, spelled plainly. The path the router will route
    (``scope["path"]``, already percent-decoded) must be in the set, and the path as sent
    (``raw_path``) must be that same text: nothing percent-encoded (``%2F``, ``%2e%2e``), no
    dot segment (``/console/assets/../status`` is not in the set), no root path in front. A
    query string is allowed (it is not part of either)."""
    if scope.get("method") != "GET" or scope.get("root_path"):
        return False
    path = scope.get("path")
    if path not in public_paths:
        return False
    raw = scope.get("raw_path")
    return raw is None or raw == path.encode("ascii")


class InternalErrorGuard:
    """Answers an exception that escaped the app with a JSON 500 ``internal_error`` and returns
    normally, so the server keeps the connection open for the client's next request.

    The reason names an ``error_id`` that the log line with the traceback carries; the exception's
    own text stays in the log (it may hold paths, SQL or data). A client that went away mid-body
    is not an error. If the response had already started, it cannot be finished honestly: the
    exception is re-raised and the server closes the connection.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = {"started": False, "complete": False}

        async def tracked_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                state["started"] = True
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                state["complete"] = True
            await send(message)

        try:
            await self.app(scope, receive, tracked_send)
        except ClientDisconnect:
            logger.info("client went away path=%s", scope.get("path"))
        except Exception as exc:
            error_id = uuid.uuid4().hex[:16]
            logger.exception(
                "request failed error_id=%s method=%s path=%s",
                error_id,
                scope.get("method"),
                scope.get("path"),
            )
            if state["complete"]:
                return  # the client has its whole answer; nothing is left to repair
            if state["started"]:
                raise
            response = error_response(
                500,
                "internal_error",
                f"the service failed on this request ({type(exc).__name__}); its log has the "
                f"details under error_id={error_id}",
                {"error_id": error_id},
            )
            await response(scope, receive, send)


class RequestMetrics:
    """Counts every answer in ``streamdi_http_requests`` (method, route template, status) and
    observes its latency per route. A request no route matched is ``unmatched``; one the
    authentication refused is ``unauthorized`` (its path is the client's, not a route's); one
    that got no answer because its client went away has status 499."""

    def __init__(self, app: ASGIApp, *, metrics: ServiceMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = [499]  # no answer at all: the client went away first (nginx's code for it)

        async def observed_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, observed_send)
        finally:
            if "streamdi.refused" in scope:
                route = "unauthorized"
            else:
                route = getattr(scope.get("route"), "path", "unmatched")
            self.metrics.requests.labels(scope["method"], route, str(status[0])).inc()
            self.metrics.request_seconds.labels(route).observe(time.perf_counter() - started)


def install_guards(
    app: Any,
    *,
    metrics: ServiceMetrics,
    token: str | None,
    max_bytes: int,
    timeout_s: float,
    public_paths: frozenset[str] = frozenset(),
) -> None:
    """Add the guards to ``app`` (a Starlette or FastAPI app) in the order the module docstring
    gives; Starlette runs the last one added first. ``public_paths``: the paths a ``GET`` may
    reach without the token (see :func:`is_public`)."""
    app.add_middleware(BodyLimit, max_bytes=max_bytes, timeout_s=timeout_s)
    if token is not None:
        app.add_middleware(BearerAuth, token=token, public_paths=public_paths)
    app.add_middleware(InternalErrorGuard)
    app.add_middleware(RequestMetrics, metrics=metrics)


def _content_length(scope: Scope) -> int | None:
    for key, value in scope["headers"]:
        if key.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _send_refusal(refusal: Refusal, scope: Scope, send: Send) -> None:
    """Answer ``refusal`` without reading the request's body; if the request has one, the answer
    closes the connection (its unread rest must not be taken for the next request, nor drained)."""
    headers = dict(refusal.headers or {})
    if _content_length(scope) or any(
        k.lower() == b"transfer-encoding" for k, _ in scope["headers"]
    ):
        headers["Connection"] = "close"
    response = error_response(refusal.status_code, refusal.code, refusal.reason, headers=headers)

    async def no_body() -> Message:
        return {"type": "http.disconnect"}

    await response(scope, no_body, send)
