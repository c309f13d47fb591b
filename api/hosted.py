"""What the query service needs from the run that hosts it, as interfaces.

The service (:class:`api.service.QueryService`) answers queries over staging and the warehouses on
its own; pushing events, re-offering dead letters and pausing the pipeline need the run it is
hosted in. Those reach it through the small interfaces below, which the composition root
(:mod:`runtime.serve`) fills with the ingest stage's implementations, so ``api`` never imports
``ingest``:

* :class:`EventSink`: one stream's HTTP push door (``POST /streams/{stream}/events``);
* :data:`Replayer`: re-offers dead letters through the broker;
* :class:`IngestControl`: pause, resume, the consumer lag;
* :class:`BrokerHealth`: the broker's state (``/ready``, ``/status``, the metrics);
* :class:`CommittedBatchFacts`: what the service's metrics and console learn of each committed
  batch (the composition root appends their ``observe_batch`` to the pipeline's observers).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import pyarrow as pa

from etl_dataflows.batch import StepDecision, StepStats
from staging.batch_commit import StreamProgress


class PushedEvents(Protocol):
    """What became of one offer: ``events`` accepted, ``rejects`` sent to the dead letters (the
    first ones listed in ``rejected`` as ``(pos, reason)``), the positions ``first_pos..last_pos``
    and the logical batch ids ``first_batch..last_batch`` that carry them, and ``warnings`` about
    accepted events."""

    @property
    def events(self) -> int: ...

    @property
    def rejects(self) -> int: ...

    @property
    def first_pos(self) -> int: ...

    @property
    def last_pos(self) -> int: ...

    @property
    def first_batch(self) -> int: ...

    @property
    def last_batch(self) -> int: ...

    @property
    def rejected(self) -> Sequence[tuple[int, str]]: ...

    @property
    def warnings(self) -> Sequence[str]: ...


class EventSink(Protocol):
    """One stream's push door. :meth:`offer` hands the events to the stream's collector and
    returns once they are produced to Kafka. An offer refused as a whole raises an
    :class:`api.exceptions.ApiError`: :class:`~api.exceptions.UnknownFieldsPushed`,
    :class:`~api.exceptions.EventTooLarge`, :class:`~api.exceptions.NoEventsPushed`,
    :class:`~api.exceptions.InvalidRequest` (events that cannot become the stream's),
    :class:`~api.exceptions.PositionConflict` (``expect_pos`` is not the stream's next position:
    nothing taken), or :class:`~api.exceptions.PushUnavailable` (not produced within
    ``timeout_s``)."""

    def offer(
        self,
        events: Sequence[Mapping[str, Any]] | pa.Table,
        *,
        timeout_s: float,
        expect_pos: int | None = None,
    ) -> PushedEvents: ...


class IngestControl(Protocol):
    """What the service may do to the pipeline it hosts (the composition root fills it with a
    :class:`runtime.pipeline.Pipeline`)."""

    paused: threading.Event
    consumer_lag: dict[str, int]

    def pause(self) -> None: ...

    def resume(self) -> None: ...


class BrokerHealth(Protocol):
    """The broker the hosted pipeline uses, as its watch last saw it (the composition root fills
    it with a :class:`runtime.broker_watch.BrokerState`): its address, whether it is embedded and
    answers (``up``; ``down_since`` in epoch seconds otherwise), the embedded broker's pid and how
    many times the service restarted it, the last problem seen."""

    @property
    def bootstrap_servers(self) -> str: ...

    @property
    def embedded(self) -> bool: ...

    @property
    def up(self) -> bool: ...

    @property
    def down_since(self) -> float | None: ...

    @property
    def pid(self) -> int | None: ...

    @property
    def restarts(self) -> int: ...

    @property
    def last_error(self) -> str | None: ...


#: ``replay(entries)`` re-offers ``(number, entry)`` pairs through Kafka: (sent, refused).
Replayer = Callable[[list[tuple[int, Any]]], tuple[int, list[tuple[int, str]]]]


class CommittedBatchFacts(Protocol):
    """One batch committed to staging (the composition root passes a
    :class:`runtime.committer.CommittedBatch`): its id and counts, the engine's time
    (``executed_s``), from its first record's arrival to its commit (``latency_s``, the
    freshness), the epoch seconds it arrived and committed, its staging commit's duration
    (``commit_s``; batches committed in one group share it), the engine's decision per
    transactional step, its counts per step, and the progress of the streams it consumed."""

    @property
    def batch_id(self) -> int: ...

    @property
    def events(self) -> int: ...

    @property
    def records(self) -> int: ...

    @property
    def dead_letters(self) -> int: ...

    @property
    def executed_s(self) -> float: ...

    @property
    def latency_s(self) -> float: ...

    @property
    def arrived_at(self) -> float: ...

    @property
    def committed_at(self) -> float: ...

    @property
    def commit_s(self) -> float: ...

    @property
    def decisions(self) -> Sequence[StepDecision]: ...

    @property
    def steps(self) -> Mapping[str, StepStats]: ...

    @property
    def streams(self) -> Mapping[str, StreamProgress]: ...
