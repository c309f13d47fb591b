"""``streamdi bench tpcdi-scale``'s arithmetic: the fitted growth names a step that grows faster
than linearly, and the report carries every run's figures with its load average."""

from __future__ import annotations

import time
from typing import Any

import pytest

from benchmarks.load_average import LoadAverageSampler
from benchmarks.tpcdi_scale import exponent, fit_line, growth, markdown


def run(sf: float, read: float, market: float) -> dict[str, Any]:
    return {
        "sf": sf,
        "exit": 0,
        "command": f"streamdi tpcdi run --sf {sf:g}",
        "historical_s": 10 + read + market,
        "source_rows": int(1_500_000 * sf),
        "rows_per_s": int(1_500_000 * sf / (10 + read + market)),
        "steps": {"transform.read": read, "transform.market": market, "load": 1.0},
        "largest_piece": {"table": "dimtrade", "rows": 131072, "bytes": 24 << 20},
        "peak_mem_mb": 2000 + 100 * sf,
        "historical_peak_mb": 1900 + 100 * sf,
        "peak_parts_mb": {"process": 800.0, "spark": 1000.0, "children": 200.0, "postgres": 0.0},
        "warehouse_mb": 100.0 * sf,
        "postgres_mb": None,
        "freshness_s": [2.0, 2.1],
        "audit": {"ok": 182, "fail": 0},
        "load_avg_before": [0.9, 1.0, 1.1],
        "load_avg_after": [1.2, 1.0, 1.1],
    }


def test_a_line_and_an_exponent_fit_what_they_should() -> None:
    assert fit_line([1, 3, 10], [12, 16, 30]) == {"slope": 2.0, "intercept": 10.0}
    assert fit_line([3], [1]) is None
    assert exponent(1, 5, 100, 500) == pytest.approx(1.0)
    assert exponent(1, 5, 100, 50_000) == pytest.approx(2.0)
    assert exponent(1, 0, 100, 5) is None


def test_growth_names_the_step_that_grows_faster_than_linearly() -> None:
    runs = [run(1, 2.0, 3.0), run(10, 20.0, 300.0), run(3, 6.0, 27.0)]
    found = growth(runs)
    assert found["steps"] == {"read": 1.0, "market": 2.0}
    assert found["superlinear"] == ["market"]
    assert found["peak_mem_mb"] == {"slope": 100.0, "intercept": 2000.0}
    text = markdown(
        {"command": "streamdi bench tpcdi-scale --sf 1 3 10", "target": "duckdb",
         "spark": "local[2]", "runs": sorted(runs, key=lambda r: r["sf"]), "growth": found}
    )  # fmt: skip
    assert "| 10 | 330.0 s | 15,000,000 |" in text
    assert "faster than linearly (b > 1.15, > 5 s): market" in text
    assert "131,072 rows (24 MB)" in text and "| 0.9 |" in text


def test_a_failed_run_is_a_row_of_its_own() -> None:
    runs = [run(1, 2.0, 3.0), {"sf": 3.0, "exit": 1, "error": "boom"}]
    found = growth(runs)
    assert found["historical_s"] is None  # one point measured
    assert "| 3 | failed (exit 1) |" in markdown(
        {"command": "c", "target": "duckdb", "spark": "local[2]", "runs": runs, "growth": found}
    )


def test_the_report_gives_the_load_during_each_run_and_the_resume_cpu() -> None:
    during = dict(
        run(3, 2.0, 3.0),
        load_avg_during={"median": 4.25, "max": 7.5, "samples": 9},
        resume={"seconds": 31.7, "cpu_s": 22.0, "state_rows": 22_431_207},
    )
    text = markdown(
        {
            "command": "c",
            "target": "duckdb",
            "spark": "local[2]",
            "runs": [run(1, 2.0, 3.0), during],
            "growth": growth([run(1, 2.0, 3.0), during]),
        }
    )
    assert "| 0.9 |" in text  # a run recorded before the sampler: its start only
    assert "| 0.9; during 4.2 (max 7.5) |" in text
    assert "SF 3: 31.7 s (22.0 s of CPU) for 22,431,207 state rows" in text  # the resume, too


def test_the_sampler_reads_the_load_at_entry_exit_and_in_between() -> None:
    with LoadAverageSampler(every_s=0.01) as loads:
        time.sleep(0.1)
    summary = loads.summary()
    assert summary["samples"] >= 3
    assert 0 <= summary["median"] <= summary["max"]
