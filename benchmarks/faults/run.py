"""One run of the ledger workload: the reference (no faults) or the faulted run, start to end.

A run, in order:

1. Its own state directory; staging on a tmpfs of its own when the run fills disks
   (:class:`~benchmarks.faults.processes.StagingDisk`); its own PostgreSQL server
   (:class:`~benchmarks.faults.processes.PostgresService`, the warehouse's ``POSTGRES__DSN``).
2. ``streamdi serve`` of the ledger spec under the :class:`~benchmarks.faults.supervisor.
   Supervisor` (its embedded Kafka started by serve, the DuckDB warehouse in serve's process),
   and a :class:`Sampler` of ``GET /status`` every 100 ms (the timeline).
3. The :class:`~benchmarks.faults.ledger.Pusher` offers the input; the run walks its milestones
   in input order: each fault when its offer is reached (and the one before recovered), the
   reprocess at its offer. The pusher's *gate* keeps the input from running ahead of the next
   milestone (a few offers at most, none for a crash point, so its batch is still ahead).
4. After each fault, its recovery: the time from the end of the disturbance until the first
   offer acknowledged after it is in staging and in both warehouses: the whole path, from the
   HTTP door to each warehouse's commit, works again.
5. Once every offer is acknowledged: wait until staging and both warehouses hold the last batch;
   stop serve with SIGTERM (it must exit 0); ``streamdi migrate push --merge`` folds every delta
   into the full tables; read the snapshot (:mod:`benchmarks.faults.compare`); stop PostgreSQL,
   unmount the disk, and check that no process of the run is left.
"""

from __future__ import annotations

import http.client
import logging
import os
import random
import shutil
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.faults import compare
from benchmarks.faults.injector import (
    BATCH_POINT_KINDS,
    Injection,
    Injector,
    RunHandles,
    arms_ahead,
)
from benchmarks.faults.kinds import POINT_KINDS, Fault
from benchmarks.faults.ledger import REPROCESSED, STREAM, Acked, HttpClient, Offer, Pusher
from benchmarks.faults.processes import (
    PostgresService,
    ServeProcess,
    StagingDisk,
    leftovers,
    run_command,
)
from benchmarks.faults.supervisor import Event, ServeExit, Supervisor
from ingest.broker import free_port

logger = logging.getLogger(__name__)

SPEC = "benchmarks.faults.ledger:run"
SCHEMA = "ledger"
#: Offers the pusher may run ahead of a fault that is not a crash point.
LEAD = 3
#: ...and past the next milestone while a crash point counted in checkpoints or migration rounds
#: waits to be reached (those need commits to go on for a while).
COUNTED_LEAD = 60
#: Offers past the input a ``migrate_kill`` lets in while it waits for a batch staged and not
#: yet in the warehouses (serve is killed then).
MIGRATE_LEAD = 8
#: A counted point's lead is released this many offers at a time, one step a second while it
#: waits, so a point reached early leaves the input to the ones after it.
COUNTED_STEP = 4
#: Longest wait for a recovery before it counts as none (a finding).
RECOVERY_TIMEOUT_S = 240.0
#: ``upgrade reprocess --crash-at`` phases of the faulted run's first attempt (None: a kill after
#: a random delay).
REPROCESS_PHASES = ("caught-up", "committed", "pushed", None)
_ENV_PREFIXES = (
    "KAFKA__",
    "STAGING__",
    "INGEST__",
    "ENGINE__",
    "STREAMDI__",
    "MIGRATION__",
    "POSTGRES__",
    "API__",
    "SPARK__",
)


@dataclass
class Sample:
    """``GET /status`` at ``at`` (monotonic s): staging's watermark, what each warehouse
    acknowledged, whether the broker answered."""

    at: float
    watermark: int
    acked: dict[str, int]
    broker_up: bool


class Sampler:
    """Polls ``GET /status`` every ``every_s`` on a thread of its own (see :class:`Sample`)."""

    def __init__(self, port: int, every_s: float = 0.1) -> None:
        self.port = port
        self.every_s = every_s
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        client = HttpClient(self.port, timeout_s=5.0)
        while not self._stop.wait(self.every_s):
            status = client.get("/status")
            if status is None or status.get("pipeline", {}).get("state") != "running":
                continue
            self.samples.append(
                Sample(
                    time.monotonic(),
                    int(status["staging"]["watermark"]),
                    {t: int(m["acknowledged"]) for t, m in status["migration"].items()},
                    bool((status.get("broker") or {}).get("up", True)),
                )
            )
        client.close()

    def pending(self) -> bool:
        """Whether the newest sample shows a batch staged that some warehouse has not."""
        if not self.samples:
            return False
        last = self.samples[-1]
        return any(a < last.watermark for a in last.acked.values())

    def caught_up(self, batch: int, after: float) -> float | None:
        """When (monotonic s), after ``after``, staging and every warehouse first held ``batch``."""
        for sample in self.samples:
            if sample.at > after and _holds(sample, batch):
                return sample.at
        return None


def _holds(sample: Sample, batch: int) -> bool:
    return sample.watermark >= batch and all(a >= batch for a in sample.acked.values())


@dataclass
class Live:
    """A run's processes while it runs (what :meth:`LedgerRun._walk` and the hooks work with):
    serve's supervisor, the sampler of ``/status``, the pusher of the input, and the environment
    of every streamdi process of the run."""

    supervisor: Supervisor
    sampler: Sampler
    pusher: Pusher
    env: dict[str, str]


@dataclass
class RunConfig:
    """What a run does: its ``name`` and folder, its input, faults and reprocess offer."""

    name: str
    workdir: Path
    offers: list[Offer]
    rate: float
    faults: list[Fault] = field(default_factory=list)
    reprocess_at: int | None = None
    #: Kill the first reprocess attempt (the faulted run).
    reprocess_fault: bool = False
    seed: int = 0
    #: Staging on a tmpfs of this many MiB (None: in the state directory).
    disk_mb: int | None = None


@dataclass
class Recovery:
    """The recovery after one injection: seconds, or None when it did not come in time."""

    fault: int
    seconds: float | None
    target_batch: int


@dataclass
class RunResult:
    """Everything one run measured and read (see the module docstring)."""

    name: str
    started: float = 0.0
    seconds: float = 0.0
    injections: list[Injection] = field(default_factory=list)
    recoveries: list[Recovery] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    exits: list[ServeExit] = field(default_factory=list)
    unplanned: list[ServeExit] = field(default_factory=list)
    push_attempts: int = 0
    push_conflicts: int = 0
    push_retries: dict[int, int] = field(default_factory=dict)
    serve_exit: int | None = None
    merge_exit: int | None = None
    reprocess_codes: list[int] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    snapshot: compare.Snapshot = field(default_factory=dict)
    load: tuple[float, float, float] = (0.0, 0.0, 0.0)


def run_env(state: Path, staging: Path, port: int, dsn: str) -> dict[str, str]:
    """The environment of every streamdi process of a run."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_ENV_PREFIXES)}
    env.update(
        STREAMDI__STATE_DIR=str(state),
        STREAMDI__LOG_LEVEL="INFO",
        STAGING__PATH=str(staging),
        STAGING__CHECKPOINT_EVERY_S="1",
        STAGING__CHECKPOINTS_KEEP="2",
        POSTGRES__DSN=dsn,
        MIGRATION__TARGETS="duckdb,postgres",
        MIGRATION__PUSH_BATCHES="8",
        MIGRATION__PUSH_MS="500",
        MIGRATION__MERGE_MS="2000",
        MIGRATION__RETRY_MS="1000",
        API__PORT=str(port),
        API__PUSH_TIMEOUT_S="10",
        PYTHONPATH=str(Path(__file__).resolve().parents[2]),
    )
    return env


class LedgerRun:
    """One run (see the module docstring); :meth:`execute` returns its :class:`RunResult`.

    Another workload subclasses it (:class:`benchmarks.faults.tpcdi_run.TpcdiRun`): its spec,
    warehouse schema and stream, and the hooks :meth:`_setup` (before PostgreSQL starts),
    :meth:`_prepare` (before serve's first start),
    :meth:`_pause` (a planned stop at an offer of :meth:`pause_offers`), :meth:`_between` (before
    each milestone) and :meth:`_after_merge` (after the last merge, before the snapshot)."""

    spec = SPEC
    schema = SCHEMA
    stream = STREAM

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self.folder = config.workdir / config.name
        self.state = self.folder / "state"
        self.log = self.folder / "streamdi.log"
        self.result = RunResult(config.name)
        self.rng = random.Random(config.seed)
        self.cutovers: list[int] = []

    def batch_of(self, offer: int) -> int:
        """The staging batch id of offer ``offer`` (one batch per offer, plus cut-overs)."""
        return offer + 1 + sum(1 for r in self.cutovers if offer >= r)

    def execute(self) -> RunResult:
        config, result = self.config, self.result
        shutil.rmtree(self.folder, ignore_errors=True)
        self.state.mkdir(parents=True)
        result.started = time.monotonic()
        disk = None
        if config.disk_mb is not None:
            disk = StagingDisk(self.folder / "staging", config.disk_mb)
            disk.mount()
        staging = (disk.path if disk is not None else self.state) / "staging.duckdb"
        postgres = PostgresService(self.state / "postgres")
        port = free_port()
        serve: ServeProcess | None = None
        injector: Injector | None = None
        supervisor: Supervisor | None = None
        sampler: Sampler | None = None
        pusher: Pusher | None = None
        try:
            self._setup(staging)
            dsn = postgres.start()
            env = {**run_env(self.state, staging, port, dsn), **self.extra_env()}
            self._prepare(env, staging)
            arm_file = self.state / "crash-at" if config.faults else None
            serve = ServeProcess(self.spec, env, port, self.log, arm_file)

            def arm() -> str | None:
                return None if injector is None else injector.arm()

            def on_exit(exit_: ServeExit) -> None:
                if injector is not None:
                    injector.on_exit(exit_)

            supervisor = Supervisor(serve, postgres, arm, on_exit)
            sampler = Sampler(port)
            pusher = Pusher(port, config.offers, config.rate, self.stream)
            injector = Injector(
                RunHandles(
                    supervisor,
                    postgres,
                    disk,
                    self.state,
                    self.spec,
                    env,
                    self.log,
                    self.batch_of,
                    lambda: pusher.next_index if pusher is not None else 0,
                    lambda timeout_s: self._wait(sampler.pending, timeout_s),
                    len(config.offers) - 1,
                    lambda: sampler.samples[-1].watermark if sampler.samples else 0,
                )
            )
            supervisor.start()
            self._wait_ready(port)
            sampler.start()
            live = Live(supervisor, sampler, pusher, env)
            self._walk(injector, live)
            self._finish(live, serve, dsn, staging)
        finally:
            if injector is not None:
                result.unplanned = list(injector.unplanned)
            self._stop_all(supervisor, sampler, pusher, serve, postgres, disk)
        result.seconds = time.monotonic() - result.started
        result.load = os.getloadavg()
        return result

    # -- 2. and 3. ---------------------------------------------------------------------------------

    def _wait_ready(self, port: int, timeout_s: float = 240.0) -> None:
        client = HttpClient(port, timeout_s=5.0)
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                try:
                    status, _ = client.request("GET", "/ready")
                except (OSError, http.client.HTTPException):
                    status = 0
                if status == 200:
                    return
                time.sleep(0.2)
        finally:
            client.close()
        raise RuntimeError(f"streamdi serve was not ready in {timeout_s:.0f} s; see {self.log}")

    def extra_env(self) -> dict[str, str]:
        """The workload's own settings for every streamdi process of the run."""
        return {}

    def pause_offers(self) -> list[int]:
        """The offers at which the run stops for a planned step (:meth:`_pause`): the ledger's
        reprocess."""
        return [] if self.config.reprocess_at is None else [self.config.reprocess_at]

    def _setup(self, staging: Path) -> None:
        """Before anything starts (the state directory is empty, staging's disk mounted):
        nothing for the ledger."""

    def _prepare(self, env: dict[str, str], staging: Path) -> None:
        """Before serve's first start (PostgreSQL is up): nothing for the ledger."""

    def _between(self, live: Live) -> None:
        """Before each milestone (the one before it recovered): nothing for the ledger."""

    def _after_merge(self, env: dict[str, str], dsn: str) -> None:
        """After serve stopped and the last merge, before the snapshot: nothing for the ledger."""

    def _milestones(self) -> list[tuple[int, Fault | None]]:
        """``(offer, fault)`` in input order; a fault of None is a planned pause (the ledger's
        reprocess)."""
        items: list[tuple[int, Fault | None]] = [(f.at_offer, f) for f in self.config.faults]
        items += [(offer, None) for offer in self.pause_offers()]
        items.sort(key=lambda item: (item[0], item[1] is not None))
        return items

    def _walk(self, injector: Injector, live: Live) -> None:
        sampler, pusher = live.sampler, live.pusher
        items = self._milestones()
        last = len(self.config.offers) - 1
        gates, hard = milestone_gates(items, last)
        pusher.set_gate(gates[0])
        pusher.start()
        for i, (offer, fault) in enumerate(items):
            if not self._wait(partial(_reached, pusher, offer), 900):
                self.result.findings.append(f"the input stalled before offer {offer}")
                break
            if pusher.error is not None:
                break
            following = items[i + 1][1] if i + 1 < len(items) else None
            self._between(live)
            if fault is None:
                self._pause(offer, live)
                pusher.set_gate(gates[i + 1])
                continue
            taken = pusher.next_index
            injector.on_armed = None
            if fault.kind in BATCH_POINT_KINDS:
                # hold the input (one offer may be in flight) while the point is armed after it,
                # then let it run to the point's batch: it cannot pass the batch before serve is
                # armed (a point placed after the input had moved on was never reached)
                pusher.set_gate(min(pusher.gate, taken))
                taken += 1
                injector.anchor = (fault.index, taken)
            during, _ = fault_gates(fault, following, gates[i + 1], hard[i + 1], taken)
            injector.on_waiting = None
            if fault.kind in BATCH_POINT_KINDS:
                injector.on_armed = partial(pusher.set_gate, during)
            elif fault.kind in POINT_KINDS:
                start, step = counted_steps(gates[i + 1], taken, during)
                pusher.set_gate(start)
                injector.on_waiting = partial(step, pusher)
            else:
                pusher.set_gate(during)
            injection = injector.inject(fault, following)
            self.result.injections.append(injection)
            _, after = fault_gates(fault, following, gates[i + 1], hard[i + 1], pusher.next_index)
            pusher.set_gate(after)
            self._recover(injection, sampler, pusher, after)
        pusher.set_gate(last)

    def _recover(self, injection: Injection, sampler: Sampler, pusher: Pusher, hard: int) -> None:
        """Step 4: wait for the recovery after ``injection``: the first offer acknowledged after
        the end of the disturbance must reach staging and both warehouses (the last offer
        acknowledged, when the input ended first or may not go further than ``hard``)."""
        ended = injection.ended
        pusher.set_gate(max(pusher.gate, min(pusher.next_index, hard)))  # one offer more
        deadline = time.monotonic() + RECOVERY_TIMEOUT_S
        at = None
        target = 0
        while time.monotonic() < deadline and pusher.error is None:
            after = _first_after(pusher.acked, ended)
            if after is not None:
                target = self.batch_of(after.index)
                at = sampler.caught_up(target, after.at)
            elif pusher.done() or pusher.next_index > pusher.gate:  # no offer may follow yet
                target = self.batch_of(pusher.next_index - 1)
                at = sampler.caught_up(target, ended)
            if at is not None:
                break
            time.sleep(0.1)
        seconds = None if at is None else round(at - ended, 3)
        self.result.recoveries.append(Recovery(injection.fault.index, seconds, target))
        if seconds is None:
            self.result.findings.append(
                f"no recovery within {RECOVERY_TIMEOUT_S:.0f} s after fault "
                f"{injection.fault.index} ({injection.fault.describe()}): the first offer after "
                f"it (batch {target or '?'}) did not reach staging and both warehouses"
            )

    def _pause(self, offer: int, live: Live) -> None:
        """The planned step at ``offer``: the ledger's reprocess."""
        self._reprocess(live)

    def _reprocess(self, live: Live) -> None:
        """``streamdi upgrade reprocess`` of the ledger's tables at the reprocess offer: serve
        stopped (SIGTERM), the reprocess run (in the faulted run first killed at a phase or a
        random moment, then run again to its end), serve started again."""
        supervisor, sampler, env = live.supervisor, live.sampler, live.env
        assert self.config.reprocess_at is not None
        before = self.batch_of(self.config.reprocess_at - 1)
        if not self._wait(lambda: sampler.caught_up(before, 0.0) is not None, 300):
            self.result.findings.append(f"batch {before} never reached both warehouses")
        args = ["upgrade", "reprocess", self.spec, *REPROCESSED]
        started = time.monotonic()
        with supervisor.held("serve"):
            code = supervisor.terminate_serve()
            if code != 0:
                self.result.findings.append(f"serve exited {code} on SIGTERM before reprocess")
            if self.config.reprocess_fault:
                phase = self.rng.choice(REPROCESS_PHASES)
                if phase is None:
                    killed = run_command(
                        args, env, self.log, kill_after_s=round(self.rng.uniform(3.0, 12.0), 1)
                    )
                else:
                    killed = run_command([*args, "--crash-at", phase], env, self.log)
                self.result.reprocess_codes.append(killed)
                self.result.injections.append(
                    Injection(
                        Fault(-1, self.config.reprocess_at, "reprocess_kill", point=phase),
                        started,
                        time.monotonic(),
                        killed == -signal.SIGKILL,
                        f"upgrade reprocess killed at {phase or 'a random moment'} (code {killed})",
                    )
                )
            done = run_command(args, env, self.log, timeout_s=600)
            self.result.reprocess_codes.append(done)
            if done != 0:
                self.result.findings.append(f"upgrade reprocess exited {done}")
            self.cutovers.append(self.config.reprocess_at)
        self._wait(lambda: supervisor.serve.running(), 60)

    # -- 5. ----------------------------------------------------------------------------------------

    def _finish(self, live: Live, serve: ServeProcess, dsn: str, staging: Path) -> None:
        result = self.result
        supervisor, sampler, pusher, env = live.supervisor, live.sampler, live.pusher, live.env
        if not pusher.wait_done(1800) or pusher.error is not None:
            raise RuntimeError(f"the input was not offered: {pusher.error!r}")
        result.push_attempts = sum(a.attempts for a in pusher.acked)
        result.push_conflicts = sum(1 for a in pusher.acked if a.conflict)
        result.push_retries = dict(sorted(pusher.statuses.items()))
        last = self.batch_of(len(self.config.offers) - 1)
        if not self._wait(lambda: sampler.caught_up(last, 0.0) is not None, 600):
            result.findings.append(f"the last batch {last} never reached both warehouses")
        supervisor.stop()
        result.serve_exit = serve.terminate()
        if result.serve_exit != 0:
            result.findings.append(f"serve exited {result.serve_exit} on SIGTERM at the end")
        sampler.stop()
        result.merge_exit = run_command(
            ["migrate", "push", self.spec, "--merge"], env, self.log, timeout_s=600
        )
        if result.merge_exit != 0:
            result.findings.append(f"streamdi migrate push --merge exited {result.merge_exit}")
        self._after_merge(env, dsn)
        result.snapshot = self._snapshot(staging, dsn)

    def _snapshot(self, staging: Path, dsn: str) -> compare.Snapshot:
        """Every compared relation of staging and both warehouses (step 5)."""
        snap = compare.staging_snapshot(staging)
        snap.update(compare.duckdb_warehouse_snapshot(self.state / "warehouse.duckdb", self.schema))
        snap.update(compare.postgres_snapshot(dsn, self.schema))
        return snap

    def _stop_all(
        self,
        supervisor: Supervisor | None,
        sampler: Sampler | None,
        pusher: Pusher | None,
        serve: ServeProcess | None,
        postgres: PostgresService,
        disk: StagingDisk | None,
    ) -> None:
        result = self.result
        if pusher is not None:
            pusher.stop()
        if supervisor is not None:
            supervisor.stop()
            result.events = list(supervisor.events)
            result.exits = list(supervisor.exits)
        if sampler is not None:
            sampler.stop()
            result.samples = list(sampler.samples)
        if serve is not None:
            serve.kill()
        _stop_broker(self.state)
        try:
            postgres.close()
        except Exception as exc:
            result.findings.append(f"PostgreSQL did not stop: {exc}")
        if disk is not None:
            disk.close()
        left = leftovers(self.state, self.folder)
        if left:
            result.findings.append(f"processes left running: {left}")

    @staticmethod
    def _wait(done: Callable[[], Any], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if done():
                return True
            time.sleep(0.1)
        return bool(done())


def milestone_gates(
    items: list[tuple[int, Fault | None]], last: int
) -> tuple[list[int], list[int]]:
    """Per milestone (and one more for the end), the offer the input may reach before it
    (``gates``), and the offer it may never pass before it (``hard``): a reprocess runs with
    exactly the offers before it staged, so no fault before it may let the input past it; the
    input may run past any other milestone (its fault then comes late)."""
    gates = []
    hard = []
    for offer, fault in items:
        if fault is None:
            gates.append(offer - 1)
        elif fault.kind in POINT_KINDS:
            gates.append(offer)
        else:
            gates.append(offer + LEAD)
        hard.append(gates[-1] if fault is None else last)
    hard.append(last)
    for j in reversed(range(len(items))):  # never past a later one either
        hard[j] = min(hard[j], hard[j + 1])
    return [*gates, last], hard


def fault_gates(
    fault: Fault, following: Fault | None, gate: int, hard: int, next_index: int
) -> tuple[int, int]:
    """How far the input may go while ``fault`` is injected, and after it (``gate`` and
    ``hard``: the next milestone's). A crash point at a batch needs that batch to come; one
    counted in checkpoints or migration rounds needs commits to go on a while, a ``migrate_kill``
    a batch staged and not yet pushed. A following crash point at a batch armed ahead
    (:func:`~benchmarks.faults.injector.arms_ahead`) must not see its batch come before it is
    due; and it needs offers after the
    first one not yet taken when it is armed, so the input never runs that close to its end (or
    to a stop). A crash point at a batch always gets its own batch (the one after it is armed
    when it lands). (A counted point gets its lead step by step: :func:`counted_steps`.)"""
    during = gate
    if fault.kind in BATCH_POINT_KINDS:
        during = max(during, next_index + fault.after + 1)
    elif fault.kind in POINT_KINDS:
        during += COUNTED_LEAD
    elif fault.kind == "migrate_kill":
        during = max(during, next_index + MIGRATE_LEAD)
    cap = hard
    if arms_ahead(fault, following):
        cap = min(cap, gate)
    if following is not None and following.kind in BATCH_POINT_KINDS:
        # its batch is the first offer not taken plus its ``after``: that offer must still come
        # before the input ends (or halts), or the point is never reached
        cap = min(cap, max(gate, hard - following.after - 1))
    during = min(during, cap)
    if fault.kind in BATCH_POINT_KINDS:
        # never below its own batch: a following point is armed when this one lands, from the
        # input then, so it cannot be passed; capped at the following's due, a point that came
        # late (the input ahead of the schedule) waited for a batch that never came
        during = max(during, min(next_index + fault.after + 1, hard))
    return during, min(max(gate, next_index), cap)


def counted_steps(gate: int, next_index: int, during: int) -> tuple[int, Callable[[Pusher], bool]]:
    """The first gate of a point counted in commits, and the step that moves it on while the
    point waits: :data:`COUNTED_STEP` offers past the input (or to ``gate``), then that many
    more a second, up to ``during``; the step says whether input is left to give (the injector
    gives the point up a while after it is not). Its whole lead at once carried the input to the
    end of the SF 1 TPC-DI campaign, and the counted points after it saw no commit."""

    def step(pusher: Pusher) -> bool:
        pusher.set_gate(min(during, max(pusher.gate, pusher.next_index) + COUNTED_STEP))
        return pusher.next_index <= min(during, len(pusher.offers) - 1)  # input left to give

    return min(during, max(gate, next_index + COUNTED_STEP)), step


def _first_after(acked: list[Acked], at: float) -> Acked | None:
    """The first offer acknowledged after ``at`` (``acked`` is in time order)."""
    i = len(acked)
    while i > 0 and acked[i - 1].at > at:
        i -= 1
    return acked[i] if i < len(acked) else None


def _reached(pusher: Pusher, offer: int) -> bool:
    return pusher.next_index >= offer or pusher.done()


def _stop_broker(state: Path) -> None:
    """Kill a Kafka a crashed run left behind (a clean serve stop has stopped it already)."""
    from benchmarks.faults.processes import broker_pid

    pid = broker_pid(state)
    if pid is not None:
        os.kill(pid, signal.SIGKILL)
