"""The ledger workload of the fault campaign: the ledger dataflow served by ``streamdi serve``
and fed over HTTP, one conditional offer at a time.

The input is a pure function of the seed (:func:`ledger_offers`): ``offers`` offers of ``size``
events of :func:`ingest.ledger.ledger_events` (opens, deposits, transfers, adjustments, audits;
some transfers abort, amount 13 fails the bonus function), each event with its event time
``_ts`` (2025-01-01 plus 1 ms per event) and a few input faults, the same in every run:

* malformed events (an amount that is not a number): dead letters at the door;
* event-time clock jumps: an offer whose clock jumped back 10 minutes (its events are late:
  dead letters), 20 seconds ahead (the stream's high mark moves; later events stay within the
  allowed lateness), or two centuries ahead (out of range: dead letters, the mark never moves).

Each offer is one logical batch (the push source punctuates it) and one engine batch (the
consumer cuts at a punctuation), so offer ``k`` is staging batch ``k + 1`` (plus the reprocess
cut-over batches before it): the batch ids, and everything keyed by them, are the same in
every run. The :class:`Pusher` offers them in order, each with ``expect_pos`` (its first
event's position), and retries an offer whose answer it did not get (a killed service, a
timeout, a 503) with the same ``expect_pos`` until it learns its fate: taken now (200), or
taken by an earlier attempt (409 with ``next_pos`` just past it). Nothing is offered twice.
"""

from __future__ import annotations

import http.client
import json
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from etl_dataflows.testing import ledger_dataflow
from ingest.ledger import ledger_events
from runtime import RunSpec, bind

#: 2025-01-01T00:00:00Z in µs: the workload's event time starts here (well inside the bounds).
BASE_US = 1_735_689_600_000_000
STREAM = "txns"
JSON = "application/json"
ARROW_STREAM = "application/vnd.apache.arrow.stream"
#: The tables and sinks ``streamdi upgrade reprocess`` recomputes in the campaign.
REPROCESSED = ("accounts", "book", "balances")
#: Event-time jumps an offer may carry (µs), by name.
CLOCK_JUMPS = {
    "back_10min": -600_000_000,
    "ahead_20s": 20_000_000,
    "ahead_200y": 200 * 365 * 86_400_000_000,
}


def run() -> RunSpec:
    """The spec ``streamdi serve`` runs: the ledger dataflow, ``txns`` pushed over HTTP."""
    return bind(ledger_dataflow())


@dataclass(frozen=True)
class Offer:
    """Offer ``index``: its events (JSON objects, or an Arrow table sent as an Arrow IPC stream)
    from position ``first_pos``; ``note`` names its input fault, if any."""

    index: int
    first_pos: int
    events: list[dict[str, Any]] | pa.Table
    note: str | None = None

    def body(self) -> tuple[bytes, str]:
        """The HTTP body of the offer and its content type."""
        if isinstance(self.events, pa.Table):
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, self.events.schema) as writer:
                writer.write_table(self.events)
            return sink.getvalue().to_pybytes(), ARROW_STREAM
        return json.dumps({"events": self.events}).encode(), "application/json"


def ledger_offers(
    seed: int,
    offers: int,
    size: int,
    *,
    keys: int = 500,
    jumps: int = 4,
    malformed: int = 3,
) -> list[Offer]:
    """The campaign's input (see the module docstring): deterministic in its arguments."""
    table = ledger_events(offers * size, keys=keys, seed=seed)
    rows = table.to_pylist()
    rng = random.Random(seed)
    # input faults land after the accounts are opened and before the last offers
    lo = min(offers - 1, keys // size + 2)
    chosen = rng.sample(range(lo, max(lo + 1, offers - 2)), min(jumps + malformed, offers - lo - 2))
    notes: dict[int, str] = {}
    ahead = 0
    for i, k in enumerate(chosen):
        if i < jumps:
            name = rng.choice(tuple(CLOCK_JUMPS))
            if name == "ahead_20s":
                if ahead >= 2:  # two at most: later events stay within the allowed lateness
                    name = "back_10min"
                ahead += 1
            notes[k] = name
        else:
            notes[k] = "malformed"
    out = []
    for k in range(offers):
        events = []
        note = notes.get(k)
        shift = CLOCK_JUMPS.get(note or "", 0)
        for j, row in enumerate(rows[k * size : (k + 1) * size]):
            event = {c: row[c] for c in ("kind", "src", "dst", "amount", "amount2")}
            event["_ts"] = BASE_US + int(row["ts"]) + shift
            if note == "malformed" and j % 7 == 3:
                event["amount"] = f"{row['amount']} coins"
            events.append(event)
        out.append(Offer(k, k * size, events, note))
    return out


def input_faults(offers: list[Offer]) -> dict[str, int]:
    """How many offers carry each input fault."""
    counts: dict[str, int] = {}
    for offer in offers:
        if offer.note is not None:
            counts[offer.note] = counts.get(offer.note, 0) + 1
    return counts


class HttpClient:
    """A keep-alive JSON client of the service; :meth:`request` answers ``(status, body)`` or
    raises :class:`OSError` / :class:`http.client.HTTPException` when the service is away."""

    def __init__(self, port: int, timeout_s: float = 60.0) -> None:
        self.port = port
        self.timeout_s = timeout_s
        self._con: http.client.HTTPConnection | None = None

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: tuple[bytes, str] | None = None,
    ) -> tuple[int, dict[str, Any] | None]:
        """``body`` is sent as JSON; ``raw`` as ``(bytes, content type)``."""
        if self._con is None:
            self._con = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout_s)
        data, kind = raw or (None if body is None else json.dumps(body).encode(), JSON)
        try:
            self._con.request(method, path, body=data, headers={"content-type": kind})
            response = self._con.getresponse()
            answer = response.read()
        except (OSError, http.client.HTTPException):
            self.close()
            raise
        try:
            parsed = json.loads(answer) if answer else None
        except ValueError:
            parsed = None
        return response.status, parsed

    def get(self, path: str) -> dict[str, Any] | None:
        """The JSON of a 200 answer, or None (any other answer, or no service)."""
        try:
            status, body = self.request("GET", path)
        except (OSError, http.client.HTTPException):
            return None
        return body if status == 200 else None

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None


@dataclass
class Acked:
    """What became of offer ``index``: when it was acknowledged (monotonic s), in how many
    attempts, its logical batch (None when an earlier attempt was found taken by a 409)."""

    index: int
    at: float
    attempts: int
    batch: int | None
    conflict: bool


class PushGap(RuntimeError):
    """A 409 said the stream's next position is not where this offer or the one after it
    starts: events were lost or taken twice at the door (a campaign finding)."""


@dataclass
class Pusher:
    """Offers ``offers`` in order from a thread of its own (see the module docstring), at most
    ``rate`` offers a second and never past :attr:`gate` (an offer index; the campaign moves
    it as faults are injected). :attr:`acked` holds one :class:`Acked` per offer taken."""

    port: int
    offers: list[Offer]
    rate: float
    stream: str = STREAM
    gate: int = -1
    acked: list[Acked] = field(default_factory=list)
    failures: int = 0
    #: Answers that made an offer be tried again, by HTTP status (0: no answer).
    statuses: Counter[int] = field(default_factory=Counter)
    error: BaseException | None = None
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="pusher", daemon=True)
        self._thread.start()

    def set_gate(self, gate: int) -> None:
        with self._cond:
            self.gate = gate
            self._cond.notify_all()

    @property
    def next_index(self) -> int:
        """The first offer not acknowledged yet."""
        return len(self.acked)

    def done(self) -> bool:
        return len(self.acked) == len(self.offers) or self.error is not None

    def wait_done(self, timeout_s: float) -> bool:
        if self._thread is not None:
            self._thread.join(timeout_s)
        return self.done()

    def wait_for(self, index: int, timeout_s: float) -> bool:
        """Wait until offer ``index`` was acknowledged."""
        deadline = time.monotonic() + timeout_s
        while len(self.acked) <= index and self.error is None:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return len(self.acked) > index

    def stop(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(60)

    def _run(self) -> None:
        client = HttpClient(self.port)
        interval = 1.0 / self.rate if self.rate > 0 else 0.0
        next_at = time.monotonic()
        try:
            for offer in self.offers:
                with self._cond:
                    while self.gate < offer.index and not self._stop.is_set():
                        self._cond.wait(0.5)
                if self._stop.is_set():
                    return
                delay = next_at - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                next_at = max(next_at + interval, time.monotonic())
                self.acked.append(self._push(client, offer))
        except BaseException as exc:
            self.error = exc
        finally:
            client.close()

    def _push(self, client: HttpClient, offer: Offer) -> Acked:
        path = f"/streams/{self.stream}/events?expect_pos={offer.first_pos}"
        raw = offer.body()
        attempts = 0
        while not self._stop.is_set():
            attempts += 1
            try:
                status, body = client.request("POST", path, raw=raw)
            except (OSError, http.client.HTTPException):
                status, body = 0, None
            if status == 200 and body is not None:
                if body["first_pos"] != offer.first_pos:
                    raise PushGap(f"offer {offer.index} was taken at {body['first_pos']}")
                return Acked(offer.index, time.monotonic(), attempts, body["first_batch"], False)
            if status == 409 and body is not None:
                detail = body["error"]["detail"]
                if detail["next_pos"] == offer.first_pos + len(offer.events):
                    return Acked(offer.index, time.monotonic(), attempts, None, True)
                raise PushGap(
                    f"offer {offer.index} expects position {offer.first_pos}; the stream is at "
                    f"{detail['next_pos']}"
                )
            if status not in (0, 502, 503, 504, 500):
                raise RuntimeError(f"offer {offer.index} refused: {status} {body}")
            self.failures += 1
            self.statuses[status] += 1
            time.sleep(0.2 if status else 0.3)
        raise RuntimeError("stopped")


def offer_rows(offers: list[Offer]) -> int:
    return int(np.sum([len(o.events) for o in offers]))
