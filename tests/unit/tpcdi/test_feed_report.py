"""The per-day record of a run's incremental updates and its report: quantiles per warehouse,
time by where, the JSON series, the text and the chart; which days a feed audits."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from tpcdi.run.feed import FeedOptions, audited_after, phase_name
from tpcdi.run.feed_record import DayRecord, FeedRecord
from tpcdi.run.feed_report import draw_feed_chart, feed_chart_path, format_feed


def _feed() -> FeedRecord:
    feed = FeedRecord(["duckdb", "postgres"], day_seconds=5.0, audit_every=2)
    for i, (duck, pg) in enumerate([(0.5, 0.7), (1.5, 1.9), (1.0, 1.2)]):
        feed.days.append(
            DayRecord(
                batch_id=i + 2,
                date=datetime.date(2017, 7, 8) + datetime.timedelta(days=i),
                dropped_at_s=5.0 * i,
                events=1000 + i,
                collect_s=0.2,
                staged_s=0.3,
                freshness_s={"duckdb": duck, "postgres": pg},
                phase_s=2.0,
                steps={"collect": 0.2, "validation": 0.1},
                spent={
                    "engine": 0.4,
                    "step.apply_prospect": 0.3,
                    "load.duckdb": 0.1,
                    "merge.postgres": 0.05,
                },
                staging_bytes=(i + 1) * 2**20,
                state_rows=100 * (i + 1),
                rss_bytes=300 * 2**20,
                audit={"duckdb": {"ok": 182, "fail": 0}} if i == 1 else None,
            )
        )
    feed.seconds = 12.0
    return feed


def test_the_summary_gives_each_warehouse_its_freshness_quantiles() -> None:
    s = _feed().summary()
    assert s["days"] == 3 and s["events"] == 3003
    assert s["freshness_s"]["duckdb"]["p50"] == 1.0
    assert s["freshness_s"]["duckdb"]["max"] == 1.5
    assert s["freshness_s"]["postgres"]["max"] == 1.9
    assert s["freshness_s"]["postgres"]["p99"] == pytest.approx(1.886, abs=1e-3)
    # from the drop: the collect time added
    assert s["drop_to_visible_s"]["duckdb"]["max"] == pytest.approx(1.7)
    assert s["events_per_s"] == pytest.approx(3003 / 12.0, abs=0.1)
    assert s["ingest_events_per_s"] == pytest.approx(3003 / 1.5, abs=0.1)
    assert s["spent_s"] == {
        "engine": 1.2,
        "load.duckdb": 0.3,
        "merge.postgres": 0.15,
        "run.collect": 0.6,
        "run.validation": 0.3,
    }
    # a step's time is a part of the engine's, listed apart
    assert s["engine_steps_s"] == {"apply_prospect": 0.9}
    assert s["staging_mb"] == {"first": 1.0, "last": 3.0, "max": 3.0}
    assert s["audited_days"] == [2] and s["audits_passed"]


def test_a_failed_sampled_audit_shows() -> None:
    feed = _feed()
    feed.days[1].audit = {"duckdb": {"ok": 181, "fail": 1}}
    assert feed.summary()["audits_passed"] is False
    assert "FAILED" in format_feed(feed)


def test_the_json_has_one_series_per_measure_in_day_order() -> None:
    data = _feed().as_json()
    per_day = data["per_day"]
    assert per_day["batch_id"] == [2, 3, 4]
    assert per_day["date"] == ["2017-07-08", "2017-07-09", "2017-07-10"]
    assert per_day["freshness_s"]["postgres"] == [0.7, 1.9, 1.2]
    assert per_day["spent_s"]["engine"] == [0.4, 0.4, 0.4]
    assert list(data["audits"]) == ["3"]


def test_the_text_and_the_chart(tmp_path: Path) -> None:
    feed = _feed()
    text = format_feed(feed)
    assert "3 days (one day every 5 s)" in text
    assert "freshness postgres" in text and "p99 1.886 s" in text
    assert "time by where: engine 1.2 s" in text
    assert "engine by step: apply_prospect 0.9 s" in text
    chart = feed_chart_path(str(tmp_path / "run.png"))
    assert chart == tmp_path / "run-days.png" and feed_chart_path(None) is None
    draw_feed_chart(feed, chart)
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_which_days_are_audited_and_named() -> None:
    def days(every: int) -> list[int]:
        return [b - 1 for b in range(2, 12) if audited_after(b, 11, every)]

    assert days(3) == [3, 6, 9]
    assert days(0) == []
    # the last day is audited by the run's audit phase, never twice
    assert days(10) == [] and days(1) == list(range(1, 10))
    assert (phase_name(2), phase_name(3), phase_name(366)) == (
        "incremental1",
        "incremental2",
        "incremental365",
    )
    assert FeedOptions().audit_every == 0 and FeedOptions().day_seconds is None
