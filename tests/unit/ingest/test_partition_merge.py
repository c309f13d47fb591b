"""A stream over four partitions, read in adversarial interleavings, applies exactly what the serial
oracle applies to the same events sorted by ``(_ts, _pos)`` (the minimum-watermark rule of
:mod:`ingest.merging`), also when the reader restarts from a staged merge state mid-way.

The events are a generated ledger workload cut into logical batches of random sizes; each batch is
produced to one of four partitions (so each partition is in event-time order, as the collector
writes it). The reader sees the partitions interleaved by a strategy that tries to break the
order: one partition long before the others, the newest partition first, random, one record at a
time round the partitions; and it cuts engine batches at random moments.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from etl_dataflows.batch import EngineBatch
from etl_dataflows.executors import create_executor
from etl_dataflows.state import StateImage
from etl_dataflows.testing import WorkloadSpec, ledger_workload
from etl_dataflows.testing.harness import TestingSink
from etl_dataflows.types import POS, TS
from ingest.assembler import AssembledBatch, BatchAssembler, RawRecord
from ingest.merging import PartitionMerge, sort_released
from ingest.records import encode_batch, watermark_record
from staging.batch_commit import PartitionProgress, StreamProgress

TOPIC = "ledger.txns"
PARTITIONS = 4
TPS = [(TOPIC, p) for p in range(PARTITIONS)]


@dataclass
class Produced:
    """The records per partition, and every event produced (in production order)."""

    per_partition: list[list[RawRecord]]
    events: pa.Table


def produce(spec: WorkloadSpec, rng: random.Random, *, placement: str) -> Produced:
    """The workload's events as logical batches of 1 to 60 events spread over the partitions:
    ``round-robin`` by batch id, or ``random``."""
    work = ledger_workload(spec)
    events = pa.concat_tables([b.inputs["txns"] for b in work.batches])
    events = events.sort_by([(TS, "ascending"), (POS, "ascending")])
    per: list[list[RawRecord]] = [[] for _ in range(PARTITIONS)]
    start, batch_id = 0, 0
    while start < events.num_rows:
        size = rng.randint(1, 60)
        piece = events.slice(start, size)
        start += piece.num_rows
        batch_id += 1
        p = (batch_id - 1) % PARTITIONS if placement == "round-robin" else rng.randrange(4)
        for r in encode_batch(
            "txns",
            batch_id,
            piece,
            [],
            cap=1_000_000,
            last_pos=int(piece.column(POS)[-1].as_py()),
        ):
            per[p].append(RawRecord(TOPIC, p, len(per[p]), r.value, r.headers))
    return Produced(per, events)


Interleave = Callable[[list[list[RawRecord]], random.Random], list[RawRecord]]


def _random(per: list[list[RawRecord]], rng: random.Random) -> list[RawRecord]:
    queues = [list(q) for q in per]
    out: list[RawRecord] = []
    while any(queues):
        q = rng.choice([q for q in queues if q])
        out.append(q.pop(0))
    return out


def _one_first(per: list[list[RawRecord]], rng: random.Random) -> list[RawRecord]:
    first = rng.randrange(PARTITIONS)
    return per[first] + _random([q for i, q in enumerate(per) if i != first], rng)


def _newest_first(per: list[list[RawRecord]], rng: random.Random) -> list[RawRecord]:
    """Whole partitions one after the other, the last partition (the newest batch) first."""
    return [r for q in reversed(per) for r in q]


def _round(per: list[list[RawRecord]], rng: random.Random) -> list[RawRecord]:
    out: list[RawRecord] = []
    for i in range(max(len(q) for q in per)):
        for q in reversed(per):
            if i < len(q):
                out.append(q[i])
    return out


def _bursts(per: list[list[RawRecord]], rng: random.Random) -> list[RawRecord]:
    """Long bursts from one partition at a time, as a fetch of a lagging partition brings."""
    queues = [list(q) for q in per]
    out: list[RawRecord] = []
    while any(queues):
        q = rng.choice([q for q in queues if q])
        for _ in range(rng.randint(1, 12)):
            if q:
                out.append(q.pop(0))
    return out


STRATEGIES: dict[str, Interleave] = {
    "random": _random,
    "one-first": _one_first,
    "newest-first": _newest_first,
    "round": _round,
    "bursts": _bursts,
}


def _assembler(
    spec: WorkloadSpec,
    state: dict[tuple[str, str, int], PartitionProgress] | None = None,
    progress: dict[str, StreamProgress] | None = None,
    offsets: dict[tuple[str, int], int] | None = None,
) -> BatchAssembler:
    return BatchAssembler(
        ledger_workload(spec).flow.build(),
        {TOPIC: ["txns"]},
        progress=progress or {},
        offsets=offsets or {},
        max_record_bytes=1_000_000,
        allowed_lateness_ms=60_000,
        partitions=TPS,
        merge_state=state,
        partition_idle_ms=0,
    )


@dataclass
class Applied:
    inputs: list[pa.Table]
    sink: TestingSink
    state: StateImage


def apply(
    spec: WorkloadSpec,
    records: list[RawRecord],
    rng: random.Random,
    *,
    restart_at: int | None = None,
) -> Applied:
    """Feed ``records`` to an assembler, cutting batches at random moments and running them
    through the serial executor; at the end every partition is caught up and goes idle. With
    ``restart_at``, the reader crashes after that many records: what it added since its last
    batch is lost, and a new reader starts from what staging would hold (the offsets, stream
    progress and merge state of the batches taken) and reads the partitions again."""
    work = ledger_workload(spec)
    flow = work.flow.build()
    executor = create_executor("serial", flow, work.state)
    sink = TestingSink()
    inputs: list[pa.Table] = []
    assembler = _assembler(spec)
    last: dict[tuple[str, int], int] = {}
    staged_offsets: dict[tuple[str, int], int] = {}
    staged: AssembledBatch | None = None
    batch_id = 0

    def take() -> AssembledBatch:
        nonlocal batch_id
        batch_id += 1
        assembled = assembler.take(batch_id, last)
        if "txns" in assembled.batch.inputs:
            inputs.append(assembled.batch.inputs["txns"])
        sink.collect(executor.run_batch(EngineBatch(batch_id, assembled.batch.inputs)))
        staged_offsets.update(assembled.offsets)
        return assembled

    i = 0
    while i < len(records):
        record = records[i]
        assembler.add(record)
        last[(record.topic, record.partition)] = record.offset
        i += 1
        if rng.random() < 0.15:
            staged = take()
        if restart_at is not None and i >= restart_at and staged is not None:
            assembler = _assembler(
                spec,
                dict(staged.partitions),
                dict(staged.streams),
                dict(staged_offsets),
            )
            last = {}
            i = 0  # read every partition again: what staging covers is skipped
            restart_at = None
    assembler.mark_idle(set(TPS))
    take()
    assert not assembler.holding and not assembler.pending
    return Applied(inputs, sink, executor.state_image())


def oracle(spec: WorkloadSpec, events: pa.Table) -> Applied:
    """The serial executor over every event, sorted by ``(_ts, _pos)``, in one batch."""
    work = ledger_workload(spec)
    executor = create_executor("serial", work.flow.build(), work.state)
    sink = TestingSink()
    sink.collect(executor.run_batch(EngineBatch(1, {"txns": events})))
    return Applied([events], sink, executor.state_image())


def _rows(tables: list[pa.Table]) -> list[dict[str, object]]:
    rows = pa.concat_tables(tables).to_pylist() if tables else []
    return sorted(rows, key=lambda r: (r.get("_pos"), str(r)))


def assert_same_as_oracle(got: Applied, want: Applied) -> None:
    applied = pa.concat_tables(got.inputs)
    # every event exactly once, and the batches together in (_ts, _pos) order
    assert applied.equals(want.inputs[0]), "the batches do not apply the events sorted by _ts"
    for name, table in want.state.tables.items():
        assert got.state.tables[name].equals(table), f"state table {name} differs"
    assert got.state.sequences == want.state.sequences
    for sink in want.sink.outputs:
        assert _rows(got.sink.outputs.get(sink, [])) == _rows(want.sink.outputs[sink]), sink
    assert _rows(got.sink.aborts) == _rows(want.sink.aborts)
    assert _rows(got.sink.dead_letters) == _rows(want.sink.dead_letters)


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
@pytest.mark.parametrize("placement", ["round-robin", "random"])
def test_four_partitions_apply_what_the_oracle_applies(strategy: str, placement: str) -> None:
    spec = WorkloadSpec(keys=40, batch_size=300, batches=3, abort_ratio=0.05, ties=0.2, seed=3)
    rng = random.Random(f"{strategy}/{placement}")
    produced = produce(spec, rng, placement=placement)
    records = STRATEGIES[strategy](produced.per_partition, rng)
    assert_same_as_oracle(apply(spec, records, rng), oracle(spec, produced.events))


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_a_restart_from_the_staged_merge_state_applies_each_event_once(strategy: str) -> None:
    spec = WorkloadSpec(keys=40, batch_size=300, batches=3, abort_ratio=0.05, ties=0.2, seed=5)
    rng = random.Random(strategy)
    produced = produce(spec, rng, placement="round-robin")
    records = STRATEGIES[strategy](produced.per_partition, rng)
    got = apply(spec, records, rng, restart_at=len(records) // 2)
    assert_same_as_oracle(got, oracle(spec, produced.events))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), restart=st.booleans())
def test_any_interleaving_applies_what_the_oracle_applies(seed: int, restart: bool) -> None:
    spec = WorkloadSpec(keys=20, batch_size=120, batches=2, abort_ratio=0.05, ties=0.3, seed=seed)
    rng = random.Random(seed)
    produced = produce(spec, rng, placement="random")
    records = _bursts(produced.per_partition, rng)
    got = apply(spec, records, rng, restart_at=len(records) // 3 if restart else None)
    assert_same_as_oracle(got, oracle(spec, produced.events))


def _record(partition: int, offset: int, batch_id: int, times: list[int]) -> RawRecord:
    spec = WorkloadSpec(keys=4, batch_size=len(times), batches=1)
    events = ledger_workload(spec).batches[0].inputs["txns"]
    events = events.set_column(
        events.schema.get_field_index(TS), TS, pa.array(times, pa.int64())
    ).set_column(events.schema.get_field_index(POS), POS, pa.array(times, pa.int64()))
    (record,) = encode_batch("txns", batch_id, events, [], cap=1_000_000, last_pos=max(times))
    return RawRecord(TOPIC, partition, offset, record.value, record.headers)


def test_a_returning_idle_partition_brings_late_events() -> None:
    """An idle partition stops holding back; events it brings later that are older than what was
    applied are late: applied in the next batch within the allowed lateness, dead letters
    beyond it."""
    assembler = BatchAssembler(
        ledger_workload(WorkloadSpec(keys=4, batch_size=1, batches=1)).flow.build(),
        {TOPIC: ["txns"]},
        progress={},
        offsets={},
        max_record_bytes=1_000_000,
        allowed_lateness_ms=1,
        partitions=TPS[:2],
        partition_idle_ms=0,
    )
    assembler.add(_record(0, 0, 1, [10_000, 20_000]))
    assert assembler.pending_events == 0  # partition 1 has no watermark yet
    assembler.mark_idle({TPS[1]})  # silent and read to its end
    assert assembler.pending_events == 1
    first = assembler.take(1, {TPS[0]: 0})
    assert first.batch.inputs["txns"].column(TS).to_pylist() == [10_000]
    assert first.streams["txns"].max_ts == 10_000 and assembler.holding
    assembler.add(_record(1, 0, 2, [9_500, 9_600]))
    assembler.add(_record(1, 1, 3, [5_000]))
    second = assembler.take(2, {TPS[1]: 1})
    assert second.batch.inputs["txns"].column(TS).to_pylist() == [9_500, 9_600]
    assert second.dead_letters.column("ts").to_pylist() == [5_000]
    assert second.dead_letters.column("reason")[0].as_py().startswith("late")
    assert second.offsets == {TPS[1]: 2}
    held = second.partitions[("txns", TOPIC, 0)]
    assert held.held is not None and held.max_ts == 20_000  # 20,000 still waits


def test_a_producer_watermark_moves_a_silent_partition_without_idleness() -> None:
    """A watermark record promises that nothing older follows in its partition: the others'
    events up to it are released at once, with no idle timeout (here: never)."""
    assembler = BatchAssembler(
        ledger_workload(WorkloadSpec(keys=4, batch_size=1, batches=1)).flow.build(),
        {TOPIC: ["txns"]},
        progress={},
        offsets={},
        max_record_bytes=1_000_000,
        allowed_lateness_ms=None,
        partitions=TPS[:2],
        partition_idle_ms=3_600_000,
    )
    assembler.add(_record(0, 0, 1, [10_000, 20_000]))
    assert assembler.pending_events == 0
    mark = watermark_record("txns", 15_000)
    assembler.add(RawRecord(TOPIC, 1, 0, mark.value, mark.headers))
    assert assembler.pending_events == 1
    batch = assembler.take(1, {TPS[0]: 0, TPS[1]: 0})
    assert batch.batch.inputs["txns"].column(TS).to_pylist() == [10_000]
    assert batch.offsets == {TPS[0]: 1, TPS[1]: 1} and batch.dead_letters.num_rows == 0
    assert batch.partitions[("txns", TOPIC, 1)].max_ts == 15_000


def _merge(idle_s: float) -> PartitionMerge:
    spec = WorkloadSpec(keys=4, batch_size=1, batches=1)
    schema = ledger_workload(spec).batches[0].inputs["txns"].schema
    return PartitionMerge("txns", TPS[:2], schema=schema, idle_s=idle_s, now=0.0)


def _events(times: list[int]) -> pa.Table:
    spec = WorkloadSpec(keys=4, batch_size=len(times), batches=1)
    events = ledger_workload(spec).batches[0].inputs["txns"]
    ts = pa.array(times, pa.int64())
    events = events.set_column(events.schema.get_field_index(TS), TS, ts)
    return events.set_column(events.schema.get_field_index(POS), POS, ts)


def _released(merge: PartitionMerge) -> list[int]:
    table = sort_released(merge.release())
    return [] if table is None else table.column(TS).to_pylist()


def test_a_transaction_read_after_a_quiet_spell_is_not_late_on_any_partition() -> None:
    """The collector writes every partition in each Kafka transaction; after a quiet spell the
    partitions went idle, and the consumer reads the next transaction one partition at a time.
    The first partition read wakes the others: nothing is released past them until their part
    of the transaction is read, so no event of it is late (under the old rule the first
    partition read moved the release point alone, and the others' events followed one batch
    after newer ones)."""
    merge = _merge(idle_s=0.3)
    merge.seen(TPS[0], now=0.0)
    merge.hold(TPS[0], 0, _events([1_000, 2_000]))
    merge.seen(TPS[1], now=0.0)
    merge.advance(TPS[1], 2_000)  # its watermark record in the same transaction
    assert _released(merge) == [1_000]
    assert merge.mark_idle(set(TPS[:2]), now=0.5) and merge.releases_all()
    assert _released(merge) == [2_000]
    # the next transaction: a batch to partition 1, a batch to partition 0; 1 is read first
    merge.seen(TPS[1], now=0.6)
    merge.hold(TPS[1], 1, _events([4_000, 5_000]))
    assert not merge.mark_idle(set(TPS[:2]), now=0.7)  # partition 0 woke up with it
    assert _released(merge) == []  # 0's watermark (2,000) holds 1's events back
    merge.seen(TPS[0], now=0.7)
    merge.hold(TPS[0], 1, _events([3_000]))
    merge.advance(TPS[0], 5_000)  # its part of the transaction ends with a watermark record
    assert _released(merge) == [3_000, 4_000]


def test_partitions_that_fall_silent_together_go_idle_together() -> None:
    """A partition silent for the idle timeout while the others fell silent only a moment later
    does not go idle alone (the next transaction would bring it events older than what the
    others then release); they go idle together once all are silent that long."""
    merge = _merge(idle_s=0.3)
    merge.seen(TPS[0], now=0.0)
    merge.seen(TPS[1], now=0.05)
    assert not merge.mark_idle(set(TPS[:2]), now=0.32)
    assert merge.mark_idle(set(TPS[:2]), now=0.36) and merge.releases_all()


def test_a_partition_the_producer_skips_goes_idle_while_the_others_move() -> None:
    """A partition that gets nothing while another keeps getting records goes idle once the
    other got a record the idle timeout after its last one, confirmed by a check the idle
    timeout later, so it cannot hold the stream back for good."""
    merge = _merge(idle_s=0.3)
    merge.seen(TPS[0], now=0.1)
    merge.hold(TPS[0], 0, _events([1_000, 2_000]))
    merge.seen(TPS[0], now=0.2)
    assert not merge.mark_idle({TPS[1]}, now=0.25)
    assert _released(merge) == []  # partition 1 has no watermark yet
    merge.seen(TPS[0], now=0.3)
    assert not merge.mark_idle({TPS[1]}, now=0.35)  # behind the others: to be confirmed
    merge.seen(TPS[0], now=0.5)
    assert not merge.mark_idle({TPS[1]}, now=0.6)
    assert merge.mark_idle({TPS[1]}, now=0.65) and not merge.releases_all()
    assert _released(merge) == [1_000]


def test_a_partition_whose_part_of_a_transaction_is_not_readable_yet_is_not_idle() -> None:
    """After a quiet spell in which no check ran (nothing was held back), a transaction's part
    on partition 1 is read while partition 0's part of it is not readable yet (its commit
    marker comes a moment later, so its end offset still says it was read to its end). One
    check then finds partition 0 silent and behind partition 1; that alone does not make it
    idle, so partition 1's events wait for partition 0's older ones (a single check made it idle
    and released 4,000 before 3,000)."""
    merge = _merge(idle_s=0.3)
    merge.seen(TPS[0], now=0.0)
    merge.hold(TPS[0], 0, _events([1_000]))
    merge.advance(TPS[0], 2_000)  # the transaction's watermark records, on both partitions
    merge.seen(TPS[1], now=0.0)
    merge.advance(TPS[1], 2_000)
    assert _released(merge) == [1_000] and not merge.holding
    # a quiet spell (no check: nothing held), then the next transaction, partition 1's part first
    merge.seen(TPS[1], now=1.0)
    merge.hold(TPS[1], 1, _events([4_000, 5_000]))
    assert not merge.mark_idle(set(TPS[:2]), now=1.05)
    assert _released(merge) == []
    merge.seen(TPS[0], now=1.1)  # its part is readable now
    merge.hold(TPS[0], 1, _events([3_000]))
    merge.advance(TPS[0], 5_000)
    assert not merge.mark_idle(set(TPS[:2]), now=1.4)  # seen again: the first check is void
    assert _released(merge) == [3_000, 4_000]


def test_a_check_long_before_confirms_nothing() -> None:
    """A check that found a partition behind, followed by a quiet spell with no check, does not
    confirm it at the next check: that check starts the count again (the partition may be one
    whose part of the newest transaction is not readable yet)."""
    merge = _merge(idle_s=0.3)
    merge.seen(TPS[0], now=0.0)
    merge.seen(TPS[1], now=0.5)
    merge.hold(TPS[1], 0, _events([4_000]))
    merge.advance(TPS[1], 5_000)
    assert not merge.mark_idle({TPS[0]}, now=0.55)  # behind: the first check
    assert not merge.mark_idle({TPS[0]}, now=5.0)  # no check since: it starts again
    assert merge.mark_idle({TPS[0]}, now=5.35) and _released(merge) == [4_000]


def test_a_partition_far_ahead_is_throttled_until_it_holds_half_the_limit() -> None:
    """Throttling (what the consuming loop pauses): a partition ahead of the release point that
    holds more than the limit stops, and reads again at half the limit; the partition the
    release point waits for (or one with no watermark yet) never stops, and none stops once
    that one was read to its end."""
    merge = _merge(idle_s=60.0)
    merge.seen(TPS[0], now=0.0)
    merge.hold(TPS[0], 0, _events([10, 20, 30, 40, 50, 60]))
    # partition 1 has no watermark: nothing is released, partition 0 is ahead of it
    assert merge.throttle(set(), limit=6) == set()  # 6 held: not above the limit
    merge.hold(TPS[0], 1, _events([70]))
    assert merge.throttle(set(), limit=6) == {TPS[0]}
    # once partition 1 is seen read to its end, stopping 0 could only keep 1 from going idle
    assert not merge.mark_idle({TPS[1]}, now=1.0)
    assert merge.throttle({TPS[0]}, limit=6) == set()
    assert not merge.mark_idle(set(), now=1.0)  # 1 has records to read again
    merge.seen(TPS[1], now=0.0)
    merge.hold(TPS[1], 0, _events([35]))
    assert _released(merge) == [10, 20, 30]  # below partition 1's watermark, 35
    assert merge.throttle({TPS[0]}, limit=6) == {TPS[0]}  # holds 4 of its own: above 6 // 2
    merge.hold(TPS[1], 1, _events([45]))
    assert _released(merge) == [35, 40]
    assert merge.throttle({TPS[0]}, limit=6) == set()  # 3 left: reads again
    assert merge.throttle(set(), limit=0) == {TPS[0]}  # never partition 1, which sets W
