"""``streamdi bench broker``: how long the embedded Apache Kafka takes to be ready, and its memory.

Each repetition uses a fresh state directory and times, from the call to the answer of a Kafka
metadata request: the **first start** (format the log, then start) and a **restart** on the same
log (what every later start of streamdi costs). The jars are fetched before the first repetition
and not timed. It reports the median and the spread (min..max) of each, the broker's resident
memory after the restart (idle, one topic), and the machine's load average beside them (the
machine is shared: read the figures with it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from cli.commands import EXIT_OK, Commands, write_json
from ingest.broker import EmbeddedKafka, ensure_topics
from ingest.kafka_dist import KAFKA_VERSION, kafka_jars
from streamdi.settings import StreamdiSettings


def _one(settings: StreamdiSettings, work: Path) -> dict[str, float]:
    kafka = settings.kafka
    started = time.perf_counter()
    broker = EmbeddedKafka(work, kafka)
    broker.start()
    first = time.perf_counter() - started
    ensure_topics(kafka, broker.bootstrap_servers, {"bench.broker": 1})
    broker.stop()
    started = time.perf_counter()
    again = EmbeddedKafka(work, kafka)
    again.start()
    restart = time.perf_counter() - started
    try:
        assert again.pid is not None
        rss = psutil.Process(again.pid).memory_info().rss / 2**20
    finally:
        again.stop()
    return {"first_start_s": first, "restart_s": restart, "rss_mb": rss}


def _summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def run_bench(settings: StreamdiSettings, repeat: int) -> dict[str, Any]:
    kafka_jars(settings.kafka)  # fetched once, not timed
    load_before = os.getloadavg()
    runs = []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="streamdi-bench-broker-") as tmp:
            runs.append(_one(settings, Path(tmp)))
    return {
        "benchmark": "broker",
        "broker": f"Apache Kafka {KAFKA_VERSION} (embedded)",
        "heap_mb": settings.kafka.embedded_heap_mb,
        "repeat": repeat,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "runs": runs,
        "first_start_s": _summary([r["first_start_s"] for r in runs]),
        "restart_s": _summary([r["restart_s"] for r in runs]),
        "rss_mb": _summary([r["rss_mb"] for r in runs]),
    }


def render(report: dict[str, Any]) -> str:
    def line(name: str, key: str, unit: str) -> str:
        s = report[key]
        return f"{name:<12} {s['median']:>8.2f} {unit}   ({s['min']:.2f}..{s['max']:.2f})"

    load = report["load_average_before"]
    return "\n".join(
        [
            f"streamdi bench broker — {report['broker']}, heap {report['heap_mb']} MiB, "
            f"{report['repeat']} runs (median, min..max); load average {load[0]:.2f} "
            f"{load[1]:.2f} {load[2]:.2f}",
            line("first start", "first_start_s", "s"),
            line("restart", "restart_s", "s"),
            line("idle RSS", "rss_mb", "MB"),
        ]
    )


def _bench(args: argparse.Namespace, settings: StreamdiSettings) -> int:
    report = run_bench(settings, args.repeat)
    if args.json:
        write_json(report, args.json)
    if args.json != "-":
        print(render(report))
    return EXIT_OK


def register(benches: Commands) -> None:
    bench = benches.add_parser(
        "broker",
        help="the embedded Apache Kafka: time to ready (first start, restart) and memory",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bench.add_argument("--repeat", type=int, default=5, help="repetitions (default 5)")
    bench.add_argument(
        "--json", metavar="PATH", help="also write the results as JSON ('-': stdout)"
    )
    bench.set_defaults(handler=_bench)
