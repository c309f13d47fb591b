"""The report of a run's incremental updates, day by day (:class:`~tpcdi.run.feed_record.
FeedRecord`): readable lines, and a PNG of four panels drawn off-screen (Agg canvas):

1. each day's freshness per warehouse (last event offered -> merged), with the target line;
2. where the time went over all days (the pipeline's time by where, the run's steps);
3. the staging file's size and the engine state's rows after each day;
4. the process tree's resident memory after each day.
"""

from __future__ import annotations

from pathlib import Path

from tpcdi.run.feed_record import FeedRecord

#: Issue 21's target: every day visible in every warehouse this long after its last event (p99,
#: paced at one day per 5 s).
DAY_FRESHNESS_TARGET_S = 2.0

_TARGET_COLORS = {"duckdb": "#4C72B0", "postgres": "#DD8452"}


def format_feed(feed: FeedRecord) -> str:
    """A few lines: days, events/s, freshness quantiles per target, where the time went, sizes,
    the sampled audits."""
    s = feed.summary()
    pace = f"one day every {feed.day_seconds:g} s" if feed.day_seconds else "as fast as possible"
    lines = [
        f"incremental updates: {s['days']} days ({pace}), {s['events']:,} events in "
        f"{s['seconds']:.1f} s: {s['events_per_s'] or 0:,.0f} events/s end to end, "
        f"{s['ingest_events_per_s'] or 0:,.0f} events/s offered -> staged"
        + (f"; {feed.late_days} days late" if feed.late_days else "")
    ]
    for target, q in s["freshness_s"].items():
        if q:
            lines.append(
                f"  freshness {target:<9} (last event offered -> merged): p50 {q['p50']:.3f} s, "
                f"p99 {q['p99']:.3f} s, max {q['max']:.3f} s"
            )
    total = sum(s["spent_s"].values()) or 1.0
    ranked = sorted(s["spent_s"].items(), key=lambda kv: -kv[1])
    lines.append(
        "  time by where: "
        + ", ".join(f"{k} {v:.1f} s ({100 * v / total:.0f}%)" for k, v in ranked[:10])
    )
    lines.append(
        f"  staging {s['staging_mb']['first']} -> {s['staging_mb']['last']} MB, state rows "
        f"{s['state_rows']['first']:,} -> {s['state_rows']['last']:,}, memory after a day "
        f"max {s['rss_mb_max']:,.0f} MB"
        if feed.days
        else "  no days"
    )
    if s["audited_days"]:
        verdict = "all OK" if s["audits_passed"] else "FAILED"
        lines.append(f"  audited after days {s['audited_days']}: {verdict}")
    return "\n".join(lines)


def draw_feed_chart(feed: FeedRecord, png_path: Path, title: str = "") -> None:
    """The four panels of the module docstring, as a PNG."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(12, 8), dpi=100)
    FigureCanvasAgg(figure)
    (fresh, spent), (sizes, memory) = figure.subplots(2, 2)
    days = [d.batch_id - 1 for d in feed.days]
    s = feed.summary()
    for target in feed.targets:
        values = feed.freshness(target)
        q = s["freshness_s"].get(target) or {}
        label = f"{target} (p99 {q.get('p99', 0):.2f} s)"
        fresh.plot(
            days[: len(values)],
            values,
            marker=".",
            linewidth=0.8,
            color=_TARGET_COLORS.get(target),
            label=label,
        )
    fresh.axhline(DAY_FRESHNESS_TARGET_S, color="#333333", linestyle="--", linewidth=1)
    fresh.set_xlabel("day")
    fresh.set_ylabel("s, last event offered -> merged")
    fresh.set_title("freshness per day and warehouse")
    fresh.set_ylim(bottom=0)
    fresh.legend(loc="best", fontsize=8)

    ranked = sorted(s["spent_s"].items(), key=lambda kv: kv[1])[-12:]
    bars = spent.barh([k for k, _ in ranked], [v for _, v in ranked], color="#55A868")
    spent.bar_label(bars, labels=[f"{v:.1f} s" for _, v in ranked], padding=3, fontsize=8)
    spent.set_xlabel("seconds over all days")
    spent.set_title("where the time went")
    spent.tick_params(axis="y", labelsize=8)
    spent.set_xlim(0, max((v for _, v in ranked), default=1.0) * 1.3 or 1.0)

    sizes.plot(days, [d.staging_bytes / 2**20 for d in feed.days], color="#4C72B0")
    sizes.set_xlabel("day")
    sizes.set_ylabel("staging on disk (MB)", color="#4C72B0")
    sizes.set_ylim(bottom=0)
    rows = sizes.twinx()
    rows.plot(days, [d.state_rows for d in feed.days], color="#C44E52")
    rows.set_ylabel("engine state rows", color="#C44E52")
    rows.set_ylim(bottom=0)
    sizes.set_title("staging size and state after each day")

    memory.plot(days, [d.rss_bytes / 2**20 for d in feed.days], color="#8172B3")
    memory.set_xlabel("day")
    memory.set_ylabel("MB")
    memory.set_ylim(bottom=0)
    memory.set_title("resident memory of the run (process tree)")

    pace = f"one day per {feed.day_seconds:g} s" if feed.day_seconds else "as fast as possible"
    figure.suptitle(
        f"{title}{len(feed.days)} days, {pace}: {feed.events:,} events, "
        f"{s['events_per_s'] or 0:,.0f} events/s end to end"
    )
    figure.tight_layout()
    png_path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(png_path, format="png")


def feed_chart_path(png_path: str | None) -> Path | None:
    """Where the feed's chart goes next to the run's chart: ``run.png`` -> ``run-days.png``."""
    if png_path is None:
        return None
    path = Path(png_path)
    return path.with_name(f"{path.stem}-days{path.suffix or '.png'}")
