"""JSON request bodies read strictly: UTF-8 only, and an object naming a key twice is refused.

``{"sql": "SELECT 1", "sql": "DROP TABLE kv"}`` is valid JSON whose meaning parsers disagree on
(Python keeps the last value, others the first or refuse it). A proxy or audit log that reads
the first would see another request than the service runs, so the service refuses it: 422
``invalid_request``, "duplicate key 'sql' in a JSON object". A body in UTF-16 or UTF-32 is refused
for the same reason (400 ``invalid_request``). Every route of the app uses
:class:`StrictJSONRoute`; routes that read their body themselves (the push route) are not
affected.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            # FastAPI answers a JSONDecodeError as a 422 naming its message
            raise json.JSONDecodeError(f"duplicate key {key!r} in a JSON object", "", 0)
        result[key] = value
    return result


class StrictJSONRequest(Request):
    """A request whose :meth:`json` takes UTF-8 only (RFC 8259; Python would also guess UTF-16
    and UTF-32) and refuses duplicate keys."""

    async def json(self) -> Any:
        text = (await self.body()).decode("utf-8")  # FastAPI answers a decoding error as a 400
        return json.loads(text, object_pairs_hook=_refuse_duplicates)


class StrictJSONRoute(APIRoute):
    """A route that parses its JSON body with :class:`StrictJSONRequest`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            return await handler(StrictJSONRequest(request.scope, request.receive))

        return strict
