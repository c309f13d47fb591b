"""A stream over four partitions of a real Apache Kafka, collected and consumed by ``streamdi run``
processes killed with SIGKILL again and again: staging ends equal to the serial oracle over every
event sorted by event time, each applied exactly once, every engine batch in event-time order after
the one before, and every partition's position and merge state in staging.

The collector (in the same process) spreads logical batches of 500 events round-robin over the
partitions in Kafka transactions; it is killed with the pipeline, so it resumes too: the topic
must hold every batch id once, in the partition its id maps to.
"""

from __future__ import annotations

import itertools
import random
import signal
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from etl_dataflows.batch import EngineBatch
from etl_dataflows.executors import create_executor
from etl_dataflows.testing import ledger_dataflow
from ingest.broker import EmbeddedKafka, client_config
from ingest.ledger import ledger_events, ledger_file_source, write_ledger_file
from ingest.records import BATCH, KIND, PART, STREAM, WATERMARK, header_map
from staging.store import StagingStore
from streamdi.settings import load_settings
from tests.integration.conftest import run_streamdi, staged_watermark, start_streamdi, streamdi_env

pytestmark = pytest.mark.kafka

SPEC = "tests.integration.partitioned_run:run"
TOPIC = "ledger.txns"
EVENTS = 40_000
BATCH_EVENTS = 500
PARTITIONS = 4


def _topic_batches(broker: EmbeddedKafka) -> tuple[list[tuple[int, int]], dict[int, int]]:
    """``(partition, batch id)`` of every committed last part in the topic, and the last
    watermark record's event time per partition."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        **client_config(load_settings().kafka, broker.bootstrap_servers),
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        max_partition_fetch_bytes=16 * 1024 * 1024,
    )
    tps = [TopicPartition(TOPIC, p) for p in sorted(consumer.partitions_for_topic(TOPIC) or {})]
    consumer.assign(tps)
    for tp in tps:
        consumer.seek(tp, 0)
    out: list[tuple[int, int]] = []
    watermarks: dict[int, int] = {}
    empty = 0
    while empty < 3:
        polled = consumer.poll(timeout_ms=300)
        empty = 0 if polled else empty + 1
        for tp, records in polled.items():
            for record in records:
                headers = header_map(record.headers)
                assert headers[STREAM] == "txns"
                if headers[KIND] == "watermark":
                    watermarks[tp.partition] = int(headers[WATERMARK])
                    continue
                part, _, parts = headers.get(PART, "0/1").partition("/")
                if int(part) == int(parts) - 1:
                    out.append((tp.partition, int(headers[BATCH])))
    consumer.close()
    return out, watermarks


def _oracle(ledger: Path) -> tuple[Any, pa.Table, pa.Table]:
    """The serial executor over every event of the file sorted by ``(_ts, _pos)``, in one batch:
    its final state, its balances output and its aborts."""
    events = pa.concat_tables([c.events for c in ledger_file_source(ledger).read(0)])
    events = events.sort_by([("_ts", "ascending"), ("_pos", "ascending")])
    flow = ledger_dataflow().build()
    executor = create_executor("serial", flow, None)
    try:
        result = executor.run_batch(EngineBatch(1, {"txns": events}))
        return executor.state_image(), result.outputs["balances"], result.aborts
    finally:
        executor.close()


def _output_diagnosis(store: StagingStore, ledger: Path, want: pa.Table, column: str) -> str:
    """Where the staged ``column`` of ``outputs.balances`` first differs from the oracle's
    ``want`` (both by ``_pos``): that event, and the staged events of its accounts around it in
    the order the oracle applies them (event time), with the engine batch that applied each."""
    got = store.query("SELECT * FROM outputs.balances ORDER BY _pos").to_pylist()
    expected = want.to_pylist()
    first = next((i for i, (g, w) in enumerate(zip(got, expected)) if g[column] != w[column]), None)
    if first is None or len(got) != len(expected):
        return f"{len(got)} staged output rows against the oracle's {len(expected)}"
    row = got[first]
    events = pa.concat_tables([c.events for c in ledger_file_source(ledger).read(0)])
    accounts = {
        e["_pos"]: {e["src"], e["dst"]} - {None}
        for e in events.select(["_pos", "src", "dst"]).to_pylist()
    }
    mine = accounts[row["_pos"]]
    lines = [
        f"first difference at _pos {row['_pos']} (accounts {sorted(mine)}): "
        f"{row[column]} against {expected[first][column]}",
        f"their events (_ts, _pos, batch, kind, {column}) in event-time order:",
    ]
    near = sorted(
        (r["_ts"], r["_pos"], r["batch_id"], r["kind"], r[column])
        for r in got
        if accounts[r["_pos"]] & mine
    )
    at = next(i for i, n in enumerate(near) if n[1] == row["_pos"])
    lines += [f"  {n}" for n in near[max(0, at - 4) : at + 4]]
    return "\n".join(lines)


def _diagnosis(
    store: StagingStore, state: Any, balances: pa.Table, kills: list[str], log: Path
) -> str:
    """Which events staging applied differently from the oracle: the keys whose rows differ,
    the events applied twice or never (by ``_pos``), the engine batches that went back in event
    time (an event applied after a newer one), the kills, the staged merge state, and the runs'
    warnings of events that came after the release point had passed them."""
    staged = store.load_state()
    lines = [f"kills: {kills}"]
    late = [line for line in log.read_text().splitlines() if "older than the release point" in line]
    lines.append(f"late arrivals logged: {len(late)}")
    lines += late[:10]
    for name, table in state.tables.items():
        want = {r["id"]: r for r in table.to_pylist()}
        got = {r["id"]: r for r in staged.tables[name].to_pylist()}
        keys = sorted(k for k in set(want) | set(got) if want.get(k) != got.get(k))
        lines.append(f"{name}: {len(keys)} keys differ, first {keys[:10]}")
    applied = store.query("SELECT _pos, count(*) AS n FROM outputs.balances GROUP BY 1").to_pylist()
    counts = {r["_pos"]: r["n"] for r in applied}
    wanted = set(balances.column("_pos").to_pylist())
    twice = sorted(p for p, n in counts.items() if n > 1)
    never = sorted(wanted - set(counts))
    lines.append(f"applied twice: {len(twice)} {twice[:10]}; never: {len(never)} {never[:10]}")
    spans = store.query(
        "SELECT batch_id, min(_ts) AS lo, max(_ts) AS hi, count(*) AS n FROM outputs.balances "
        "GROUP BY batch_id ORDER BY batch_id"
    ).to_pylist()
    back = [(a, b) for a, b in itertools.pairwise(spans) if a["hi"] >= b["lo"]]
    lines.append(f"batches back in event time: {back[:5]}")
    merge = {k: (m.last_batch, m.max_ts, m.held is not None) for k, m in store.partitions().items()}
    lines.append(f"merge state: {merge}; offsets: {store.offsets()}")
    return "\n".join(lines)


def test_four_partitions_exactly_once_in_event_time_order_across_kill_9(
    broker: EmbeddedKafka, tmp_path: Path
) -> None:
    rng = random.Random(20261124)
    ledger = tmp_path / "txns.txt"
    write_ledger_file(ledger, ledger_events(EVENTS, keys=500, seed=11))
    staging = tmp_path / "staging.duckdb"
    env = streamdi_env(
        broker,
        tmp_path / "state",
        STREAMDI_TEST_LEDGER_FILE=str(ledger),
        STAGING__PATH=str(staging),
        INGEST__BATCH_EVENTS=str(BATCH_EVENTS),
        ENGINE__BATCH_SIZE="700",
        INGEST__PARTITION_IDLE_MS="300",
        ENGINE__EXECUTOR="serial",
    )
    log = tmp_path / "run.log"
    args = ["run", SPEC, "--until-idle", "2"]

    # killed inside the staging transaction, inside the engine, right after a commit, right
    # after a poll, and at random moments (the collector in the same process dies with it)
    plan = ["commit", "execute", "committed", "poll", "random", "random"]
    kills: list[str] = []
    for phase in plan:
        watermark = staged_watermark(staging)
        at = watermark + rng.randint(2, 5)
        crash = [] if phase == "random" else ["--crash-at", f"{phase}:{at}"]
        process = start_streamdi(args + crash, env, log)
        began = time.monotonic()
        if phase == "random":
            time.sleep(rng.uniform(3.0, 6.0))  # the interpreter's start, then the first batches
            process.send_signal(signal.SIGKILL)
        code = process.wait(180)
        if code == -signal.SIGKILL:
            kills.append(f"{phase}@{watermark}:{time.monotonic() - began:.1f}s")
        else:
            assert code == 0, log.read_text()
    # the planned kills always land (batches remain); a random one may come after the run ended
    assert len(kills) >= 5, f"only these kills landed: {kills}; see {log}"
    assert run_streamdi(args, env, log) == 0, log.read_text()

    # the topic: every logical batch once, in the partition its id maps to
    batches, watermarks = _topic_batches(broker)
    assert sorted(b for _, b in batches) == list(range(1, EVENTS // BATCH_EVENTS + 1))
    assert all(p == (b - 1) % PARTITIONS for p, b in batches)
    # no watermark promises more than the source holds (event times are 1..N ms; the end of the
    # source says newest + 1 µs, unless the run that read it to its end was killed first)
    assert all(0 < w <= EVENTS * 1_000 + 1 for w in watermarks.values()), watermarks

    # staging: the oracle's state, outputs and aborts; every event once
    state, balances, aborts = _oracle(ledger)
    flow = ledger_dataflow().build()
    store = StagingStore(staging, flow, read_only=True)
    try:
        staged = store.load_state()
        for name, table in state.tables.items():
            assert staged.tables[name].equals(table), (
                f"state table {name} differs from the oracle; see {tmp_path}\n"
                + _diagnosis(store, state, balances, kills, log)
            )
        assert staged.sequences == state.sequences
        outputs = store.query("SELECT * EXCLUDE (batch_id) FROM outputs.balances ORDER BY _pos")
        want = balances.sort_by("_pos")
        for column in want.column_names:
            assert outputs.column(column).to_pylist() == want.column(column).to_pylist(), (
                f"outputs.balances.{column} differs from the oracle; see {tmp_path}\n"
                + _output_diagnosis(store, ledger, want, column)
                + "\n"
                + _diagnosis(store, state, balances, kills, log)
            )
        staged_aborts = store.query("SELECT pos FROM streamdi.aborts ORDER BY pos")
        assert staged_aborts.column("pos").to_pylist() == sorted(aborts.column("pos").to_pylist())
        # every engine batch holds only events after those of the batch before it
        spans = store.query(
            "SELECT batch_id, min(_ts) AS lo, max(_ts) AS hi FROM outputs.balances "
            "GROUP BY batch_id ORDER BY batch_id"
        ).to_pylist()
        assert len(spans) > 10
        for before, after in itertools.pairwise(spans):
            assert before["hi"] < after["lo"], f"batch {after['batch_id']} goes back in time"
        ids = store.query("SELECT batch_id FROM streamdi.batches ORDER BY 1").column(0).to_pylist()
        assert ids == list(range(1, len(ids) + 1))
        assert store.query("SELECT sum(events) AS n FROM streamdi.batches")["n"][0].as_py() == (
            EVENTS
        )
        # every partition's position, and its merge state, nothing held back at the end
        assert sorted(store.offsets()) == [(TOPIC, p) for p in range(PARTITIONS)]
        merge = store.partitions()
        assert sorted(merge) == [("txns", TOPIC, p) for p in range(PARTITIONS)]
        assert all(m.held is None for m in merge.values())
        assert {m.last_batch for m in merge.values()} == {
            max(b for p, b in batches if p == q) for q in range(PARTITIONS)
        }
    finally:
        store.close()
