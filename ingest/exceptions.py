"""Errors of data collection and consumption (bad *records* are dead letters, not errors)."""

from __future__ import annotations

from streamdi.errors import StreamdiError, TerminalError, TransientError


class IngestError(StreamdiError):
    """Root of the ingest stage's errors."""


class BrokerUnavailable(IngestError, TransientError):
    """The Kafka broker did not answer (not up yet, or gone); retrying may help."""


class BrokerStartFailed(IngestError, TerminalError):
    """The embedded broker could not be started (no Java, a taken port, it exited at once or did
    not answer in time)."""


class KafkaJarsUnavailable(BrokerStartFailed):
    """The embedded broker's jars are not there and cannot be fetched; the message says what to
    set instead."""


class TopicMismatch(IngestError, TerminalError):
    """A topic that exists does not fit the run (its partition count differs from the binding);
    the message says what to change."""


class RetentionGap(IngestError, TerminalError):
    """Records a run had not consumed yet were deleted by the topic's retention: going on would
    skip them silently, so the run stops and says which offsets are gone (``gaps``: each as
    ``topic[partition] offsets first..last``; empty when the broker did not say)."""

    def __init__(self, message: str, gaps: list[str] | None = None) -> None:
        super().__init__(message)
        self.gaps = gaps or []


class SourceUnavailable(IngestError, TerminalError):
    """A source cannot be read (a missing file, a bad declaration)."""


class CollectorBusy(IngestError, TerminalError):
    """Another collector holds this stream's checkpoint (one collector per stream at a time)."""


class PushRefused(IngestError, TerminalError):
    """Events pushed over HTTP cannot become events of the stream (an Arrow table with columns of
    the wrong type); nothing of the offer was taken."""


class UnknownFields(PushRefused):
    """Pushed events carry fields the stream does not have (``fields`` names them)."""

    def __init__(self, reason: str, fields: list[str]) -> None:
        self.fields = fields
        super().__init__(reason)


class EventTooLarge(PushRefused):
    """A pushed event is larger than one Kafka record can carry (``KAFKA__MAX_RECORD_BYTES``)."""

    def __init__(self, reason: str, index: int, size: int, limit: int) -> None:
        self.index, self.size, self.limit = index, size, limit
        super().__init__(reason)


class NoEvents(PushRefused):
    """An offer without a single event (an empty list, an Arrow stream of zero rows)."""


class PositionConflict(PushRefused):
    """A conditional offer expected its first event at position ``expected``; the stream's next
    position is ``next_pos``. Nothing of the offer was taken (see :mod:`ingest.push`)."""

    def __init__(self, reason: str, *, expected: int, next_pos: int) -> None:
        self.expected, self.next_pos = expected, next_pos
        super().__init__(reason)


class PushTimedOut(IngestError, TransientError):
    """The collector did not take and produce pushed events in time."""


class PushNotProduced(PushTimedOut):
    """The collector failed (the broker went away) before the pushed events were acknowledged:
    they may or may not be in Kafka; nothing was acknowledged."""
