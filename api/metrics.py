"""Prometheus metrics of the service, in a registry of its own (one per app, so tests and
benchmarks can run several).

Counters and histograms are updated as requests, queries, pushes and committed batches happen;
the watermarks, lags and sizes are read when ``/metrics`` is scraped, from a ``snapshot()``
callable the service provides. :data:`METRIC_NAMES` lists every family (the operations guide's
table and a test keep to it).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

from api.hosted import CommittedBatchFacts

#: How many of the latest batches ``streamdi_engine_events_per_second`` (and ``/status``'s
#: ``engine.events_per_second``) is measured over.
ENGINE_RATE_BATCHES = 256

_SECONDS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

#: Every metric family the service exports (names as scraped; counters end in ``_total``).
METRIC_NAMES: tuple[str, ...] = (
    "streamdi_http_requests_total",
    "streamdi_http_request_seconds",
    "streamdi_queries_total",
    "streamdi_query_seconds",
    "streamdi_pushed_events_total",
    "streamdi_batch_latency_seconds",
    "streamdi_engine_events_total",
    "streamdi_engine_batch_seconds",
    "streamdi_engine_events_per_second",
    "streamdi_consumer_lag_records",
    "streamdi_ingest_paused",
    "streamdi_staged_watermark",
    "streamdi_released_through",
    "streamdi_staging_bytes",
    "streamdi_staging_pending_batches",
    "streamdi_staged_age_seconds",
    "streamdi_target_acknowledged",
    "streamdi_migration_lag_batches",
    "streamdi_migration_lag_seconds",
    "streamdi_pipeline_up",
    "streamdi_broker_up",
    "streamdi_broker_restarts_total",
    "streamdi_answers_kept",
    "streamdi_answers_bytes",
)


class _StateCollector(Collector):
    def __init__(self, snapshot: Callable[[], dict[str, Any]]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        state = self._snapshot()
        yield GaugeMetricFamily(
            "streamdi_staged_watermark", "Last batch committed to staging.", state["staged"]
        )
        yield GaugeMetricFamily(
            "streamdi_released_through",
            "Last batch released from staging (every target holds it).",
            state["released"],
        )
        acked = GaugeMetricFamily(
            "streamdi_target_acknowledged",
            "Last batch each warehouse target acknowledged.",
            labels=["target"],
        )
        for target, batch in sorted(state["acks"].items()):
            acked.add_metric([target], batch)
        yield acked
        lag_batches = GaugeMetricFamily(
            "streamdi_migration_lag_batches",
            "Batches committed to staging that a warehouse target has not acknowledged yet.",
            labels=["target"],
        )
        lag_seconds = GaugeMetricFamily(
            "streamdi_migration_lag_seconds",
            "Age of the oldest batch a warehouse target has not acknowledged (0: up to date).",
            labels=["target"],
        )
        for target, (batches, seconds) in sorted(state["migration_lag"].items()):
            lag_batches.add_metric([target], batches)
            lag_seconds.add_metric([target], seconds)
        yield lag_batches
        yield lag_seconds
        consumer_lag = GaugeMetricFamily(
            "streamdi_consumer_lag_records",
            "Kafka records of each stream not yet committed to staging (brokers' end offsets "
            "minus the committed offsets).",
            labels=["stream"],
        )
        for stream, records in sorted(state["consumer_lag"].items()):
            consumer_lag.add_metric([stream], records)
        yield consumer_lag
        yield GaugeMetricFamily(
            "streamdi_ingest_paused", "1 while ingest is paused.", state["paused"]
        )
        yield GaugeMetricFamily(
            "streamdi_staging_bytes",
            "Size of the staging DuckDB file, its WAL and its segment files.",
            state["staging_bytes"],
        )
        yield GaugeMetricFamily(
            "streamdi_staging_pending_batches",
            "Committed batches whose deltas are still in staging (not released).",
            max(0, state["staged"] - state["released"]),
        )
        yield GaugeMetricFamily(
            "streamdi_engine_events_per_second",
            "Engine throughput while busy: events per second of engine time, last 256 batches.",
            state["engine_rate"],
        )
        yield GaugeMetricFamily(
            "streamdi_staged_age_seconds",
            "Age of the newest committed batch (seconds since it committed).",
            state["age_s"],
        )
        yield GaugeMetricFamily(
            "streamdi_pipeline_up", "1 while the hosted pipeline runs.", state["pipeline_up"]
        )
        broker = state["broker"]
        up = GaugeMetricFamily(
            "streamdi_broker_up", "1 while the hosted pipeline's Kafka broker answers."
        )
        restarts = CounterMetricFamily(
            "streamdi_broker_restarts",
            "Times the service started its embedded Kafka again after it died.",
        )
        if broker is not None:
            up.add_metric([], 1 if broker.up else 0)
            restarts.add_metric([], broker.restarts)
        yield up
        yield restarts
        yield GaugeMetricFamily(
            "streamdi_answers_kept", "Answers kept for paging.", state["answers"]
        )
        yield GaugeMetricFamily(
            "streamdi_answers_bytes", "Memory of the answers kept.", state["answer_bytes"]
        )


class ServiceMetrics:
    """The service's metrics; ``state`` supplies the scrape-time gauges."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, state: Callable[[], dict[str, Any]]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._engine_lock = threading.Lock()
        #: (events, engine seconds) of the last :data:`ENGINE_RATE_BATCHES` batches.
        self._recent_batches: deque[tuple[int, float]] = deque(maxlen=ENGINE_RATE_BATCHES)
        self.requests = Counter(
            "streamdi_http_requests",
            "HTTP requests by route and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.request_seconds = Histogram(
            "streamdi_http_request_seconds",
            "HTTP request durations by route.",
            ["route"],
            buckets=_SECONDS,
            registry=self.registry,
        )
        self.queries = Counter(
            "streamdi_queries",
            "Union queries by executed plan, target and outcome (ok or the error code).",
            ["plan", "target", "outcome"],
            registry=self.registry,
        )
        self.query_seconds = Histogram(
            "streamdi_query_seconds",
            "Union query durations by executed plan and target.",
            ["plan", "target"],
            buckets=_SECONDS,
            registry=self.registry,
        )
        self.pushed = Counter(
            "streamdi_pushed_events",
            "Events accepted by the HTTP push source, by stream.",
            ["stream"],
            registry=self.registry,
        )
        self.batch_latency = Histogram(
            "streamdi_batch_latency_seconds",
            "Per batch, from its first record's arrival to its staging commit.",
            buckets=_SECONDS,
            registry=self.registry,
        )
        self.engine_events = Counter(
            "streamdi_engine_events",
            "Events the engine executed and committed to staging.",
            registry=self.registry,
        )
        self.engine_seconds = Histogram(
            "streamdi_engine_batch_seconds",
            "Engine time per batch (running the dataflow, before the commit).",
            buckets=_SECONDS,
            registry=self.registry,
        )
        self.registry.register(
            _StateCollector(lambda: {**state(), "engine_rate": self.engine_rate()})
        )

    def observe_batch(self, batch: CommittedBatchFacts) -> None:
        """Account a committed batch (a pipeline observer)."""
        self.batch_latency.observe(batch.latency_s)
        self.engine_events.inc(batch.events)
        self.engine_seconds.observe(batch.executed_s)
        with self._engine_lock:
            self._recent_batches.append((batch.events, batch.executed_s))

    def engine_rate(self) -> float:
        """Events per second of engine time over the last :data:`ENGINE_RATE_BATCHES` batches
        (0 before any batch): a recent figure, so a slowdown shows within minutes however long
        the service has run."""
        with self._engine_lock:
            recent = list(self._recent_batches)
        events = sum(e for e, _ in recent)
        seconds = sum(s for _, s in recent)
        return events / seconds if seconds > 0 else 0.0

    def render(self) -> bytes:
        data: bytes = generate_latest(self.registry)
        return data
