"""The campaign's report: JSON (the data), Markdown (to read) and a PNG timeline.

The timeline plots the faulted run: staging's watermark and each warehouse's acknowledged
batch over time, every fault as a band from its start to its end (colour by kind; a cross when
it did not land) and its recovery as a bar after it. Gaps in the lines are the moments serve
did not answer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.faults.campaign import CampaignResult


def _fmt(value: float | None, unit: str = " s") -> str:
    return "-" if value is None else f"{value:.2f}{unit}"


def render(data: dict[str, Any]) -> str:
    """The Markdown report of :meth:`CampaignResult.to_json`'s ``data``."""
    verdict = "PASSED: no difference" if data["passed"] else "FAILED"
    machine = data["machine"]
    lines = [
        f"# Fault campaign ({data['workload']}{', quick' if data['quick'] else ''}): {verdict}",
        "",
        f"`{data['command']}`",
        "",
        f"{data['offers']:,} offers of {data['offer_size']} events ({data['events']:,} events) "
        f"at up to {data['rate']:g} offers/s; {data['faults']['landed']} faults landed of "
        f"{data['faults']['scheduled']} scheduled; campaign {data['seconds']:.0f} s "
        f"(reference run {data['runs']['reference']['seconds']:.0f} s, faulted run "
        f"{data['runs']['faulted']['seconds']:.0f} s) on {machine['cpus']} cores, load average "
        f"{machine['load_before'][0]:.2f} before and {machine['load_after'][0]:.2f} after.",
        "",
        f"Recovery (from the end of a fault until the first offer acknowledged after it is in "
        f"staging and in both warehouses): p50 {_fmt(data['recovery']['p50_s'])}, p99 "
        f"{_fmt(data['recovery']['p99_s'])}, max {_fmt(data['recovery']['max_s'])} over "
        f"{data['recovery']['count']} faults.",
        "",
        "| fault kind | scheduled | landed | recovery p50 | recovery p99 |",
        "|---|---:|---:|---:|---:|",
    ]
    for kind, entry in data["faults"]["by_kind"].items():
        lines.append(
            f"| {kind} | {entry['scheduled']} | {entry['landed']} | "
            f"{_fmt(entry['recovery_p50_s'])} | "
            f"{_fmt(entry['recovery_p99_s'])} |"
        )
    inputs = ", ".join(f"{k} {v}" for k, v in sorted(data["input_faults"].items()))
    faulted = data["runs"]["faulted"]
    if data.get("workload") == "tpcdi":
        audits = "; ".join(
            f"{target} {a['ok']} OK, {a['fail']} FAIL" for target, a in data["audits"].items()
        )
        lines += [
            "",
            f"TPC-DI SF {data['sf']:g}, Batch2 and Batch3 into both warehouses; the historical "
            f"load both runs start from took {data['prepare_seconds']:.0f} s (in the campaign's "
            f"time, in neither run's). The faulted run's audit: {audits or 'none'}; each "
            "warehouse's audit is compared with the reference's check by check.",
        ]
    else:
        lines += ["", f"Input faults in both runs (offers): {inputs or 'none'}."]
    lines += [
        "",
        f"Faulted run: serve started {faulted['serve_starts']} times, PostgreSQL restarted "
        f"{faulted['postgres_restarts']} times; {faulted['push_attempts']:,} push attempts for "
        f"{data['offers']:,} offers, {faulted['push_conflicts']} retries found already taken "
        f"(409); answers retried, by status (0: none): "
        f"{faulted['push_retries_by_status'] or '-'}"
        + (
            ""
            if data.get("workload") == "tpcdi"
            else f"; reprocess exit codes {faulted['reprocess_codes'] or '-'}"
        )
        + ".",
        "",
        f"## Compared: {data['compared']['relations']} relations, "
        f"{data['compared']['rows']:,} rows",
        "",
    ]
    if data["differences"]:
        lines += ["| relation | only in the reference | only in the faulted run | note |"]
        lines += ["|---|---:|---:|---|"]
        for d in data["differences"]:
            lines.append(f"| {d['relation']} | {d['missing']} | {d['extra']} | {d['note']} |")
        for d in data["differences"]:
            lines += ["", f"### {d['relation']}", ""]
            for label, rows in (
                ("reference only", d["missing_examples"]),
                ("faulted only", d["extra_examples"]),
            ):
                for row in rows:
                    lines.append(f"- {label}: `{row}`")
    else:
        lines.append("No difference: every row of every relation is the reference's.")
    if data["findings"]:
        lines += ["", "## Findings", ""] + [f"- {f}" for f in data["findings"]]
    if data["unplanned_exits"]:
        lines += ["", "## Unplanned serve exits", ""]
        lines += [
            f"- at {e['at_s']:.1f} s: code {e['code']} (armed {e['armed']})"
            for e in data["unplanned_exits"]
        ]
    lines += [
        "",
        "## Faults",
        "",
        "| # | kind | point | offer | at | landed | recovery | what happened |",
        "|---:|---|---|---:|---:|---|---:|---|",
    ]
    for i in data["injections"]:
        lines.append(
            f"| {i['index']} | {i['kind']} | {i['point'] or ''} | {i['at_offer']} | "
            f"{i['started_s']:.1f} s | {'yes' if i['landed'] else 'no'} | "
            f"{_fmt(i['recovery_s'])} | {i['detail']} |"
        )
    per = data["compared"]["per_relation"]
    lines += ["", "## Relations compared", "", "| relation | rows |", "|---|---:|"]
    lines += [f"| {name} | {rows:,} |" for name, rows in per.items()]
    return "\n".join(lines) + "\n"


def plot(result: CampaignResult, path: Path) -> None:
    """The PNG timeline (see the module docstring)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run = result.faulted
    t0 = run.started
    fig, ax = plt.subplots(figsize=(15, 5.5))
    samples = run.samples

    def series(values: list[tuple[float, float]]) -> tuple[list[float], list[float]]:
        xs: list[float] = []
        ys: list[float] = []
        last = None
        for x, y in values:
            if last is not None and x - last > 1.0:  # serve did not answer: a gap
                xs.append(float("nan"))
                ys.append(float("nan"))
            xs.append(x)
            ys.append(y)
            last = x
        return xs, ys

    ax.plot(*series([(s.at - t0, s.watermark) for s in samples]), label="staging watermark")
    targets = sorted({t for s in samples for t in s.acked})
    for target in targets:
        ax.plot(
            *series([(s.at - t0, s.acked.get(target, 0)) for s in samples]),
            label=f"{target} acknowledged",
            linewidth=1.0,
        )
    kinds = sorted({i.fault.kind for i in run.injections})
    cmap = plt.get_cmap("tab20")
    colours = {k: cmap(i % 20) for i, k in enumerate(kinds)}
    top = max((s.watermark for s in samples), default=1)
    recovery = {r.fault: r.seconds for r in run.recoveries}
    seen: set[str] = set()
    for injection in run.injections:
        kind = injection.fault.kind
        start, end = injection.started - t0, injection.ended - t0
        ax.axvspan(
            start,
            max(end, start + 0.3),
            color=colours[kind],
            alpha=0.35,
            label=kind if kind not in seen else None,
        )
        seen.add(kind)
        if not injection.landed:
            ax.plot([start], [top * 1.02], marker="x", color="black")
        seconds = recovery.get(injection.fault.index)
        if seconds is not None:
            ax.plot([end, end + seconds], [top * 1.04] * 2, color=colours[kind], linewidth=3)
    ax.set_xlabel("seconds since the faulted run started")
    ax.set_ylabel("batch id")
    verdict = "no difference" if result.passed else f"{len(result.differences)} differences"
    ax.set_title(
        f"Fault campaign, ledger: {result.landed()} faults landed, {verdict} "
        f"(bars above: recovery after each fault)"
    )
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(result: CampaignResult, out: Path, name: str = "bench-faults") -> dict[str, Path]:
    """Write ``<out>/<name>.json``, ``.md`` and ``.png``; the paths."""
    out.mkdir(parents=True, exist_ok=True)
    data = result.to_json()
    paths = {"json": out / f"{name}.json", "md": out / f"{name}.md", "png": out / f"{name}.png"}
    paths["json"].write_text(json.dumps(data, indent=1, default=str) + "\n")
    paths["md"].write_text(render(data))
    plot(result, paths["png"])
    return paths
