"""Checkpoints of staging (staging.checkpoints): a checkpoint holds the state and progress of
exactly one committed batch and reads back equal; it appears whole or not at all; the newest few
are kept, and a seeded file's seed checkpoint always; a checkpoint of an earlier version reads
back converted; the checkpointer takes one at stop when one is due."""

from __future__ import annotations

from pathlib import Path

from etl_dataflows.evolution import describe_flow
from etl_dataflows.evolution.convert import convert_image
from etl_dataflows.executors import create_executor
from etl_dataflows.state import StateImage, rows_to_table
from staging import StagingStore
from staging.checkpoints import Checkpointer, checkpoints_dir, list_checkpoints, take_checkpoint
from tests.unit.staging.helpers import simple_commit
from tests.unit.staging.test_upgrade import bank, batches


def _commit(store: StagingStore, oracle: object, first: int, count: int) -> None:
    for batch in batches(store.flow, first, count, seed=first):
        store.commit([simple_commit(batch.batch_id, oracle.run_batch(batch))])  # type: ignore[attr-defined]


def test_a_checkpoint_reads_back_the_state_and_progress_of_its_batch(tmp_path: Path) -> None:
    flow = bank(1)
    oracle = create_executor("serial", flow)
    with StagingStore(tmp_path / "s.duckdb", flow, background_merge=False) as store:
        _commit(store, oracle, 1, 3)
        taken = take_checkpoint(store)
        expected = store.load_state()
        offsets, streams = store.offsets(), store.streams()
        _commit(store, oracle, 4, 2)  # later batches change nothing in it
        assert take_checkpoint(store).watermark == 5
        again = [c for c in list_checkpoints(store.path) if c.watermark == 3]
    assert [c.watermark for c in list_checkpoints(tmp_path / "s.duckdb")] == [3, 5]
    (read,) = again
    assert read.watermark == taken.watermark == 3
    assert read.image(flow).equals(expected)
    assert read.offsets == offsets and read.streams == streams
    assert read.committed_at is not None and not read.seeded


def test_a_checkpoint_of_a_batch_taken_twice_is_the_same(tmp_path: Path) -> None:
    flow = bank(1)
    with StagingStore(tmp_path / "s.duckdb", flow, background_merge=False) as store:
        _commit(store, create_executor("serial", flow), 1, 2)
        first = take_checkpoint(store)
        assert take_checkpoint(store).taken_at == first.taken_at


def test_half_written_checkpoints_are_ignored_and_pruning_keeps_the_newest_and_the_seed(
    tmp_path: Path,
) -> None:
    flow = bank(1)
    seed = StateImage(
        {"accounts": rows_to_table(flow.tables["accounts"], [{"id": 1, "balance": 500}])}, {}
    )
    path = tmp_path / "s.duckdb"
    with StagingStore(path, flow, background_merge=False) as store:
        store.seed(seed)  # takes the seed's checkpoint
        (checkpoints_dir(path) / "000000000009.tmp").mkdir()  # a take a crash cut short
        assert [(c.watermark, c.seeded) for c in list_checkpoints(path)] == [(0, True)]
        oracle = create_executor("serial", flow, seed)
        for batch in batches(flow, 1, 3, seed=2):
            store.commit([simple_commit(batch.batch_id, oracle.run_batch(batch))])
            take_checkpoint(store, keep=1)
    assert [c.watermark for c in list_checkpoints(path)] == [0, 3]
    assert not (checkpoints_dir(path) / "000000000009.tmp").exists()
    assert list_checkpoints(path)[0].image(flow).equals(seed)


def test_a_checkpoint_of_an_earlier_version_reads_back_converted(tmp_path: Path) -> None:
    v1, v2 = bank(1), bank(2)
    with StagingStore(tmp_path / "s.duckdb", v1, background_merge=False) as store:
        _commit(store, create_executor("serial", v1), 1, 3)
        checkpoint = take_checkpoint(store)
        state = store.load_state()
    converted = checkpoint.image(v2)
    assert converted.equals(convert_image(state, describe_flow(v1), v2))
    assert "tier" in converted.tables["accounts"].column_names


def test_the_checkpointer_takes_one_at_stop_when_one_is_due(tmp_path: Path) -> None:
    flow = bank(1)
    oracle = create_executor("serial", flow)
    with StagingStore(tmp_path / "s.duckdb", flow, background_merge=False) as store:
        checkpointer = Checkpointer(store, every_s=3600, keep=3)
        checkpointer.start()
        checkpointer.stop()
        assert list_checkpoints(store.path) == []  # nothing committed: nothing to take
        _commit(store, oracle, 1, 2)
        checkpointer = Checkpointer(store, every_s=3600, keep=3)
        checkpointer.start()
        checkpointer.stop()
        assert [c.watermark for c in list_checkpoints(store.path)] == [2]
        _commit(store, oracle, 3, 1)
        checkpointer = Checkpointer(store, every_s=3600, keep=3)  # the last one is too recent
        checkpointer.start()
        checkpointer.notify()
        checkpointer.stop()
        assert [c.watermark for c in list_checkpoints(store.path)] == [2]
