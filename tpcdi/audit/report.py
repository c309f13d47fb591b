"""The report of a TPC-DI run: readable text, JSON and a PNG chart.

The run's figures come in as :class:`RunFigures` (phase name -> seconds, rows, freshness; peak
memory; scale factor; target; the metric and the audit result). The JSON holds at least
``phases.<phase>.{seconds,rows}`` for ``historical``, ``incremental1``, ``incremental2``,
``audit.{ok,fail,checks}``, ``tpc_di_rps`` and ``peak_mem_mb``. The chart (matplotlib, drawn
off-screen with the Agg canvas, no display needed) shows the phases' wall times and each
incremental update's freshness against its target.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from tpcdi.audit.checks import AuditResult
from tpcdi.audit.metric import Metric

PHASES: tuple[str, ...] = ("historical", "incremental1", "incremental2")
#: Issue 8's target: an incremental update visible in the warehouse this long after its files.
FRESHNESS_TARGET_S = 5.0


@dataclass(frozen=True)
class PhaseFigures:
    """One phase: wall time, source rows processed, and (incremental updates) the time from its
    files being offered to its data being visible in the warehouse."""

    seconds: float
    rows: int
    freshness_s: float | None = None

    def as_dict(self) -> dict[str, Any]:
        rate = self.rows / self.seconds if self.seconds > 0 else None
        return {
            "seconds": round(self.seconds, 3),
            "rows": self.rows,
            "rows_per_second": round(rate, 1) if rate is not None else None,
            "freshness_s": round(self.freshness_s, 3) if self.freshness_s is not None else None,
        }


@dataclass(frozen=True)
class RunFigures:
    """What the report needs of a run (the orchestration's record adapts to this)."""

    phases: Mapping[str, PhaseFigures]
    peak_mem_mb: float
    sf: float | None
    target: str
    metric: Metric | None = None
    audit: AuditResult | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


def run_report_dict(run: RunFigures, png_path: Path | None = None) -> dict[str, Any]:
    """The JSON document of a run."""
    audit = run.audit.as_dict() if run.audit is not None else None
    return {
        "sf": run.sf,
        "target": run.target,
        "phases": {name: figures.as_dict() for name, figures in run.phases.items()},
        "metric": run.metric.as_dict() if run.metric is not None else None,
        "tpc_di_rps": run.metric.tpc_di_rps if run.metric is not None else None,
        "audit": audit,
        "peak_mem_mb": round(run.peak_mem_mb, 1),
        "chart": str(png_path) if png_path is not None else None,
        **dict(run.extra),
    }


def format_run_report(run: RunFigures) -> str:
    """The readable report: phases, metric, audit summary (failures listed), peak memory."""
    sf = f"SF {run.sf:g}" if run.sf is not None else "SF ?"
    lines = [f"TPC-DI run - {sf}, target {run.target}", ""]
    lines.append(f"{'phase':<14}{'seconds':>10}{'rows':>14}{'rows/s':>12}{'freshness':>12}")
    for name, p in run.phases.items():
        rate = f"{p.rows / p.seconds:,.0f}" if p.seconds > 0 else "-"
        fresh = f"{p.freshness_s:.2f} s" if p.freshness_s is not None else "-"
        lines.append(f"{name:<14}{p.seconds:>10.1f}{p.rows:>14,}{rate:>12}{fresh:>12}")
    lines.append("")
    if run.metric is not None:
        m = run.metric
        lines.append(
            f"metric (clause 7.5/7.6): EH {m.eh:.1f} s, EI1 {m.ei1:.1f} s, EI2 {m.ei2:.1f} s"
        )
        lines.append(f"  {m.explain()}")
        lines.append(f"  TPC_DI_RPS = {m.tpc_di_rps}")
    else:
        lines.append("metric: not computed (no phase completion records)")
    if run.audit is not None:
        verdict = "every check OK" if run.audit.passed else f"{run.audit.fail} FAILED"
        lines.append(f"audit: {run.audit.ok} OK, {run.audit.fail} FAIL - {verdict}")
        for check in run.audit.failed():
            lines.append(f"  FAIL {check.name}: {check.detail}")
    else:
        lines.append("audit: not run")
    lines.append(f"peak memory: {run.peak_mem_mb:,.0f} MB")
    return "\n".join(lines)


def draw_chart(run: RunFigures, png_path: Path) -> None:
    """Phase wall times and incremental freshness, as a PNG (Agg canvas, no display)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(10, 4.2), dpi=100)
    FigureCanvasAgg(figure)
    times, fresh = figure.subplots(1, 2)
    names = list(run.phases)
    seconds = [run.phases[n].seconds for n in names]
    bars = times.barh(names, seconds, color="#4C72B0")
    times.bar_label(bars, labels=[f"{s:.1f} s" for s in seconds], padding=3)
    times.invert_yaxis()
    times.set_xlabel("wall time (s)")
    times.set_title("phase wall time")
    times.set_xlim(0, max(seconds, default=1.0) * 1.25 or 1.0)
    updates = [n for n in names if run.phases[n].freshness_s is not None]
    values = [float(run.phases[n].freshness_s or 0.0) for n in updates]
    if updates:
        colors = ["#55A868" if v <= FRESHNESS_TARGET_S else "#C44E52" for v in values]
        fbars = fresh.bar(updates, values, color=colors)
        fresh.bar_label(fbars, labels=[f"{v:.2f} s" for v in values], padding=3)
    fresh.axhline(FRESHNESS_TARGET_S, color="#333333", linestyle="--", linewidth=1)
    fresh.text(0.02, FRESHNESS_TARGET_S, f" target {FRESHNESS_TARGET_S:g} s", va="bottom",
               transform=fresh.get_yaxis_transform())  # fmt: skip
    fresh.set_ylim(0, max([*values, FRESHNESS_TARGET_S]) * 1.3)
    fresh.set_ylabel("seconds until visible in the warehouse")
    fresh.set_title("incremental update freshness")
    rps = f"TPC_DI_RPS {run.metric.tpc_di_rps}" if run.metric is not None else "no metric"
    audit = (
        f"audit {run.audit.ok} OK / {run.audit.fail} FAIL" if run.audit is not None else "no audit"
    )
    sf = f"SF {run.sf:g}" if run.sf is not None else "SF ?"
    figure.suptitle(f"TPC-DI {sf} on {run.target}: {rps}, {audit}, peak {run.peak_mem_mb:,.0f} MB")
    figure.tight_layout()
    png_path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(png_path, format="png")


def write_run_report(
    run: RunFigures,
    *,
    json_path: Path | None = None,
    png_path: Path | None = None,
    stream: TextIO | None = None,
) -> dict[str, Any]:
    """Print the readable report to ``stream`` (default stdout), write the JSON to ``json_path``
    and the chart to ``png_path`` (each if given); returns the JSON document."""
    if png_path is not None:
        draw_chart(run, Path(png_path))
    document = run_report_dict(run, Path(png_path) if png_path is not None else None)
    if json_path is not None:
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(json_path).write_text(
            json.dumps(document, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8"
        )
    out = stream if stream is not None else sys.stdout
    out.write(format_run_report(run) + "\n")
    if png_path is not None:
        out.write(f"chart: {png_path}\n")
    return document
