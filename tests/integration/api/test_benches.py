"""The query-service benchmarks run end to end in their quick form and write what the issue asks
for (slow: excluded from the default run; the numbers come from ``streamdi bench``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli.main import main

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.kafka]


def test_bench_union_quick(tmp_path: Path) -> None:
    out = tmp_path / "union.json"
    assert main(["-q", "bench", "union", "--quick", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert {r["plan"] for r in data["results"]} == {"island", "migrate", "auto"}
    assert {r["target"] for r in data["results"]} == {"postgres", "duckdb"}
    assert all(r["seconds"] > 0 for r in data["results"])
    assert Path(data["plot"]).stat().st_size > 10_000


def test_bench_freshness_quick(tmp_path: Path) -> None:
    out = tmp_path / "freshness.json"
    assert main(["-q", "bench", "freshness", "--quick", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    kinds = {(r["visible_in"], r["target"]) for r in data["results"]}
    assert kinds == {(v, t) for v in ("staged", "warehouse") for t in ("duckdb", "postgres")}
    assert data["concurrent"]["clients"] == 16 and data["concurrent"]["queries"] > 0
