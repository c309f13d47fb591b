"""The fault kinds of the campaign and its seeded schedule (pure: no process is touched here).

A schedule is a list of :class:`Fault` in input order: fault ``i`` becomes due when the
workload has offered ``at_offer`` offers, and is injected once the one before it recovered
(faults never overlap, so each recovery is measured on its own). The same seed, kinds and
workload size give the same schedule, parameters included: the schedule is what a regression
test replays.

The kinds (:data:`FAULT_KINDS`), each a real action on a real process:

============== ==============================================================================
serve_kill     ``kill -9`` of ``streamdi serve`` (collector, engine, staging, migration and
               the query service) at a random moment; the supervisor starts it again
commit_point   serve kills itself inside the staging commit of a batch, before one of its
               numbered steps (``--crash-at commit-STEP:BATCH``), or right after it
collector_point serve kills itself between the collector's produce and its checkpoint, or
               between the checkpoint and the HTTP receipt (``collect-*``)
checkpoint_point serve kills itself in the middle of writing a staging checkpoint
migration_point serve kills itself inside a migration round, per phase and warehouse
               (``migrate-PHASE-TARGET``: in the COPY, after it, after the rejects, after the
               warehouse COMMIT, after staging noted the acknowledgement, in a merge)
migrate_kill   serve is killed, then ``streamdi migrate push`` is killed (``kill -9``) at one
               of its phases or at a random moment; then serve starts again
broker_kill    ``kill -9`` of the embedded Kafka (the JVM); serve's broker watch restarts it
postgres_kill  ``kill -9`` of the PostgreSQL server (postmaster and every backend); the
               supervisor starts it again after a second (crash recovery from its WAL)
postgres_outage PostgreSQL stopped (``pg_ctl stop -m immediate``) for a few seconds, then
               started: the warehouse is unreachable meanwhile
postgres_slow  every PostgreSQL process frozen (SIGSTOP) for 400 ms of every 500 ms, for a few
               seconds: a warehouse whose every statement is delayed
disk_full      the filesystem under staging (a tmpfs of its own) filled to the last byte for a
               few seconds, then freed
============== ==============================================================================

Input faults are part of the workload itself, the same in the reference run: event-time clock
jumps (:mod:`benchmarks.faults.ledger`). ``reprocess_kill`` (``streamdi upgrade reprocess``
killed at one of its phases or at a random moment, then run again) is not drawn: the reprocess
runs at a fixed offer in both runs, as it adds a batch of its own, and only the faulted run's
first attempt is killed. Nor is ``phase_kill`` (the TPC-DI workload: ``streamdi tpcdi phase``,
the bookkeeping at the end of a phase and the audit, killed at one of its points or at a random
moment, then run again): the phases end at fixed offers in both runs, and the faulted run kills
the first attempt of each.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Any, Literal

FaultKind = Literal[
    "serve_kill",
    "commit_point",
    "collector_point",
    "checkpoint_point",
    "migration_point",
    "migrate_kill",
    "broker_kill",
    "postgres_kill",
    "postgres_outage",
    "postgres_slow",
    "disk_full",
    "reprocess_kill",
    "phase_kill",
]
FAULT_KINDS: tuple[FaultKind, ...] = (
    "serve_kill",
    "commit_point",
    "collector_point",
    "checkpoint_point",
    "migration_point",
    "migrate_kill",
    "broker_kill",
    "postgres_kill",
    "postgres_outage",
    "postgres_slow",
    "disk_full",
)
#: Kinds that serve reaches by itself, armed with ``--crash-at`` when it (re)starts.
POINT_KINDS: frozenset[FaultKind] = frozenset(
    {"commit_point", "collector_point", "checkpoint_point", "migration_point"}
)
#: How often each kind is drawn (a broker restart costs 10-20 s on two cores, a serve kill a few).
WEIGHTS: dict[FaultKind, float] = {
    "serve_kill": 3.0,
    "commit_point": 3.0,
    "collector_point": 2.0,
    "checkpoint_point": 1.0,
    "migration_point": 3.0,
    "migrate_kill": 1.5,
    "broker_kill": 0.7,
    "postgres_kill": 1.0,
    "postgres_outage": 1.0,
    "postgres_slow": 1.0,
    "disk_full": 1.0,
}

COMMIT_POINTS = (
    "commit-state",
    "commit-outputs",
    "commit-progress",
    "commit-ledger",
    "commit-commit",
    "committed",
    "poll",
    "execute",
)
COLLECTOR_POINTS = ("collect-sent", "collect-flushed", "collect-checkpointed")
CHECKPOINT_POINTS = ("checkpoint-tables", "checkpoint-written", "checkpoint-renamed")
MIGRATION_POINTS = tuple(
    f"migrate-{phase}-{target}"
    for phase in ("copy", "loaded", "rejects", "committed", "acked", "merge", "merged")
    for target in ("postgres", "duckdb")
)
#: Faults are at least this many offers apart (a crash point lands a few offers after its due).
SPACING = 4
#: Points at a batch (armed with the batch id, placed after the input of the moment).
BATCH_KINDS: frozenset[FaultKind] = frozenset({"commit_point", "collector_point"})
#: Points counted in checkpoints or migration rounds: reached only while commits go on...
COUNTED_KINDS: frozenset[FaultKind] = frozenset({"checkpoint_point", "migration_point"})
#: ...so none is scheduled in the last this many offers.
COUNTED_TAIL = 50
#: A point at a batch is placed a few offers after the input when it is injected: none in the
#: last this many offers before a stop (the input halts there until the faults before it
#: recovered, so a batch past it would not come in time).
BATCH_TAIL = 10
#: ``streamdi migrate push --crash-at PHASE:TARGET`` phases (None: a kill at a random moment).
MIGRATE_PHASES = ("copy", "loaded", "rejects", "committed", "acked", "merge", "merged", None)


@dataclass(frozen=True)
class Fault:
    """One scheduled fault: its index, when it is due (``at_offer``), its kind and parameters:
    ``point`` (a crash point), ``after`` (the point's count or the batches ahead of the offer),
    ``delay_s`` (a random moment), ``hold_s`` (how long an outage, stall or full disk lasts)."""

    index: int
    at_offer: int
    kind: FaultKind
    point: str | None = None
    after: int = 0
    delay_s: float = 0.0
    hold_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        what: list[str] = [self.kind]
        if self.point:
            what.append(self.point)
        if self.hold_s:
            what.append(f"{self.hold_s:.1f}s")
        return " ".join(what)


def make_fault(rng: random.Random, index: int, at_offer: int, kind: FaultKind) -> Fault:
    """Fault ``index`` of ``kind``, its parameters drawn from ``rng``."""
    if kind == "serve_kill":
        return Fault(index, at_offer, kind, delay_s=round(rng.uniform(0.0, 1.5), 3))
    if kind == "commit_point":
        return Fault(index, at_offer, kind, point=rng.choice(COMMIT_POINTS), after=2)
    if kind == "collector_point":
        return Fault(index, at_offer, kind, point=rng.choice(COLLECTOR_POINTS), after=2)
    if kind == "checkpoint_point":
        return Fault(index, at_offer, kind, point=rng.choice(CHECKPOINT_POINTS), after=1)
    if kind == "migration_point":
        point = rng.choice(MIGRATION_POINTS)
        return Fault(index, at_offer, kind, point=point, after=rng.randint(1, 2))
    if kind == "migrate_kill":
        phase = rng.choice(MIGRATE_PHASES)
        target = rng.choice(("postgres", "duckdb"))
        return Fault(
            index,
            at_offer,
            kind,
            point=None if phase is None else f"{phase}:{target}",
            delay_s=round(rng.uniform(0.2, 1.5), 3),
        )
    if kind == "broker_kill":
        return Fault(index, at_offer, kind)
    if kind == "postgres_kill":
        return Fault(index, at_offer, kind, hold_s=1.0)
    if kind == "postgres_outage":
        return Fault(index, at_offer, kind, hold_s=round(rng.uniform(2.0, 6.0), 1))
    if kind == "postgres_slow":
        return Fault(index, at_offer, kind, hold_s=round(rng.uniform(3.0, 8.0), 1))
    if kind == "disk_full":
        return Fault(index, at_offer, kind, hold_s=round(rng.uniform(2.0, 5.0), 1))
    raise ValueError(f"unknown fault kind {kind!r}")


def schedule(
    seed: int,
    count: int,
    offers: int,
    kinds: tuple[FaultKind, ...] = FAULT_KINDS,
    *,
    lead: int = 10,
    tail: int = 10,
    skip: frozenset[int] = frozenset(),
    stops: frozenset[int] = frozenset(),
) -> list[Fault]:
    """``count`` faults spread over offers ``lead..offers - tail``, at least :data:`SPACING`
    offers apart and not at the offers in ``skip``, drawn by ``seed``: every kind once before
    any twice (in a seeded order), then by :data:`WEIGHTS`. ``stops``: offers before which the
    input halts (the TPC-DI workload's phase ends): like the end of the input, no point counted
    in commits is scheduled in the :data:`COUNTED_TAIL` offers before one, nor a point at a
    batch in the :data:`BATCH_TAIL` offers before one."""
    if count <= 0:
        return []
    candidates = [o for o in range(lead, offers - tail) if all(abs(o - k) >= SPACING for k in skip)]
    room = len(candidates) - SPACING * (count - 1)
    if room < count:
        raise ValueError(
            f"{count} faults need more than {offers} offers ({SPACING} apart, {lead} before the "
            f"first and {tail} after the last)"
        )
    rng = random.Random(seed)
    first = list(kinds)
    rng.shuffle(first)
    chosen: list[FaultKind] = first[:count]
    weights = [WEIGHTS[k] for k in kinds]
    while len(chosen) < count:
        chosen.append(rng.choices(kinds, weights)[0])
    picked = sorted(rng.sample(range(room), count))
    at = [candidates[slot + SPACING * i] for i, slot in enumerate(picked)]
    ends = sorted({*stops, offers})

    def tail_of(kind: FaultKind) -> int:
        return COUNTED_TAIL if kind in COUNTED_KINDS else BATCH_TAIL

    def fits(kind: FaultKind, offer: int) -> bool:
        if kind not in COUNTED_KINDS and (kind not in BATCH_KINDS or not stops):
            return True
        return offer <= next(e for e in ends if e > offer) - tail_of(kind)

    # a point counted in checkpoints or migration rounds needs input after it: none near the end
    # (or a stop); nor a point at a batch just before a stop
    for i in reversed(range(count)):
        if not fits(chosen[i], at[i]):
            swap = next(
                (
                    j
                    for j in reversed(range(count))
                    if j != i
                    and fits(chosen[j], at[i])
                    and fits(chosen[i], at[j])
                    and chosen[j] not in COUNTED_KINDS
                ),
                None,
            )
            if swap is not None:
                chosen[i], chosen[swap] = chosen[swap], chosen[i]
    return [
        make_fault(rng, i, offer, kind)
        for i, (offer, kind) in enumerate(zip(at, chosen, strict=True))
    ]
