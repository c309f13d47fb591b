"""Prometheus metrics of the service, in a registry of its own (one per app, so tests and
benchmarks can run several).

Counters and histograms are updated as requests, queries and pushes happen; the watermarks and
sizes are read when ``/metrics`` is scraped, from a ``snapshot()`` callable the service provides.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

_SECONDS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class _StateCollector(Collector):
    def __init__(self, snapshot: Callable[[], dict[str, Any]]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterator[GaugeMetricFamily]:
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
        yield GaugeMetricFamily(
            "streamdi_staged_age_seconds",
            "Age of the newest committed batch (seconds since it committed).",
            state["age_s"],
        )
        yield GaugeMetricFamily(
            "streamdi_pipeline_up", "1 while the hosted pipeline runs.", state["pipeline_up"]
        )
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
        self.registry.register(_StateCollector(state))

    def render(self) -> bytes:
        data: bytes = generate_latest(self.registry)
        return data
