"""After the historical load a TPC-DI run gives back what the updates do not need (memory at
scale, issue 22): the Spark session and its JVM unless the engine runs on Spark, then the
allocators' freed memory."""

from __future__ import annotations

import pytest

import etl_dataflows.executors.spark.session as spark_session
import tpcdi.run.job as job


@pytest.mark.parametrize(
    ("executor", "expected"),
    [
        ("local", ["stop_spark", "release"]),
        ("serial", ["stop_spark", "release"]),
        ("spark", ["release"]),
        ("spark:driver", ["release"]),
    ],
)
def test_spark_stops_unless_the_engine_runs_on_it(
    executor: str, expected: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    monkeypatch.setattr(spark_session, "stop_spark_session", lambda: calls.append("stop_spark"))
    monkeypatch.setattr(job, "release_free_memory", lambda: calls.append("release"))
    job.free_after_historical(executor)
    assert calls == expected
