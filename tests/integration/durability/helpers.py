"""Helpers of the durability tests: pushing numbered kv events over HTTP while keeping every
receipt, finding a state directory's Kafka JVM, reading what staging committed, and running a
fault campaign to what every campaign must show (:func:`passing_campaign`).

Each pushed event carries a unique ``seq`` (its identity across restarts); a receipt that came
back 2xx is an *acknowledged* offer. The checks: every acknowledged event is staged exactly once,
at a position inside its receipt's ``first_pos..last_pos``, and no two receipts share a position
or a logical batch id.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import httpx

from benchmarks.faults.campaign import CampaignOptions, run_campaign
from benchmarks.faults.report import render, write

#: The ``streamdi serve`` settings of the kill tests: partial batches close after 50 ms, and no
#: lateness limit (every acknowledged event must be applied, none dead-lettered as late).
SERVE_ENV = {"ENGINE__BATCH_TIMEOUT_MS": "50", "INGEST__ALLOWED_LATENESS_MS": ""}


@dataclass(frozen=True)
class Receipt:
    """An acknowledged offer: the ``seq`` of its events, in order, and what the service said."""

    seqs: tuple[int, ...]
    first_pos: int
    last_pos: int
    first_batch: int
    last_batch: int


@dataclass
class Pusher:
    """Threads that POST offers of ``size`` numbered events to ``url`` until stopped; every 2xx
    answer is kept in :attr:`receipts`, every other outcome counted in :attr:`failed`."""

    url: str
    size: int = 50
    threads: int = 3
    receipts: list[Receipt] = field(default_factory=list)
    failed: int = 0
    unanswered: set[int] = field(default_factory=set)
    _seq: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _workers: list[threading.Thread] = field(default_factory=list)

    def start_from(self, first_seq: int) -> None:
        self._seq = itertools.count(first_seq)

    def offer(self, client: httpx.Client) -> bool:
        with self._lock:
            seqs = tuple(next(self._seq) for _ in range(self.size))
        events = [{"op": "put", "key": s % 997, "value": s, "seq": s} for s in seqs]
        try:
            response = client.post("/streams/puts/events", json={"events": events})
        except httpx.HTTPError:
            response = None
        with self._lock:
            if response is None or response.status_code != 200:
                self.failed += 1
                self.unanswered.update(seqs)
                return False
            body = response.json()
            assert body["events"] == len(seqs) and body["rejects"] == 0, body
            self.receipts.append(
                Receipt(
                    seqs,
                    body["first_pos"],
                    body["last_pos"],
                    body["first_batch"],
                    body["last_batch"],
                )
            )
        return True

    def push(self, offers: int) -> None:
        """``offers`` offers from ``threads`` threads, waiting for all of them."""
        per = -(-offers // self.threads)

        def work() -> None:
            with httpx.Client(base_url=self.url, timeout=60) as client:
                for _ in range(per):
                    self.offer(client)

        workers = [threading.Thread(target=work) for _ in range(self.threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()

    def start(self) -> None:
        """Push from ``threads`` threads until :meth:`stop`."""
        self._stop.clear()

        def work() -> None:
            with httpx.Client(base_url=self.url, timeout=60) as client:
                while not self._stop.is_set():
                    if not self.offer(client):
                        time.sleep(0.05)

        self._workers = [threading.Thread(target=work) for _ in range(self.threads)]
        for w in self._workers:
            w.start()

    def stop(self) -> None:
        self._stop.set()
        for w in self._workers:
            w.join(90)
        self._workers = []

    @property
    def acknowledged(self) -> int:
        return sum(len(r.seqs) for r in self.receipts)


def kafka_jvms(state: Path) -> list[int]:
    """Pids of the live Kafka processes of ``state``'s embedded broker (by their command line)."""
    marker = str(state / "kafka" / "server.properties").encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
            status = (entry / "status").read_text()
        except OSError:
            continue
        if marker in command and "\nState:\tZ" not in status:
            found.append(int(entry.name))
    return found


def broker_pid(state: Path) -> int:
    return int(json.loads((state / "kafka" / "broker.json").read_text())["pid"])


def staged_log(staging: Path) -> list[tuple[int, int]]:
    """``(seq, _pos)`` of every row of the kv dataflow's sink ``log`` in staging."""
    con = duckdb.connect(str(staging), read_only=True)
    try:
        return [
            (int(s), int(p)) for s, p in con.execute("SELECT seq, _pos FROM outputs.log").fetchall()
        ]
    finally:
        con.close()


def check_exactly_once(receipts: list[Receipt], staged: list[tuple[int, int]]) -> None:
    """Every acknowledged event staged once, at a position of its receipt; no two receipts
    share a position or a batch id; no event staged twice (acknowledged or not)."""
    seqs = [s for s, _ in staged]
    twice = {s for s in seqs if seqs.count(s) > 1} if len(set(seqs)) != len(seqs) else set()
    assert not twice, f"{len(twice)} events staged twice, e.g. {sorted(twice)[:10]}"
    where = dict(staged)
    missing = [s for r in receipts for s in r.seqs if s not in where]
    assert not missing, (
        f"{len(missing)} acknowledged events are not staged, e.g. {missing[:10]} "
        f"(of {sum(len(r.seqs) for r in receipts)} acknowledged)"
    )
    for r in receipts:
        assert r.last_pos - r.first_pos + 1 == len(r.seqs), r
        positions = [where[s] for s in r.seqs]
        assert positions == list(range(r.first_pos, r.last_pos + 1)), (
            f"the events of receipt {r.first_pos}..{r.last_pos} are staged at other positions: "
            f"{positions[:5]}..."
        )
    by_pos = sorted(receipts, key=lambda r: r.first_pos)
    for a, b in itertools.pairwise(by_pos):
        assert a.last_pos < b.first_pos, f"receipts share positions: {a} and {b}"
        assert a.last_batch < b.first_batch, f"receipts share batch ids: {a} and {b}"


def wait_for(what: str, done: Callable[[], Any], timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = done()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def passing_campaign(options: CampaignOptions, tmp_path: Path) -> dict[str, Any]:
    """Run the fault campaign of ``options``, write its report under ``tmp_path / "report"``
    (printed too) and check what every campaign must show: no difference, no other finding, at
    least ten faults landed, a PNG timeline. Returns the report's JSON data."""
    result = run_campaign(options)
    paths = write(result, tmp_path / "report")
    data: dict[str, Any] = json.loads(paths["json"].read_text())
    report = render(data)
    print(report)
    assert not result.differences, report
    assert not result.findings, report
    assert data["passed"]
    assert data["faults"]["landed"] >= 10, report
    assert paths["png"].stat().st_size > 10_000
    return data
