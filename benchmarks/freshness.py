"""``streamdi bench freshness``: how soon a produced event is visible, at a steady 100,000
events/s, and what 16 concurrent query clients see meanwhile.

A real ``streamdi serve`` (a child process: broker, pipeline, migration and API together) runs
the ``ticks`` dataflow: every event adds its amount to one of 100,000 ``accounts`` and sets the
``latest`` sequence number of its producer. This process pushes Arrow batches to
``POST /streams/ticks/events`` at a steady rate (5,000 events every 50 ms) and notes when each
batch left; pollers ask ``SELECT max(seq) FROM latest`` again and again:

* ``staged``: with ``include_staged`` (the island plan), the produce -> visible latency;
* ``warehouse``: with ``include_staged = false``, the produce -> visible-in-the-warehouse latency
  while the pipeline pushes every second (``MIGRATION__PUSH_MS=1000``).

A batch's latency is from just before its POST to the first answer that shows its last sequence
number (the answer's arrival: an upper bound). One run per warehouse (DuckDB, then PostgreSQL),
after a warm-up. During the DuckDB run, 16 clients then query at will for a while (the max above,
an aggregate over ``accounts``, point lookups) and their latencies and errors are reported. The
service runs with ``API__MAX_CONCURRENT_QUERIES=2``: on two cores, two queries at a time leave
the pipeline enough of the machine to keep ingesting (more queries at once answer sooner and
ingest less).

``--console``: before the 16 clients, the DuckDB run alternates windows with the console closed
and open in headless Chromium (:mod:`benchmarks.console_watch`), closed first, and reports per
kind the median (and spread) of the events/s produced and the staged p99, their ratios, and the
requests the open console made (proof it was watching). Watching is cheap when the open windows
keep at least 97% of the events/s and at most 103% of the staged p99.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from benchmarks.console_watch import (
    OpenConsole,
    chromium_path,
    console_requests,
    tree_cpu_seconds,
)
from cli.commands import EXIT_OK, Commands, write_json
from etl_dataflows import Dataflow, col, old
from ingest.broker import free_port
from ingest.records import to_ipc
from runtime import RunSpec, bind
from streamdi.errors import ConfigurationError
from streamdi.settings import StreamdiSettings

ACCOUNTS = 100_000
TICK_S = 0.05
#: Pause between two polls of one poller (the polls themselves load the service).
POLL_S = 0.05


def ticks_dataflow() -> Dataflow:
    flow = Dataflow("ticks")
    accounts = flow.table(
        "accounts",
        key={"account": "int64"},
        columns={"balance": "float64"},
        defaults={"balance": 0.0},
    )
    latest = flow.table("latest", key={"producer": "int64"}, columns={"seq": "int64"})
    flow.source(
        "ticks",
        schema={"producer": "int64", "seq": "int64", "account": "int64", "amount": "float64"},
    )
    t = flow.transact("apply", input="ticks")
    t.update(
        accounts, "account", set={"balance": old("balance") + col("amount")}, if_missing="insert"
    )
    t.write(latest, "producer", {"seq": col("seq")})
    return flow


def run() -> RunSpec:
    """The spec ``streamdi serve`` runs: ``ticks`` fed over HTTP."""
    return bind(ticks_dataflow())


class _Client:
    """A keep-alive HTTP client of the service (one per thread)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self._con = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def request(
        self, method: str, path: str, body: bytes | None = None, kind: str = "application/json"
    ) -> tuple[int, bytes]:
        for attempt in (0, 1):
            try:
                self._con.request(method, path, body=body, headers={"content-type": kind})
                response = self._con.getresponse()
                return response.status, response.read()
            except (http.client.HTTPException, OSError):
                self._con.close()
                self._con = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def query(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        status, data = self.request("POST", "/query", json.dumps(body).encode())
        return status, json.loads(data)

    def close(self) -> None:
        self._con.close()


class _Service:
    """``streamdi serve benchmarks.freshness:run`` as a child process."""

    def __init__(self, state: Path, targets: str) -> None:
        self.port = free_port()
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("STAGING__", "STREAMDI__", "MIGRATION__", "API__", "ENGINE__"))
        }
        env.update(
            STREAMDI__STATE_DIR=str(state),
            STREAMDI__LOG_LEVEL="WARNING",
            API__PORT=str(self.port),
            MIGRATION__TARGETS=targets,
            MIGRATION__PUSH_MS="1000",
            MIGRATION__PUSH_BATCHES="1000000000",
            MIGRATION__PUSH_ROWS="1000000000",
            MIGRATION__MERGE_MS="10000",
            # merges keep the warehouse's delta tables short, which every warehouse read scans
            MIGRATION__MERGE_ROWS="200000",
            ENGINE__BATCH_TIMEOUT_MS="100",
            INGEST__ALLOWED_LATENESS_MS="",
            API__MAX_CONCURRENT_QUERIES="2",
        )
        state.mkdir(parents=True, exist_ok=True)
        self.log = state / "serve.log"
        with self.log.open("ab") as handle:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "cli.main", "-q", "serve", "benchmarks.freshness:run"],
                env=env,
                stdout=handle,
                stderr=subprocess.STDOUT,
            )
        client = _Client(self.port)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"streamdi serve exited:\n{self.log.read_text()}")
            try:
                if client.request("GET", "/ready")[0] == 200:
                    client.close()
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"streamdi serve not ready:\n{self.log.read_text()}")

    def errors_logged(self, most: int = 40) -> str:
        """The service log's lines about errors (the last ``most``), for a failed run's message."""
        lines = self.log.read_text(errors="replace").splitlines()
        wanted = [
            line
            for line in lines
            if "error" in line.lower() or "exception" in line.lower() or line.startswith(" ")
        ]
        return "service log, errors:\n" + "\n".join(wanted[-most:])

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(180)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@dataclass
class _Marks:
    """Produced batches (last seq, time sent) and the latencies found for them."""

    sent: list[tuple[int, float]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, seq: int, at: float) -> None:
        with self.lock:
            self.sent.append((seq, at))

    def snapshot(self) -> list[tuple[int, float]]:
        with self.lock:
            return list(self.sent)


def _produce(port: int, rate: int, seconds: float, marks: _Marks, stop: threading.Event) -> int:
    client = _Client(port)
    per_tick = max(1, int(rate * TICK_S))
    rng = np.random.default_rng(3)
    seq = 0
    started = time.monotonic()
    tick = 0
    sent = 0
    path = "/streams/ticks/events"
    while not stop.is_set():
        due = started + tick * TICK_S
        now = time.monotonic()
        if due - now > 0:
            time.sleep(due - now)
        if time.monotonic() - started >= seconds:
            break
        seqs = np.arange(seq + 1, seq + per_tick + 1, dtype=np.int64)
        seq += per_tick
        at = time.time()
        table = pa.table(
            {
                "producer": np.zeros(per_tick, dtype=np.int64),
                "seq": seqs,
                "account": rng.integers(0, ACCOUNTS, per_tick),
                "amount": np.round(rng.random(per_tick) * 100, 2),
                "_ts": np.full(per_tick, int(at * 1e6), dtype=np.int64),
            }
        )
        payload = to_ipc(table)
        marks.add(seq, at)  # before the POST: a poll may see the batch before the POST returns
        status, body = client.request("POST", path, payload, "application/vnd.apache.arrow.stream")
        if status != 200:
            raise RuntimeError(f"push failed: {status} {body[:300]!r}")
        sent += per_tick
        tick += 1
    client.close()
    return sent


def _poll(
    port: int,
    body: dict[str, Any],
    marks: _Marks,
    stop: threading.Event,
    out: list[float],
    failures: list[str],
) -> None:
    """Poll ``body`` until ``stop``; a failed query ends the poller, noted in ``failures`` (the
    run then fails: its latencies would stop short)."""
    client = _Client(port)
    seen = 0  # marks before this index are resolved
    while not stop.is_set():
        status, answer = client.query(body)
        arrived = time.time()
        if status != 200:
            failures.append(f"{body['sql']!r} ({body.get('target')}): {status} {answer}")
            break
        value = answer["rows"][0][0] if answer["rows"] else None
        if value is None:
            continue
        sent = marks.snapshot()
        while seen < len(sent) and sent[seen][0] <= value:
            out.append((arrived - sent[seen][1]) * 1000)
            seen += 1
        time.sleep(POLL_S)
    client.close()


def _rate(sent: list[tuple[int, float]], first: int, last: int) -> float:
    """Events/s produced between marks ``first`` and ``last`` (sequence numbers count events)."""
    if last - 1 <= first or last > len(sent):
        return 0.0
    (seq0, at0), (seq1, at1) = sent[first], sent[last - 1]
    return (seq1 - seq0) / max(at1 - at0, 1e-9)


def _concurrent(port: int, clients: int, seconds: float) -> dict[str, Any]:
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def work(seed: int) -> None:
        rng = random.Random(seed)
        client = _Client(port)
        while time.monotonic() < stop:
            kind = rng.choice(["latest", "aggregate", "lookup"])
            sql = {
                "latest": "SELECT max(seq) FROM latest",
                "aggregate": "SELECT count(*), sum(balance) FROM accounts",
                "lookup": f"SELECT * FROM accounts WHERE account = {rng.randrange(ACCOUNTS)}",
            }[kind]
            started = time.perf_counter()
            try:
                status, answer = client.query({"sql": sql})
            except OSError as exc:
                status, answer = 0, {"error": str(exc)}
            took = (time.perf_counter() - started) * 1000
            with lock:
                if status == 200:
                    latencies.append(took)
                else:
                    errors.append(f"{status}: {str(answer)[:200]}")
        client.close()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    values = np.asarray(latencies) if latencies else np.asarray([0.0])
    return {
        "clients": clients,
        "seconds": seconds,
        "queries": len(latencies) + len(errors),
        "errors": len(errors),
        "error_samples": errors[:5],
        "queries_per_s": (len(latencies) + len(errors)) / seconds,
        "p50_ms": float(np.percentile(values, 50)),
        "p99_ms": float(np.percentile(values, 99)),
    }


@dataclass(frozen=True)
class Watching:
    """The console part of the run: ``rounds`` pairs of windows of ``window_s`` seconds, the
    console closed in the first of each pair and open (``binary``, headless) in the second, each
    after ``settle_s`` seconds (the browser starts or stops outside the measured window)."""

    binary: str
    rounds: int
    window_s: float
    settle_s: float = 3.0


def _watch(
    service: _Service, marks: _Marks, staged: list[float], watching: Watching
) -> dict[str, Any]:
    """Alternate closed and open windows (see :class:`Watching`); per window the events/s
    produced and the staged latencies resolved in it; the medians of each kind and their ratio."""
    client = _Client(service.port)
    url = f"http://127.0.0.1:{service.port}/"
    windows: list[dict[str, Any]] = []
    try:
        for index in range(2 * watching.rounds):
            is_open = index % 2 == 1
            console = OpenConsole(url, watching.binary) if is_open else None
            requests_before = console_requests(client.request("GET", "/metrics")[1].decode())
            if console is not None:
                console.open()
            try:
                time.sleep(watching.settle_s)
                mark0, sample0 = len(marks.snapshot()), len(staged)
                browser0 = tree_cpu_seconds(console.pid if console else None)
                service0 = tree_cpu_seconds(service.process.pid)
                time.sleep(watching.window_s)
                mark1, samples = len(marks.snapshot()), staged[sample0:]
                browser_cpu = tree_cpu_seconds(console.pid if console else None) - browser0
                service_cpu = tree_cpu_seconds(service.process.pid) - service0
            finally:
                if console is not None:
                    console.close()
            requests = console_requests(client.request("GET", "/metrics")[1].decode())
            values = np.asarray(samples) if samples else np.asarray([float("nan")])
            windows.append(
                {
                    "console": "open" if is_open else "closed",
                    "events_per_s": _rate(marks.snapshot(), mark0, mark1),
                    "staged_p50_ms": float(np.percentile(values, 50)),
                    "staged_p99_ms": float(np.percentile(values, 99)),
                    "samples": len(samples),
                    "console_requests": requests - requests_before,
                    # CPU seconds used in the window: the service (its broker included) and
                    # the browser, which on a user's desk would not share the service's cores
                    "service_cpu_s": service_cpu,
                    "browser_cpu_s": browser_cpu,
                }
            )
    finally:
        client.close()
    summary: dict[str, Any] = {
        "rounds": watching.rounds,
        "window_s": watching.window_s,
        "windows": windows,
    }
    for kind in ("closed", "open"):
        mine = [w for w in windows if w["console"] == kind]
        summary[kind] = {
            key: {
                "median": float(np.median([w[key] for w in mine])),
                "min": float(min(w[key] for w in mine)),
                "max": float(max(w[key] for w in mine)),
            }
            for key in (
                "events_per_s",
                "staged_p50_ms",
                "staged_p99_ms",
                "service_cpu_s",
                "browser_cpu_s",
            )
        }
    closed, opened = summary["closed"], summary["open"]
    summary["events_ratio"] = opened["events_per_s"]["median"] / max(
        closed["events_per_s"]["median"], 1e-9
    )
    summary["p99_ratio"] = opened["staged_p99_ms"]["median"] / max(
        closed["staged_p99_ms"]["median"], 1e-9
    )
    summary["within_3_percent"] = bool(
        summary["events_ratio"] >= 0.97 and summary["p99_ratio"] <= 1.03
    )
    return summary


def _run_target(
    target: str,
    root: Path,
    rate: int,
    seconds: float,
    warmup: float,
    clients: int | None,
    watching: Watching | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any] | None, dict[str, Any] | None]:
    service = _Service(root / target, target)
    try:
        marks = _Marks()
        stop = threading.Event()
        staged: list[float] = []
        warehouse: list[float] = []
        failures: list[str] = []
        pollers = [
            threading.Thread(
                target=_poll,
                args=(
                    service.port,
                    {"sql": "SELECT max(seq) FROM latest", "plan": "island", "target": target},
                    marks,
                    stop,
                    staged,
                    failures,
                ),
            ),
            threading.Thread(
                target=_poll,
                args=(
                    service.port,
                    {
                        "sql": "SELECT max(seq) FROM latest",
                        "include_staged": False,
                        "target": target,
                    },
                    marks,
                    stop,
                    warehouse,
                    failures,
                ),
            ),
        ]
        for p in pollers:
            p.start()
        produced: dict[str, int] = {}
        watch_s = 2 * watching.rounds * (watching.window_s + watching.settle_s) if watching else 0
        total = warmup + seconds + watch_s + (seconds if clients else 0)

        def produce() -> None:
            produced["events"] = _produce(service.port, rate, total, marks, stop)

        producer = threading.Thread(target=produce)
        producer.start()
        time.sleep(warmup)
        window = [len(marks.snapshot())]
        staged_from, warehouse_from = len(staged), len(warehouse)
        time.sleep(seconds)
        staged_samples = staged[staged_from:]
        warehouse_samples = warehouse[warehouse_from:]
        window.append(len(marks.snapshot()))
        watched = _watch(service, marks, staged, watching) if watching else None
        window.append(len(marks.snapshot()))
        concurrent = _concurrent(service.port, clients, seconds) if clients else None
        window.append(len(marks.snapshot()))
        producer.join()
        time.sleep(2.5)  # the last batches become visible
        stop.set()
        for p in pollers:
            p.join(60)
        if failures:
            raise RuntimeError(
                f"a poller's query failed: {failures[0]}\n" + service.errors_logged()
            )
        sent = marks.snapshot()
        events_per_s = _rate(sent, window[0], window[1])
        results = []
        for where, samples in (("staged", staged_samples), ("warehouse", warehouse_samples)):
            values = np.asarray(samples) if samples else np.asarray([float("nan")])
            results.append(
                {
                    "visible_in": where,
                    "target": target,
                    "events_per_s": events_per_s,
                    "p50_ms": float(np.percentile(values, 50)),
                    "p99_ms": float(np.percentile(values, 99)),
                    "max_ms": float(np.max(values)),
                    "samples": len(samples),
                }
            )
        if concurrent is not None:
            concurrent["events_per_s"] = _rate(sent, window[2], window[3])
            concurrent["target"] = target
        return results, concurrent, watched
    finally:
        service.stop()


def run_bench(
    settings: StreamdiSettings, *, quick: bool, watching: Watching | None = None
) -> dict[str, Any]:
    rate = 100_000
    seconds, warmup = (5.0, 3.0) if quick else (20.0, 5.0)
    clients = 16
    results: list[dict[str, Any]] = []
    concurrent: dict[str, Any] | None = None
    watched: dict[str, Any] | None = None
    with tempfile.TemporaryDirectory(prefix="streamdi-bench-freshness-") as tmp:
        root = Path(tmp)
        for target in ("duckdb", "postgres"):
            first = target == "duckdb"
            found, load, seen = _run_target(
                target,
                root,
                rate,
                seconds,
                warmup,
                clients if first else None,
                watching if first else None,
            )
            results.extend(found)
            concurrent = concurrent or load
            watched = watched or seen
    return {
        "bench": "freshness",
        "quick": quick,
        "target_events_per_s": rate,
        "push_every_ms": 1000,
        "seconds_measured": seconds,
        "results": results,
        "concurrent": concurrent,
        "console": watched,
        "load_average": list(os.getloadavg()),
    }


def _print(data: dict[str, Any]) -> None:
    print(
        f"freshness: {data['target_events_per_s']:,} events/s offered over HTTP, "
        f"{data['seconds_measured']:.0f} s measured per warehouse, push every "
        f"{data['push_every_ms']} ms"
    )
    print(
        f"{'visible in':<12}{'target':<10}{'events/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}"
    )
    for r in data["results"]:
        print(
            f"{r['visible_in']:<12}{r['target']:<10}{r['events_per_s']:>10,.0f}"
            f"{r['p50_ms']:>9.0f}{r['p99_ms']:>9.0f}{r['max_ms']:>9.0f}"
        )
    c = data.get("concurrent")
    if c:
        print(
            f"{c['clients']} clients querying while ingesting {c['events_per_s']:,.0f} events/s "
            f"({c['target']}): {c['queries']:,} queries, {c['queries_per_s']:.0f}/s, p50 "
            f"{c['p50_ms']:.0f} ms, p99 {c['p99_ms']:.0f} ms, {c['errors']} errors"
        )
    w = data.get("console")
    if w:
        print(
            f"console ({w['rounds']} closed/open pairs of {w['window_s']:.0f} s, duckdb): "
            "median (min-max)"
        )
        for kind in ("closed", "open"):
            k = w[kind]
            print(
                f"  {kind:<7}{_spread(k['events_per_s'], ',.0f')} events/s, staged p99 "
                f"{_spread(k['staged_p99_ms'], '.0f')} ms; CPU s per window: service "
                f"{_spread(k['service_cpu_s'], '.1f')}, "
                f"browser {_spread(k['browser_cpu_s'], '.1f')}"
            )
        requests = sum(x["console_requests"] for x in w["windows"] if x["console"] == "open")
        verdict = "within 3%" if w["within_3_percent"] else "NOT within 3%"
        print(
            f"  open/closed: events/s {w['events_ratio']:.3f}, staged p99 {w['p99_ratio']:.3f} "
            f"({verdict}); the open console made {requests} requests"
        )
    load = data.get("load_average")
    if load:
        print(f"load average after the run: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


def _spread(figure: dict[str, float], spec: str) -> str:
    return (
        f"{format(figure['median'], spec)} ({format(figure['min'], spec)}-"
        f"{format(figure['max'], spec)})"
    )


def _watching(args: argparse.Namespace) -> Watching | None:
    """The console part asked for, or None; fails when no browser can show the console."""
    if not args.console:
        return None
    binary = chromium_path()
    if binary is None:
        raise ConfigurationError(
            [
                (
                    "--console",
                    "Chromium to keep the console open: install Debian's chromium package "
                    "(make test does where it can) or set STREAMDI_CHROMIUM to a Chromium binary",
                )
            ]
        )
    rounds, window = (2, 4.0) if args.quick else (args.console_rounds, 10.0)
    return Watching(binary, rounds, window)


def _bench(args: argparse.Namespace, settings: StreamdiSettings) -> int:
    data = run_bench(settings, quick=args.quick, watching=_watching(args))
    _print(data)
    if args.json:
        write_json(data, args.json)
    return EXIT_OK


def register(benches: Commands) -> None:
    bench = benches.add_parser(
        "freshness",
        help="produce -> visible latency (staged and in each warehouse) at 100,000 events/s, "
        "and 16 concurrent query clients",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bench.add_argument("--quick", action="store_true", help="5 s per warehouse")
    bench.add_argument(
        "--console",
        action="store_true",
        help="also measure with the console open in headless Chromium: closed and open windows "
        "alternate in the DuckDB run, and the JSON records both",
    )
    bench.add_argument(
        "--console-rounds",
        type=int,
        default=4,
        metavar="N",
        help="closed/open window pairs of 10 s for --console (2 of 4 s with --quick)",
    )
    bench.add_argument(
        "--json", metavar="PATH", help="also write the results as JSON ('-': stdout)"
    )
    bench.set_defaults(handler=_bench)
