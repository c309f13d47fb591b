"""``streamdi bench audit`` runs end to end at a tiny scale (the numbers come from real runs; this
only keeps the benchmark from rotting)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.audit import _integer_ranges, sizes
from cli.main import main
from tests.unit.tpcdi.audit.tiny_dw import tiny_spec, write_answer_keys


def test_integer_ranges_leave_date_ranges_alone() -> None:
    sql = "FROM range(1, 5 + 1) r(i); FROM range(DATE '1950-01-01', DATE '2021-01-01') r(d)"
    assert _integer_ranges(sql) == (
        "FROM (SELECT CAST(range AS INTEGER) AS i FROM range(1, 5 + 1)) r; "
        "FROM range(DATE '1950-01-01', DATE '2021-01-01') r(d)"
    )
    assert sizes(3)["trades"] == 391_406 and sizes(30)["trades"] == 3_914_060


def test_the_benchmark_writes_its_report(tmp_path: Path) -> None:
    keys = write_answer_keys(tmp_path / "keys", tiny_spec().keys)
    out = tmp_path / "reports"
    args = ["bench", "audit", "--sf", "0.01", "--no-postgres", "--data", str(keys)]
    assert main([*args, "--out", str(out)]) == 0
    results = json.loads((out / "bench-audit.json").read_text())
    duck = results["targets"]["duckdb"]
    assert duck["checks"] == duck["ok"] + duck["fail"] > 150
    assert duck["answer_key_rows"] > 50 and duck["validation_s"] > 0
    assert results["rows"]["dimtrade"] == 1305 and len(duck["slowest"]) == 10
    assert "| duckdb |" in (out / "bench-audit.md").read_text()
