"""``streamdi upgrade reprocess`` through a real broker and real processes: a step's logic changed
in place (the tally dataflow adds twice the amount from version 2 on), so staging and the DuckDB
warehouse hold totals of both versions; reprocessing recomputes them from Kafka's records in a
shadow while a running pipeline keeps serving the old rows (exit 3), then, with the pipeline
stopped, cuts over in one batch in staging and the warehouse, equal to version 2 over the whole
input; running it again changes nothing."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import time
from collections import defaultdict
from pathlib import Path

import pytest

from etl_dataflows.state import StateImage, rows_to_table
from ingest.broker import EmbeddedKafka
from migration.migrator import build_targets
from migration.schema import WarehouseLayout
from runtime.reprocess import shadow_path
from staging import StagingStore
from staging.checkpoints import checkpoints_dir, list_checkpoints
from streamdi.settings import load_settings
from tests.integration.conftest import (
    run_streamdi,
    staged_watermark,
    start_streamdi,
    streamdi_env,
)
from tests.integration.reprocess_run import tally

pytestmark = pytest.mark.kafka

V1 = "tests.integration.reprocess_run:v1"
V2 = "tests.integration.reprocess_run:v2"
V3 = "tests.integration.reprocess_run:v3"
EVENTS = 3_000


def _topic(tmp_path: Path) -> str:
    """The test's own topic (the broker serves the whole module)."""
    return f"tally.{tmp_path.name}"


def _env(broker: EmbeddedKafka, tmp_path: Path, **extra: str) -> dict[str, str]:
    """The test's environment: state in ``tmp_path/state``, the events in
    ``tmp_path/events.csv`` through the test's own topic, batches of 500 events."""
    return streamdi_env(
        broker,
        tmp_path / "state",
        STREAMDI_TEST_TALLY_FILE=str(tmp_path / "events.csv"),
        STREAMDI_TEST_TALLY_TOPIC=_topic(tmp_path),
        ENGINE__BATCH_SIZE="500",
        INGEST__BATCH_EVENTS="250",
        **extra,
    )


def _write_events(path: Path) -> list[tuple[int, int]]:
    rng = random.Random(18)
    rows = [(rng.randrange(40), rng.randrange(1, 100)) for _ in range(EVENTS)]
    lines = ["key,amount,ts", *(f"{k},{a},{1_000 + i}" for i, (k, a) in enumerate(rows))]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return rows


def _expected(rows: list[tuple[int, int]], factor: int) -> list[tuple[int, int, int]]:
    """Version ``factor``'s totals over every event: (key, total, n)."""
    totals: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for key, amount in rows:
        totals[key][0] += amount * factor
        totals[key][1] += 1
    return sorted((k, t, n) for k, (t, n) in totals.items())


def _staged_totals(state: Path, version: int = 2) -> list[tuple[int, int, int]]:
    """The staged totals, read with ``version`` of the dataflow (opening staging with a newer
    one would record its logic change)."""
    with StagingStore(state / "staging.duckdb", tally(version), background_merge=False) as store:
        table = store.state_table("totals")
    return sorted(zip(*(table.column(c).to_pylist() for c in ("key", "total", "n")), strict=True))


def _warehouse_rows(state: Path, name: str) -> tuple[list[dict[str, int]], int]:
    """The DuckDB warehouse's rows of ``name`` (loaded and merged) and its watermark."""
    settings = load_settings(streamdi={"state_dir": str(state)}, migration={"targets": "duckdb"})
    layout = WarehouseLayout(tally(2), settings.migration.schema_name)
    target = build_targets(settings, layout)["duckdb"]
    target.open()
    try:
        columns = list(layout.tables[name].columns)
        rows = target.table_rows(name, current=True)
        return [dict(zip(columns, r, strict=True)) for r in rows], target.watermark()
    finally:
        target.close()


def _warehouse_totals(state: Path) -> tuple[list[tuple[int, int, int]], int]:
    rows, watermark = _warehouse_rows(state, "totals")
    return sorted((r["key"], r["total"], r["n"]) for r in rows), watermark


def _wait_until_in_use(path: Path, process: subprocess.Popen[bytes]) -> None:
    """Until the pipeline ``process`` holds the staging file open (looked up in /proc: opening
    the file to find out would race the pipeline for DuckDB's lock)."""
    deadline = time.monotonic() + 60
    fds = Path(f"/proc/{process.pid}/fd")
    while time.monotonic() < deadline:
        assert process.poll() is None, "the pipeline stopped"
        for fd in fds.iterdir():
            with contextlib.suppress(OSError):
                if os.readlink(fd) == str(path):
                    return
        time.sleep(0.1)
    raise AssertionError("the pipeline did not open staging within 60 s")


def _mixed_run(
    broker: EmbeddedKafka, tmp_path: Path
) -> tuple[Path, dict[str, str], Path, list[tuple[int, int]], list[tuple[int, int, int]], int]:
    """Version 1 over the first two batches, version 2 over the other four, in staging and in
    the DuckDB warehouse: (state dir, env, log, the events, the staged totals, the watermark)."""
    events = tmp_path / "events.csv"
    rows = _write_events(events)
    state = tmp_path / "state"
    env = _env(broker, tmp_path, MIGRATION__TARGETS="duckdb")
    log = tmp_path / "run.log"
    assert run_streamdi(["collect", V1], env, log) == 0, log.read_text()
    args = ["run", V1, "--no-collect", "--no-progress", "--max-batches", "2", "--until-idle", "5"]
    assert run_streamdi(args, env, log) == 0, log.read_text()
    assert run_streamdi(["upgrade", "apply", V2], env, log) == 0, log.read_text()
    args = ["run", V2, "--no-collect", "--no-progress", "--until-idle", "1"]
    assert run_streamdi(args, env, log) == 0, log.read_text()
    mixed = _staged_totals(state)
    assert [(k, n) for k, _, n in mixed] == [(k, n) for k, _, n in _expected(rows, 2)]
    assert mixed != _expected(rows, 2)  # the first batches' amounts were added once
    return state, env, log, rows, mixed, staged_watermark(state / "staging.duckdb")


def test_reprocess_recomputes_a_table_whose_logic_changed(
    broker: EmbeddedKafka, tmp_path: Path
) -> None:
    state, env, log, rows, mixed, watermark = _mixed_run(broker, tmp_path)

    # a pipeline runs on staging: the shadow catches up, the old rows keep serving
    live = start_streamdi(["run", V2, "--no-collect", "--no-progress"], env, log)
    try:
        _wait_until_in_use(state / "staging.duckdb", live)
        out = tmp_path / "first.json"
        code = run_streamdi(["upgrade", "reprocess", V2, "totals", "--json", str(out)], env, log)
        assert code == 3, log.read_text()
        first = json.loads(out.read_text())
        assert first["cut_over"] is False
        assert first["shadow_events"] > 0
        assert shadow_path(load_settings(streamdi={"state_dir": str(state)}), "tally").exists()
    finally:
        live.send_signal(signal.SIGTERM)
        assert live.wait(60) == 0, log.read_text()
    assert _staged_totals(state) == mixed

    # stopped: cut over in one batch, in staging and in the warehouse
    out = tmp_path / "second.json"
    code = run_streamdi(["upgrade", "reprocess", V2, "totals", "--json", str(out)], env, log)
    assert code == 0, log.read_text()
    second = json.loads(out.read_text())
    assert second["cut_over"] is True
    assert second["batch"] == watermark + 1
    changed = [a for a, b in zip(mixed, _expected(rows, 2), strict=True) if a != b]
    assert second["upserted"]["totals"] == len(changed) > 0
    assert second["deleted"]["totals"] == 0
    assert _staged_totals(state) == _expected(rows, 2)
    assert staged_watermark(state / "staging.duckdb") == watermark + 1
    assert _warehouse_totals(state) == (_expected(rows, 2), watermark + 1)
    assert not shadow_path(load_settings(streamdi={"state_dir": str(state)}), "tally").exists()

    # again: the shadow equals staging, nothing is committed twice
    code = run_streamdi(["upgrade", "reprocess", V2, "totals", "--json", str(out)], env, log)
    assert code == 0, log.read_text()
    third = json.loads(out.read_text())
    assert third["batch"] is None and third["upserted"] == {"totals": 0}
    assert staged_watermark(state / "staging.duckdb") == watermark + 1
    assert _warehouse_totals(state) == (_expected(rows, 2), watermark + 1)


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["nope"], "is neither a state table nor a sink"),
        (["totals", "--from", "yesterday"], "expected start, a batch id or an ISO 8601 time"),
        (["totals", "--from", "3"], "no checkpoint at or before batch 2"),
    ],
)
def test_reprocess_refuses_what_it_cannot_recompute(
    broker: EmbeddedKafka, tmp_path: Path, args: list[str], reason: str
) -> None:
    events = tmp_path / "events.csv"
    _write_events(events)
    env = _env(broker, tmp_path)
    log = tmp_path / "run.log"
    assert run_streamdi(["upgrade", "reprocess", V2, *args], env, log) == 1
    assert reason in log.read_text()


@pytest.mark.parametrize("phase", ["caught-up", "committed", "pushed"])
def test_a_killed_reprocess_cuts_over_exactly_once_on_rerun(
    broker: EmbeddedKafka, tmp_path: Path, phase: str
) -> None:
    state, env, log, rows, mixed, watermark = _mixed_run(broker, tmp_path)
    args = ["upgrade", "reprocess", V2, "totals"]
    code = run_streamdi([*args, "--crash-at", phase], env, log)
    assert code == -signal.SIGKILL, log.read_text()
    cut = phase != "caught-up"
    assert _staged_totals(state) == (_expected(rows, 2) if cut else mixed)
    assert staged_watermark(state / "staging.duckdb") == watermark + (1 if cut else 0)

    out = tmp_path / "rerun.json"
    assert run_streamdi([*args, "--json", str(out)], env, log) == 0, log.read_text()
    rerun = json.loads(out.read_text())
    assert rerun["batch"] == (None if cut else watermark + 1)
    assert _staged_totals(state) == _expected(rows, 2)
    assert staged_watermark(state / "staging.duckdb") == watermark + 1
    assert _warehouse_totals(state) == (_expected(rows, 2), watermark + 1)


def test_reprocess_from_a_batch_starts_at_the_checkpoint_before_it(
    broker: EmbeddedKafka, tmp_path: Path
) -> None:
    events = tmp_path / "events.csv"
    rows = _write_events(events)
    state = tmp_path / "state"
    env = _env(
        broker,
        tmp_path,
        MIGRATION__TARGETS="duckdb",
        STAGING__CHECKPOINT_EVERY_S="0.001",  # after (nearly) every commit
        STAGING__CHECKPOINTS_KEEP="20",
    )
    log = tmp_path / "run.log"
    assert run_streamdi(["collect", V1], env, log) == 0, log.read_text()
    args = ["run", V1, "--no-collect", "--no-progress", "--until-idle", "1"]
    assert run_streamdi(args, env, log) == 0, log.read_text()
    assert _staged_totals(state, version=1) == _expected(rows, 1)
    assert run_streamdi(["upgrade", "apply", V2], env, log) == 0, log.read_text()
    watermark = staged_watermark(state / "staging.duckdb")
    inner = [c for c in list_checkpoints(state / "staging.duckdb") if 0 < c.watermark < watermark]
    assert inner, "no checkpoint between the first and the last batch"
    checkpoint = inner[len(inner) // 2]
    applied = checkpoint.streams["events"].events  # the events before the checkpoint

    out = tmp_path / "from.json"
    args = ["upgrade", "reprocess", V2, "totals", "--from", str(checkpoint.watermark + 1)]
    assert run_streamdi([*args, "--json", str(out)], env, log) == 0, log.read_text()
    report = json.loads(out.read_text())
    assert f"the checkpoint after batch {checkpoint.watermark}" in report["start"]
    assert report["batch"] == watermark + 1
    # version 1 up to the checkpoint, version 2 from there on
    expected = _combined(_expected(rows[:applied], 1), _expected(rows[applied:], 2))
    assert _staged_totals(state) == expected
    assert _warehouse_totals(state) == (expected, watermark + 1)


def test_a_seeded_staging_is_reprocessed_from_its_seed(
    broker: EmbeddedKafka, tmp_path: Path
) -> None:
    events = tmp_path / "events.csv"
    rows = _write_events(events)
    state = tmp_path / "state"
    seed = {key: (1_000, 1) for key in range(5)}
    flow = tally(1)
    image = StateImage(
        {
            "totals": rows_to_table(
                flow.tables["totals"],
                [{"key": k, "total": t, "n": n} for k, (t, n) in seed.items()],
            )
        },
        {},
    )
    with StagingStore(state / "staging.duckdb", flow, background_merge=False) as store:
        store.seed(image)  # a historical load's state: not in Kafka
    env = _env(broker, tmp_path)
    log = tmp_path / "run.log"
    assert run_streamdi(["collect", V1], env, log) == 0, log.read_text()
    args = ["run", V1, "--no-collect", "--no-progress", "--until-idle", "1"]
    assert run_streamdi(args, env, log) == 0, log.read_text()
    assert run_streamdi(["upgrade", "apply", V2], env, log) == 0, log.read_text()
    expected = _combined(sorted((k, t, n) for k, (t, n) in seed.items()), _expected(rows, 2))

    # without the seed's checkpoint the state cannot be recomputed from Kafka alone
    kept = tmp_path / "kept-checkpoints"
    checkpoints_dir(state / "staging.duckdb").rename(kept)
    assert run_streamdi(["upgrade", "reprocess", V2, "totals"], env, log) == 1
    assert "the seed's checkpoint is missing" in log.read_text()
    kept.rename(checkpoints_dir(state / "staging.duckdb"))

    out = tmp_path / "seeded.json"
    args = ["upgrade", "reprocess", V2, "totals", "--json", str(out)]
    assert run_streamdi(args, env, log) == 0, log.read_text()
    assert "the checkpoint after batch 0" in json.loads(out.read_text())["start"]
    assert _staged_totals(state) == expected


def _combined(*parts: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """Totals of several parts of the input added up per key."""
    out: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for part in parts:
        for key, total, n in part:
            out[key][0] += total
            out[key][1] += n
    return sorted((k, t, n) for k, (t, n) in out.items())


def test_input_gone_from_kafka_is_offered_again_from_its_file(
    broker: EmbeddedKafka, tmp_path: Path
) -> None:
    from kafka import KafkaAdminClient, TopicPartition

    from ingest.broker import client_config

    state, env, log, rows, _, watermark = _mixed_run(broker, tmp_path)
    # retention deletes what the pipeline consumed
    kafka = load_settings().kafka
    admin = KafkaAdminClient(**client_config(kafka, broker.bootstrap_servers))
    try:
        with StagingStore(state / "staging.duckdb", tally(2), background_merge=False) as store:
            consumed = store.offsets()[(_topic(tmp_path), 0)]
        admin.delete_records({TopicPartition(_topic(tmp_path), 0): consumed})
    finally:
        admin.close()
    args = ["upgrade", "reprocess", V2, "totals"]
    assert run_streamdi(args, env, log) == 1
    assert "offer the inputs again (--reoffer)" in log.read_text()

    out = tmp_path / "reoffer.json"
    assert run_streamdi([*args, "--reoffer", "--json", str(out)], env, log) == 0, log.read_text()
    report = json.loads(out.read_text())
    assert "events offered again from the input" in report["start"]
    assert report["shadow_events"] == EVENTS
    assert report["batch"] == watermark + 1
    assert _staged_totals(state) == _expected(rows, 2)
    assert _warehouse_totals(state) == (_expected(rows, 2), watermark + 1)
    admin = KafkaAdminClient(**client_config(kafka, broker.bootstrap_servers))
    try:  # the shadow's topic went with it
        assert not [t for t in admin.list_topics() if t.startswith("reprocess.tally.")]
    finally:
        admin.close()


def _warehouse_sink(state: Path) -> list[tuple[int, int, int]]:
    """The DuckDB warehouse's ``tallied`` rows: (batch_id, key, amount)."""
    rows, _ = _warehouse_rows(state, "tallied")
    return sorted((r["batch_id"], r["key"], r["amount"]) for r in rows)


def test_a_sink_is_redelivered_in_place_of_its_old_rows(
    broker: EmbeddedKafka, tmp_path: Path
) -> None:
    state, env, log, rows, _, watermark = _mixed_run(broker, tmp_path)
    before = _warehouse_sink(state)
    assert len(before) == EVENTS
    assert sorted((k, a) for _, k, a in before) != sorted((k, 2 * a) for k, a in rows)

    out = tmp_path / "sink.json"
    args = ["upgrade", "reprocess", V2, "tallied", "totals", "--json", str(out)]
    assert run_streamdi(args, env, log) == 0, log.read_text()
    report = json.loads(out.read_text())
    assert report["batch"] == watermark + 1
    assert report["retracted"] == {"tallied": [1, watermark]}
    assert report["upserted"]["tallied"] == EVENTS
    after = _warehouse_sink(state)
    assert sorted((k, a) for _, k, a in after) == sorted((k, 2 * a) for k, a in rows)
    assert {b for b, _, _ in after} == {watermark + 1}
    assert _warehouse_totals(state) == (_expected(rows, 2), watermark + 1)

    # a rerun after the cut-over (the shadow kept, as a crash after the push leaves it) changes
    # nothing: staging holds this shadow's retraction
    code = run_streamdi([*args[:-2], "--crash-at", "pushed"], env, log)
    assert code == -signal.SIGKILL, log.read_text()
    assert run_streamdi(args, env, log) == 0, log.read_text()
    rerun = json.loads(out.read_text())
    assert rerun["done_in"] == watermark + 2 and rerun["batch"] is None
    assert staged_watermark(state / "staging.duckdb") == watermark + 2
    assert len(_warehouse_sink(state)) == EVENTS


def test_a_table_added_under_a_new_name_is_filled_from_the_retained_input(
    broker: EmbeddedKafka, tmp_path: Path
) -> None:
    state, env, log, rows, _, watermark = _mixed_run(broker, tmp_path)
    assert run_streamdi(["upgrade", "apply", V3], env, log) == 0, log.read_text()
    out = tmp_path / "spread.json"
    args = ["upgrade", "reprocess", V3, "spread", "--json", str(out)]
    assert run_streamdi(args, env, log) == 0, log.read_text()
    assert json.loads(out.read_text())["upserted"] == {"spread": 2}
    with StagingStore(state / "staging.duckdb", tally(3), background_merge=False) as store:
        spread = store.state_table("spread").to_pylist()
    evens = sum(1 for key, _ in rows if key % 2 == 0)
    assert spread == [{"parity": 0, "n": evens}, {"parity": 1, "n": EVENTS - evens}]
    assert staged_watermark(state / "staging.duckdb") == watermark + 1
