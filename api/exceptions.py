"""Errors of the query service, each with an HTTP status and a stable ``code``.

Every error response is JSON: ``{"error": {"code": ..., "reason": ..., "detail": {...}}}``. The
codes are part of the API (clients branch on them); the reasons are for people. Errors of other
stages are mapped to these at the boundary (:func:`api.app` handlers), with ``raise ... from exc``.
"""

from __future__ import annotations

from typing import Any, Literal

from streamdi.errors import StreamdiError, TerminalError, TransientError

ErrorCode = Literal[
    "invalid_request",
    "sql_syntax",
    "not_a_query",
    "multiple_statements",
    "unknown_table",
    "table_function",
    "forbidden_function",
    "forbidden_clause",
    "query_failed",
    "query_timeout",
    "result_too_large",
    "query_too_complex",
    "query_memory_exceeded",
    "answer_too_large",
    "unknown_target",
    "no_target",
    "watermark_not_reached",
    "watermark_unavailable",
    "answer_not_found",
    "unknown_stream",
    "unknown_fields",
    "no_events",
    "event_too_large",
    "unsupported_media_type",
    "stream_not_pushable",
    "push_unavailable",
    "position_conflict",
    "no_pipeline",
    "dead_letter_not_found",
    "target_unavailable",
    "not_ready",
    "unauthorized",
    "ambiguous_credentials",
    "body_too_large",
    "body_timeout",
    "not_found",
    "method_not_allowed",
    "internal_error",
]
"""Every code an error response may carry."""


class ApiError(StreamdiError):
    """Root of the query service's errors: an HTTP ``status``, a stable ``code``, a ``reason``
    and optional ``detail`` data."""

    status: int = 400
    code: ErrorCode = "invalid_request"

    def __init__(self, reason: str, **detail: Any) -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(reason)

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "reason": self.reason}
        if self.detail:
            error["detail"] = self.detail
        return {"error": error}


class InvalidRequest(ApiError, TerminalError):
    """A request the schema cannot catch: a body that is not an Arrow stream, events that do not
    fit their stream."""

    status = 400
    code: ErrorCode = "invalid_request"


class QueryRejected(ApiError, TerminalError):
    """The query is not one read-only SELECT over known tables made of what the allowlist admits;
    ``code`` says which rule it broke (``sql_syntax``, ``not_a_query``, ``multiple_statements``,
    ``unknown_table``, ``table_function``, ``forbidden_function``, ``forbidden_clause``,
    ``query_too_complex``)."""

    status = 400

    def __init__(self, code: ErrorCode, reason: str, **detail: Any) -> None:
        self.code = code
        super().__init__(reason, **detail)


class QueryFailed(ApiError, TerminalError):
    """The database refused a checked query (an unknown column, a type error...)."""

    status = 400
    code: ErrorCode = "query_failed"


class QueryTimeout(ApiError, TerminalError):
    """The query ran past ``API__QUERY_TIMEOUT_S`` and was cancelled."""

    status = 408
    code: ErrorCode = "query_timeout"


class ResultTooLarge(ApiError, TerminalError):
    """An island union would pull more rows than ``API__MAX_UNION_ROWS`` into the service."""

    status = 400
    code: ErrorCode = "result_too_large"


class QueryMemoryExceeded(ApiError, TerminalError):
    """The query passed its memory budget: DuckDB's memory limit refused an allocation, or the
    service's resident memory passed ``API__RSS_LIMIT_MB`` while it ran (every query running
    then is interrupted)."""

    status = 400
    code: ErrorCode = "query_memory_exceeded"


class AnswerTooLarge(ApiError, TerminalError):
    """The answer (or one of its rows) passed ``API__MAX_ANSWER_MB``; ask for fewer or narrower
    rows."""

    status = 400
    code: ErrorCode = "answer_too_large"


class UnknownTarget(ApiError, TerminalError):
    """A warehouse that is not configured (``MIGRATION__TARGETS``) was named, or none is."""

    status = 400

    def __init__(self, reason: str, *, code: ErrorCode = "unknown_target", **detail: Any) -> None:
        self.code = code
        super().__init__(reason, **detail)


class WatermarkNotReached(ApiError, TransientError):
    """A pinned watermark is above the last committed batch (ask again later)."""

    status = 409
    code: ErrorCode = "watermark_not_reached"


class WatermarkUnavailable(ApiError, TerminalError):
    """A pinned watermark can no longer be read: the warehouse merged past it."""

    status = 409
    code: ErrorCode = "watermark_unavailable"


class AnswerNotFound(ApiError, TerminalError):
    """No cached answer has this id (unknown, or expired after ``API__ANSWER_TTL_S``)."""

    status = 404
    code: ErrorCode = "answer_not_found"


class UnknownStream(ApiError, TerminalError):
    status = 404
    code: ErrorCode = "unknown_stream"


class UnknownFieldsPushed(ApiError, TerminalError):
    """Pushed events carry fields the stream does not have; nothing was taken (``detail.fields``
    names them)."""

    status = 400
    code: ErrorCode = "unknown_fields"


class NoEventsPushed(ApiError, TerminalError):
    """A push without a single event (an Arrow stream of zero rows)."""

    status = 400
    code: ErrorCode = "no_events"


class EventTooLarge(ApiError, TerminalError):
    """A pushed event is larger than one Kafka record can carry; nothing was taken."""

    status = 413
    code: ErrorCode = "event_too_large"


class UnsupportedMediaType(ApiError, TerminalError):
    """A push whose content type is neither ``application/json`` nor
    ``application/vnd.apache.arrow.stream`` (or is missing)."""

    status = 415
    code: ErrorCode = "unsupported_media_type"


class StreamNotPushable(ApiError, TerminalError):
    """The stream is fed by another input (a file), so it takes no HTTP pushes."""

    status = 409
    code: ErrorCode = "stream_not_pushable"


class PushUnavailable(ApiError, TransientError):
    """The stream's collector did not take the events in time (not running, or stopping)."""

    status = 503
    code: ErrorCode = "push_unavailable"


class PositionConflict(ApiError, TerminalError):
    """A conditional push (``expect_pos``) expected its first event at another position than the
    stream's next one (``detail.next_pos``); nothing was taken. A client retrying an offer whose
    fate it did not learn reads it as: that offer was taken when ``next_pos`` is past it."""

    status = 409
    code: ErrorCode = "position_conflict"


class DeadLetterNotFound(ApiError, TerminalError):
    status = 404
    code: ErrorCode = "dead_letter_not_found"


class TargetUnreachable(ApiError, TransientError):
    """A warehouse could not be reached, or is being bootstrapped and has not caught up yet
    (``detail.bootstrapping``); staging keeps buffering, ask again later."""

    status = 503
    code: ErrorCode = "target_unavailable"


class NotReady(ApiError, TransientError):
    status = 503
    code: ErrorCode = "not_ready"


class IngestNotHosted(ApiError, TerminalError):
    """Pause or resume asked of a service that hosts no pipeline."""

    status = 409
    code: ErrorCode = "no_pipeline"


class ReportNotFound(ApiError, TerminalError):
    """The service serves no TPC-DI run, so it has no run report (``GET /console/report``)."""

    status = 404
    code: ErrorCode = "not_found"
