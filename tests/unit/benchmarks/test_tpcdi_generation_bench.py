"""``streamdi bench tpcdi``'s generation summary: median and spread of the repeats, the load
averages beside them, whether the 1 M records/s target was met, and the report's table."""

from __future__ import annotations

from typing import Any

from benchmarks.tpcdi import render, summarize


def _run(rate: int, load: float) -> dict[str, Any]:
    return {
        "sf": 10.0,
        "run": 1,
        "seconds": 15_000_000 / rate,
        "total_records": 15_000_000,
        "records_per_second": rate,
        "cpu_seconds": 20.0,
        "peak_memory_mib": 1500.0 + rate / 1e6,
        "bytes": 2**30,
        "load_average": [load, 1.0, 1.0],
    }


def test_the_summary_is_the_median_and_spread_of_the_repeats() -> None:
    runs = [_run(900_000, 3.1), _run(1_200_000, 1.2), _run(1_100_000, 2.0)]
    summary = summarize(runs)
    assert summary["median_records_per_second"] == 1_100_000
    assert (summary["min_records_per_second"], summary["max_records_per_second"]) == (
        900_000,
        1_200_000,
    )
    assert summary["load_averages"] == [3.1, 1.2, 2.0]
    assert summary["met_target"] is True
    assert summary["peak_memory_mib"] == 1501.2
    assert summarize(runs[:1])["met_target"] is False


def test_the_report_shows_every_run_and_the_summary() -> None:
    runs = [_run(900_000, 3.1), _run(1_200_000, 1.2)]
    summary = summarize(runs) | {"check": {"differing": 0, "examples": [], "seconds": 1.0}}
    report = render({"generation": runs, "summary": [summary], "reading": {}})
    assert "| 10 | 1 | 16.67 | 15,000,000 | 900,000 | 20.0 | 1,501 | 1,024 | 3.10 |" in report
    assert "| 10 | 2 | 1,050,000 | 900,000-1,200,000 | 5.5 | yes | 3.1, 1.2 | 0 differ |" in report
