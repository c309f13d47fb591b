"""The engine benchmark's repeats: runs interleaved across executors, each case summarized as
the median of its runs with their spread and the load they saw, checked against the serial
oracle run by run; the documentation's table generated from the result and written between its
markers. No engine runs here: the runs are made up."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import benchmarks.engine as engine
from benchmarks.engine_report import (
    BEGIN,
    END,
    figures_table,
    markdown,
    render,
    summarize,
    update_marked,
)


def run(executor: str, txn_per_s: float, digest: str = "d", **extra: Any) -> dict[str, Any]:
    return {
        "app": "sl",
        "key_layout": "sequential",
        "executor": executor,
        "transactions": 10_240,
        "operations": 30_000,
        "txn_per_s": txn_per_s,
        "ops_per_s": 3 * txn_per_s,
        "cpu_txn_per_s": 1.5 * txn_per_s,
        "p50_batch_ms": 10_240 / txn_per_s * 1000,
        "p99_batch_ms": 2 * 10_240 / txn_per_s * 1000,
        "first_batch_ms": 40.0,
        "peak_mem_mb": 300.0 + txn_per_s / 1e6,
        "strategy": "sequential x20",
        "digest": digest,
        "load_before": [1.0, 1.0, 1.0],
        "load_after": [1.4, 1.1, 1.0],
        **extra,
    }


def test_a_case_is_the_median_of_its_runs_with_its_spread() -> None:
    runs = [run("local", v) for v in (3.0e6, 2.0e6, 5.0e6, 3.5e6, 2.5e6)]
    runs[2]["load_after"] = [2.5, 1.2, 1.0]
    case = summarize(runs, oracle="d")
    assert case["runs"] == 5
    assert case["txn_per_s"] == 3.0e6
    assert (case["txn_per_s_min"], case["txn_per_s_max"]) == (2.0e6, 5.0e6)
    assert (case["txn_per_s_q1"], case["txn_per_s_q3"]) == (2.5e6, 3.5e6)
    assert case["txn_per_s_runs"] == [3.0e6, 2.0e6, 5.0e6, 3.5e6, 2.5e6]  # in run order
    assert case["p50_batch_ms"] == pytest.approx(10_240 / 3.0e6 * 1000)
    assert case["peak_mem_mb"] == pytest.approx(305.0)  # the largest, not the median
    assert case["strategy"] == "sequential x100"
    assert (case["load_1m_min"], case["load_1m_max"]) == (1.0, 2.5)
    assert case["verified"] is True
    assert "error" not in case


def test_one_run_that_differs_or_fails_marks_the_case() -> None:
    differs = summarize([run("local", 3e6), run("local", 3e6, digest="other")], oracle="d")
    assert differs["verified"] is False
    assert differs["digests"] == ["d", "other"]
    assert summarize([run("local", 3e6)], oracle=None)["verified"] is None
    failed = summarize(
        [run("local", 3e6), {"app": "sl", "executor": "local", "error": "Boom: x"}], oracle="d"
    )
    assert failed["error"] == "Boom: x" and failed["failed_runs"] == 1
    assert failed["txn_per_s"] == 3e6  # the runs that succeeded still say what they measured
    assert failed["verified"] is False
    nothing = summarize([{"app": "sl", "executor": "lock", "error": "no result"}], oracle="d")
    assert "txn_per_s" not in nothing
    assert "FAILED" in render([nothing, failed])


def test_runs_are_interleaved_and_checked_against_the_serial_oracle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    order: list[str] = []

    def fake_run(app_name: str, executor: str, knobs: dict[str, Any], timeout_s: float) -> Any:
        order.append(executor)
        speed = {"serial": 2e4, "local": 3e6, "lock": 5e5}[executor]
        return run(executor, speed, digest="bad" if executor == "lock" else "d")

    monkeypatch.setattr(engine, "run_isolated", fake_run)
    knobs = {"key_layout": "sequential", "keys": 10, "extra": {"transfer_ratio": 0.5}}
    cases, runs = engine.run_case("sl", ["local", "serial", "lock"], knobs, 60, repeat=3)
    assert order == ["local", "serial", "lock"] * 3
    assert [r["run"] for r in runs] == [1, 1, 1, 2, 2, 2, 3, 3, 3]
    verified = {c["executor"]: c["verified"] for c in cases}
    assert verified == {"local": True, "serial": True, "lock": False}
    assert all(c["runs"] == 3 and c["transfer_ratio"] == 0.5 for c in cases)


def document() -> dict[str, Any]:
    cases = [
        summarize([run("local", v) for v in (3.1e6, 2.9e6, 3.3e6)], "d"),
        summarize([run("serial", v) for v in (2.2e4, 2.1e4, 2.3e4)], "d"),
        summarize([run("lock", v) for v in (4.9e5, 5.2e5, 5.0e5)], "d"),
    ]
    return {
        "command": "streamdi bench engine --app sl --repeat 3 --json reports/engine.json",
        "started_at": "2026-11-25T04:30:00+00:00",
        "machine": {"arch": "x86_64", "cores": 2, "python": "3.11.7"},
        "knobs": {"batches": 21, "batch_size": 10_240},
        "repeat": 3,
        "load_before": [1.1, 1.3, 1.5],
        "load_after": [1.2, 1.3, 1.5],
        "results": cases,
        "runs": [],
    }


def test_the_figures_table_says_median_range_command_and_load() -> None:
    table = figures_table(document())
    lines = table.splitlines()
    assert lines[0] == "| app | local | serial | lock |"
    assert lines[2] == "| SL | 3.10 M (2.90-3.30 M) | 22 k (21-23 k) | 0.50 M (0.49-0.52 M) |"
    assert "streamdi bench engine --app sl --repeat 3 --json reports/engine.json" in lines
    assert all(len(line) <= 100 for line in lines[4:])  # the note is wrapped
    words = " ".join(table.split())
    assert "median of 3 runs" in words and "20 batches of 10,240" in words
    assert "1.10 1.30 1.50 before and 1.20 1.30 1.50 after" in words
    report = markdown(document())
    assert "| sl | sequential | local | 3 | 3,100,000 | 2,900,000 | 3,300,000 |" in report


def test_the_table_is_written_between_its_markers(tmp_path: Path) -> None:
    doc = f"# Figures\n\nBefore.\n\n{BEGIN}\nold table\n{END}\n\nAfter.\n"
    updated = update_marked(doc, "| new |\n")
    assert updated == f"# Figures\n\nBefore.\n\n{BEGIN}\n| new |\n{END}\n\nAfter.\n"
    assert update_marked(updated, "| new |\n") == updated  # regenerating changes nothing
    with pytest.raises(ValueError, match="engine-table"):
        update_marked("no markers here", "| new |")

    result, target = tmp_path / "engine.json", tmp_path / "benchmarks.md"
    result.write_text(json.dumps(document()), encoding="utf-8")
    target.write_text(doc, encoding="utf-8")
    from cli.main import main

    assert main(["bench", "engine-table", str(result), "--update", str(target)]) == 0
    text = target.read_text(encoding="utf-8")
    assert figures_table(document()).rstrip() in text
    assert text.startswith("# Figures") and text.endswith("After.\n")


def test_the_step_timer_finds_every_step_it_names_and_leaves_them_unwrapped() -> None:
    """``streamdi bench engine-steps`` times the local executor's steps by name: a rename would
    silently drop a line from docs/benchmarks.md's breakdown, so every name must resolve."""
    from benchmarks.engine_steps import STEPS, measure, render
    from etl_dataflows.executors.local.compiled_step import CompiledStep

    execute = CompiledStep.execute
    knobs = {"keys": 100, "batch_size": 200, "batches": 5, "extra": {}}
    result = measure("sl", "local", knobs)
    assert result["missing"] == []
    assert result["batches_counted"] == 3
    assert [s["step"] for s in result["steps"]] == [qualified for _, _, qualified, _ in STEPS]
    assert all(s["median_ms"] >= 0 for s in result["steps"])
    assert CompiledStep.execute is execute  # the timers are taken off again
    assert "hoist expressions" in render(result)
