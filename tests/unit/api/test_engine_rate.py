"""``streamdi_engine_events_per_second`` and ``/status``'s engine rate are recent figures: the
last :data:`api.metrics.ENGINE_RATE_BATCHES` batches, not the service's lifetime average."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from api.metrics import ENGINE_RATE_BATCHES, ServiceMetrics
from tests.unit.api.test_console_recorder import batch


def idle() -> dict[str, Any]:
    """The scrape-time state of a service with nothing staged."""
    return {
        "staged": 0, "released": 0, "acks": {}, "migration_lag": {}, "consumer_lag": {},
        "paused": 0, "staging_bytes": 0, "age_s": 0.0, "pipeline_up": 1, "broker": None,
        "answers": 0, "answer_bytes": 0,
    }  # fmt: skip


def exported_rate(metrics: ServiceMetrics) -> float:
    for line in metrics.render().decode().splitlines():
        if line.startswith("streamdi_engine_events_per_second "):
            return float(line.split()[1])
    raise AssertionError("streamdi_engine_events_per_second is not exported")


def test_no_batch_yet_is_zero() -> None:
    metrics = ServiceMetrics(idle)
    assert metrics.engine_rate() == 0.0 == exported_rate(metrics)


def test_a_slowdown_shows_once_the_window_has_turned_over() -> None:
    metrics = ServiceMetrics(idle)
    for batch_id in range(1, 1001):  # a long fast life: 10 events per 2 ms
        metrics.observe_batch(batch(batch_id))
    assert metrics.engine_rate() == pytest.approx(10 / 0.002)
    slow = 1001
    for _ in range(ENGINE_RATE_BATCHES // 2):  # half the window 10x slower
        metrics.observe_batch(dataclasses.replace(batch(slow), executed_s=0.02))
        slow += 1
    half = ENGINE_RATE_BATCHES // 2
    assert metrics.engine_rate() == pytest.approx(
        (10 * ENGINE_RATE_BATCHES) / (half * 0.002 + half * 0.02)
    )
    for _ in range(ENGINE_RATE_BATCHES):
        metrics.observe_batch(dataclasses.replace(batch(slow), executed_s=0.02))
        slow += 1
    assert metrics.engine_rate() == pytest.approx(10 / 0.02)  # the lifetime average: ~1,400/s more
    assert exported_rate(metrics) == pytest.approx(10 / 0.02)
