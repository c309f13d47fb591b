"""The ingest stage's HTTP push source as the query service's :class:`api.hosted.EventSink`.

:class:`~ingest.push.HttpPushSource` raises the ingest stage's errors; the service answers with
its own (a stable code per refusal, :mod:`api.exceptions`). This adapter is where one becomes the
other, so neither stage imports the other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from api.exceptions import (
    EventTooLarge,
    InvalidRequest,
    NoEventsPushed,
    PositionConflict,
    PushUnavailable,
    UnknownFieldsPushed,
)
from ingest import exceptions as ingest_errors
from ingest.push import HttpPushSource, PushReceipt


class PushSink:
    """``source`` (the push source of ``stream``) behind the :class:`api.hosted.EventSink`
    interface: the same offer, with refusals raised as the API's errors."""

    def __init__(self, stream: str, source: HttpPushSource) -> None:
        self.stream = stream
        self.source = source

    def offer(
        self,
        events: Sequence[Mapping[str, Any]] | pa.Table,
        *,
        timeout_s: float,
        expect_pos: int | None = None,
    ) -> PushReceipt:
        stream = self.stream
        try:
            return self.source.offer(events, timeout_s=timeout_s, expect_pos=expect_pos)
        except ingest_errors.PositionConflict as exc:
            raise PositionConflict(
                str(exc), stream=stream, expected=exc.expected, next_pos=exc.next_pos
            ) from exc
        except ingest_errors.UnknownFields as exc:
            raise UnknownFieldsPushed(str(exc), stream=stream, fields=exc.fields[:100]) from exc
        except ingest_errors.EventTooLarge as exc:
            raise EventTooLarge(
                str(exc), stream=stream, index=exc.index, bytes=exc.size, limit=exc.limit
            ) from exc
        except ingest_errors.NoEvents as exc:
            raise NoEventsPushed(str(exc), stream=stream) from exc
        except ingest_errors.PushRefused as exc:
            raise InvalidRequest(str(exc), stream=stream) from exc
        except ingest_errors.PushTimedOut as exc:
            raise PushUnavailable(str(exc), stream=stream) from exc
