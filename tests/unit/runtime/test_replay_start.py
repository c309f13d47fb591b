"""Where a reprocess starts (runtime.replay_start): ``--from`` names the newest checkpoint at or
before the batch (or the time) it gives, a seeded file starts from its seed, and a start no
checkpoint serves is refused with the checkpoints there are; a shadow is set up at its start
once, and discarded for another start."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from etl_dataflows.executors import create_executor
from etl_dataflows.state import StateImage, rows_to_table
from runtime.replay_start import START_META, ReprocessRefused, prepare_shadow, resolve_start
from staging import StagingStore
from staging.checkpoints import list_checkpoints, take_checkpoint
from tests.unit.staging.helpers import simple_commit
from tests.unit.staging.test_upgrade import bank, batches


def _store(path: Path, *, seeded: bool, takes: tuple[int, ...]) -> None:
    """Batches 1-5 of the bank dataflow, a checkpoint after each batch in ``takes``."""
    flow = bank(1)
    image = StateImage(
        {"accounts": rows_to_table(flow.tables["accounts"], [{"id": 1, "balance": 9}])}, {}
    )
    with StagingStore(path, flow, background_merge=False) as store:
        if seeded:
            store.seed(image)
        oracle = create_executor("serial", flow, image if seeded else None)
        for batch in batches(flow, 1, 5, seed=3):
            store.commit([simple_commit(batch.batch_id, oracle.run_batch(batch))])
            if batch.batch_id in takes:
                take_checkpoint(store)


def _watermark(path: Path, text: str) -> int | None:
    checkpoint = resolve_start(path, text).checkpoint
    return None if checkpoint is None else checkpoint.watermark


def test_a_batch_starts_from_the_newest_checkpoint_before_it(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    _store(path, seeded=True, takes=(2, 5))
    assert _watermark(path, "start") == 0  # the seed: its state is not in Kafka
    assert _watermark(path, "1") == 0
    assert _watermark(path, "2") == 0
    assert _watermark(path, "3") == 2
    assert _watermark(path, "5") == 2
    assert _watermark(path, "6") == 5
    assert "checkpoint after batch 2" in resolve_start(path, "4").describe()


def test_a_time_starts_from_the_newest_checkpoint_committed_by_then(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    _store(path, seeded=False, takes=(2, 5))
    second, fifth = list_checkpoints(path)
    assert second.committed_at is not None and fifth.committed_at is not None
    assert _watermark(path, second.committed_at.isoformat()) == 2
    assert _watermark(path, fifth.committed_at.isoformat()) == 5
    early = (second.committed_at - timedelta(days=1)).isoformat()
    with pytest.raises(ReprocessRefused, match="after batch 2, after batch 5"):
        resolve_start(path, early)
    with pytest.raises(ReprocessRefused, match="ISO 8601"):
        resolve_start(path, "yesterday")


def test_without_checkpoints_only_the_first_record_serves(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    _store(path, seeded=False, takes=())
    assert _watermark(path, "start") is None
    assert resolve_start(path, "start").describe() == "the first record of every partition"
    assert _watermark(path, "1") is None
    with pytest.raises(ReprocessRefused, match=r"no checkpoint at or before batch 2 .*none"):
        resolve_start(path, "3")
    with pytest.raises(ReprocessRefused, match="start at 1"):
        resolve_start(path, "0")


def test_a_shadow_is_set_up_at_its_start_once(tmp_path: Path) -> None:
    live = tmp_path / "s.duckdb"
    _store(live, seeded=False, takes=(3,))
    (checkpoint,) = list_checkpoints(live)
    shadow = tmp_path / "shadow" / "staging.duckdb"
    flow = bank(1)
    start = resolve_start(live, "4")
    prepare_shadow(shadow, flow, start)
    with StagingStore(shadow, flow, background_merge=False) as store:
        assert store.meta(START_META) == "checkpoint:3"
        assert store.watermark == 1  # the checkpoint's progress, as one batch of no events
        assert store.offsets() == checkpoint.offsets
        assert store.load_state().equals(checkpoint.image(flow))
        store.commit(
            [
                simple_commit(
                    2, create_executor("serial", flow).run_batch(batches(flow, 2, 1, seed=1)[0])
                )
            ]
        )
    prepare_shadow(shadow, flow, start)  # the same start: kept as it is
    with StagingStore(shadow, flow, background_merge=False) as store:
        assert store.watermark == 2
    prepare_shadow(shadow, flow, resolve_start(live, "start"))  # another start: a new shadow
    with StagingStore(shadow, flow, background_merge=False) as store:
        assert store.watermark == 0 and store.meta(START_META) == "start"
