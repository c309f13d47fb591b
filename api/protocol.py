"""The HTTP/1.1 connection handling of ``streamdi serve``: uvicorn's h11 protocol with a deadline
for each request's head.

uvicorn closes a keep-alive connection that stays idle after an answer, but not one that never
sends a request, nor one that sends its request line and headers a byte at a time: each such
connection holds a file descriptor for as long as the client likes (a "slowloris"). Here the line
and headers of each request must be complete within ``header_timeout_s`` (``API__HEADER_TIMEOUT_S``)
of the connection opening or of the previous answer; otherwise the connection is closed. The
time a request's body takes is bounded by :class:`api.middleware.BodyLimit`, the time its answer
takes by the query limits; neither counts here.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

logger = logging.getLogger(__name__)


class HeadDeadlineProtocol(H11Protocol):
    """uvicorn's :class:`H11Protocol` closing a connection whose next request head is late.

    The deadline is armed when the connection opens and after each answer while no next request
    is under way, and cancelled once h11 has parsed a request's head (the connection's client
    state leaves ``IDLE``). A subclass sets :attr:`header_timeout_s` (see
    :func:`head_deadline_protocol`).
    """

    header_timeout_s: float = 10.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._disarm()  # the head is in

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self._arm()  # waiting for the next request (a pipelined one is already parsed)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        loop = asyncio.get_running_loop()
        self._head_deadline = loop.call_later(self.header_timeout_s, self._expire)

    def _disarm(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _expire(self) -> None:
        self._head_deadline = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            logger.info(
                "closing a connection whose request head is late client=%s timeout_s=%s",
                self.client,
                self.header_timeout_s,
            )
            self.transport.close()


def head_deadline_protocol(header_timeout_s: float) -> type[HeadDeadlineProtocol]:
    """The protocol class to give uvicorn (``uvicorn.Config(http=...)``) for this deadline."""
    return type(
        "HeadDeadlineProtocol", (HeadDeadlineProtocol,), {"header_timeout_s": header_timeout_s}
    )
