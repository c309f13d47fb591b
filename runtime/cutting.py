"""When the pipeline cuts an engine batch: a pure function of the assembler's state and the clock.

The consuming loop moves polled records into the assembler (:func:`fill`) until the pending batch
is full or punctuated, then asks :func:`cut_reason` whether to take it. A pending batch is cut,
by the first rule that holds:

1. ``full``: it holds ``ENGINE__BATCH_SIZE`` events or more;
2. ``punctuated``: a stream's punctuation closed it;
3. ``idle``: the loop polled and Kafka had nothing more;
4. ``paused``: ingest is paused (the batch in hand still runs and commits);
5. ``timeout``: its first record arrived ``ENGINE__BATCH_TIMEOUT_MS`` ago or more.

Nothing is cut while nothing is pending.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from typing import Literal

from ingest.assembler import BatchAssembler, RawRecord

CutReason = Literal["full", "punctuated", "idle", "paused", "timeout"]


@dataclass(frozen=True)
class CutRules:
    """``batch_size`` events make a full batch; ``timeout_s`` is the oldest a pending batch gets."""

    batch_size: int
    timeout_s: float


@dataclass(frozen=True)
class PendingBatch:
    """What the cut rules read of the assembler: whether events are pending, how many, whether a
    punctuation closed them, and when (wall clock, s) the first of them arrived."""

    pending: bool
    events: int
    punctuated: bool
    arrived_at: float | None

    @classmethod
    def of(cls, assembler: BatchAssembler) -> PendingBatch:
        return cls(
            assembler.pending,
            assembler.pending_events,
            assembler.punctuated,
            assembler.arrived_at,
        )


def cut_reason(
    batch: PendingBatch, rules: CutRules, *, polled_empty: bool, paused: bool, now: float
) -> CutReason | None:
    """Why ``batch`` is cut now (see the module docstring), or None to keep filling it.
    ``polled_empty``: this turn polled and got nothing; ``now``: the wall clock (s)."""
    if not batch.pending:
        return None
    if batch.events >= rules.batch_size:
        return "full"
    if batch.punctuated:
        return "punctuated"
    if polled_empty:
        return "idle"
    if paused:
        return "paused"
    if batch.arrived_at is not None and now - batch.arrived_at >= rules.timeout_s:
        return "timeout"
    return None


def fill(
    assembler: BatchAssembler,
    buffered: deque[RawRecord],
    added: MutableMapping[tuple[str, int], int],
    batch_size: int,
    *,
    blocked: Callable[[tuple[str, int]], bool] | None = None,
) -> bool:
    """Move records from ``buffered`` into ``assembler`` until the pending batch is full or
    punctuated (the rest wait for the next batch); ``added`` keeps each partition's last offset
    added, which the batch taken next carries as its offsets.

    A record of a partition ``blocked`` says holds enough already (asked before each record)
    stays in ``buffered``, with every later record of that partition, in order; the others go
    on. Returns True when everything left in ``buffered`` is blocked (the caller may poll for
    other partitions' records)."""
    skipped: deque[RawRecord] = deque()
    stopped: set[tuple[str, int]] = set()
    while buffered and assembler.pending_events < batch_size:
        if assembler.punctuated:
            break
        record = buffered.popleft()
        tp = (record.topic, record.partition)
        if tp in stopped or (blocked is not None and blocked(tp)):
            stopped.add(tp)
            skipped.append(record)
            continue
        assembler.add(record)
        added[tp] = record.offset
    stuck = bool(skipped) and not buffered
    buffered.extendleft(reversed(skipped))
    return stuck
