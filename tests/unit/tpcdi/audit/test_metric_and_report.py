"""Clause 7's arithmetic, and the run report (text, JSON, PNG)."""

from __future__ import annotations

import datetime
import io
import json
from pathlib import Path

import pytest
from matplotlib.image import imread

from tests.unit.tpcdi.audit.tiny_dw import build
from tpcdi.audit.checks import run_audit
from tpcdi.audit.connection import WarehouseConnection
from tpcdi.audit.metric import (
    compute_metric,
    elapsed_times,
    metric_from_warehouse,
    round_up_tenth,
)
from tpcdi.audit.report import PhaseFigures, RunFigures, write_run_report


def test_sf3_figures_with_increments_under_the_1800_s_floor() -> None:
    m = compute_metric(4_539_962, 19_900, 19_855, eh=60.0, ei1=3.2, ei2=2.9)
    assert m.th == pytest.approx(4_539_962 / 60.0)
    assert m.ti1 == pytest.approx(19_900 / 1800) and m.ti2 == pytest.approx(19_855 / 1800)
    # Trunc(sqrt(75666.03 * 11.0306)) = Trunc(913.58)
    assert m.tpc_di_rps == 913


def test_increments_longer_than_1800_s_use_their_own_time() -> None:
    m = compute_metric(1000, 19_900, 19_855, eh=10.0, ei1=3600.0, ei2=2000.0)
    assert m.ti1 == pytest.approx(19_900 / 3600) and m.ti2 == pytest.approx(19_855 / 2000)
    # Min(TI1, TI2) = TI1 = 5.5278; Trunc(sqrt(100 * 5.5278)) = Trunc(23.51)
    assert m.tpc_di_rps == 23
    assert "Trunc(GeoMean(TH, Min(TI1, TI2))) = 23" in m.explain()


def test_timings_round_up_to_a_tenth() -> None:
    assert round_up_tenth(0.01) == 0.1
    assert round_up_tenth(2.0) == 2.0
    assert round_up_tenth(2.04) == 2.1
    t = datetime.datetime(2024, 1, 1)
    ct = {0: t, 1: t + datetime.timedelta(seconds=61.23), 2: t + datetime.timedelta(seconds=64.5)}
    ct[3] = ct[2] + datetime.timedelta(milliseconds=2001)
    assert elapsed_times(ct) == (61.3, 3.3, 2.1)
    with pytest.raises(ValueError, match=r"batch\(es\) \[3\]"):
        elapsed_times({k: v for k, v in ct.items() if k != 3})
    with pytest.raises(ValueError, match="EH"):
        compute_metric(1, 1, 1, 0.0, 1.0, 1.0)


def test_metric_from_the_pcr_rows(tmp_path: Path) -> None:
    conn = WarehouseConnection.duckdb(":memory:")
    build(conn, tmp_path / "keys")
    m = metric_from_warehouse(conn, rh=3600, ri1=1800, ri2=3600)
    assert (m.eh, m.ei1, m.ei2) == (10.0, 10.0, 10.0)
    # TH = 360, TI1 = 1, TI2 = 2 -> Trunc(sqrt(360)) = 18
    assert m.tpc_di_rps == 18


def test_the_report_writes_json_text_and_a_png(tmp_path: Path) -> None:
    conn = WarehouseConnection.duckdb(":memory:")
    build(conn, tmp_path / "keys")
    audit = run_audit(conn)
    metric = compute_metric(4_539_962, 19_900, 19_855, 60.0, 3.2, 2.9)
    run = RunFigures(
        phases={
            "historical": PhaseFigures(60.0, 4_539_962),
            "incremental1": PhaseFigures(3.2, 19_900, freshness_s=2.5),
            "incremental2": PhaseFigures(2.9, 19_855, freshness_s=6.0),
        },
        peak_mem_mb=3412.5,
        sf=3,
        target="duckdb",
        metric=metric,
        audit=audit,
    )
    out = io.StringIO()
    document = write_run_report(
        run, json_path=tmp_path / "r" / "run.json", png_path=tmp_path / "r" / "run.png", stream=out
    )
    loaded = json.loads((tmp_path / "r" / "run.json").read_text())
    assert loaded == json.loads(json.dumps(document, default=str))
    assert loaded["phases"]["historical"] == {
        "seconds": 60.0, "rows": 4_539_962, "rows_per_second": 75666.0, "freshness_s": None,
    }  # fmt: skip
    assert loaded["phases"]["incremental2"]["freshness_s"] == 6.0
    assert loaded["phases"]["incremental1"]["rows"] == 19_900
    assert loaded["tpc_di_rps"] == 913
    assert loaded["peak_mem_mb"] == 3412.5
    assert loaded["audit"]["ok"] == audit.ok and loaded["audit"]["fail"] == 0
    assert len(loaded["audit"]["checks"]) == len(audit.checks)
    assert loaded["metric"]["th"] == pytest.approx(4_539_962 / 60.0)
    text = out.getvalue()
    assert "historical" in text and "4,539,962" in text and "TPC_DI_RPS = 913" in text
    assert f"audit: {audit.ok} OK, 0 FAIL" in text and "peak memory: 3,412 MB" in text
    png = tmp_path / "r" / "run.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    image = imread(png)
    assert image.shape[0] == 420 and image.shape[1] == 1000
    assert image.std() > 0.01  # not a blank canvas


def test_a_run_without_metric_or_audit_still_reports(tmp_path: Path) -> None:
    run = RunFigures(phases={"historical": PhaseFigures(0.0, 0)}, peak_mem_mb=1.0, sf=None,
                     target="postgres")  # fmt: skip
    out = io.StringIO()
    document = write_run_report(run, png_path=tmp_path / "x.png", stream=out)
    assert document["tpc_di_rps"] is None and document["audit"] is None
    assert "metric: not computed" in out.getvalue() and "audit: not run" in out.getvalue()
    assert (tmp_path / "x.png").stat().st_size > 1000
