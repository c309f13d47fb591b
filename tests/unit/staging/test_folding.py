"""State folded every few batches (staging.folding): after every commit — folding or not, grouped
or not, across a reopen, a release and a failed commit — ``state.<table>`` equals the engine's
state, and the folded tables hold exactly the batches ``state_folded_through`` says."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from etl_dataflows import create_executor
from etl_dataflows.batch import BatchResult
from etl_dataflows.state import StateImage
from etl_dataflows.testing import make_batch
from staging import StagingStore, folding, state_file
from staging.exceptions import StagingCommitFailed
from staging.handoff import StagedDeltas
from tests.unit.staging.helpers import customers_flow, oracle_run, simple_commit


@pytest.fixture(autouse=True)
def _fold_every_3(monkeypatch: pytest.MonkeyPatch) -> None:
    """A commit folds every third batch."""
    monkeypatch.setattr(folding, "FOLD_BATCHES", 3)


def _run(batches: int, seed: int = 5) -> tuple[object, list[BatchResult], list[StateImage]]:
    return oracle_run(batches, seed)


def _store(tmp_path: Path, flow: object) -> StagingStore:
    return StagingStore(tmp_path / "s.duckdb", flow, background_merge=False)  # type: ignore[arg-type]


def _sorted(image: StateImage, store: StagingStore) -> StateImage:
    """``image`` with every table sorted by row id (a resume reads staging's state unsorted)."""
    tables = {
        name: table.sort_by([(c, "ascending") for c in store.flow.tables[name].row_id()])
        for name, table in image.tables.items()
    }
    return StateImage(tables, image.sequences)


def _folded_rows(store: StagingStore, name: str) -> int:
    table = state_file.table_ref(store.state_tables[name])
    return int(store.query(f"SELECT count(*) AS n FROM {table}")["n"][0].as_py())


def test_the_state_view_equals_the_engine_state_after_everysimple_commit(tmp_path: Path) -> None:
    flow, results, images = _run(12)
    with _store(tmp_path, flow) as store:
        folded = []
        for i, (result, image) in enumerate(zip(results[:11], images, strict=False), start=1):
            store.commit([simple_commit(i, result)])
            assert store.load_state().equals(image), f"after batch {i}"
            assert _sorted(store.load_state(sorted_rows=False), store).equals(image)
            folded.append(store.folded_through())
        # folds at 3, 6, 9 (every third batch), and the folded table holds what it says
        assert folded == [0, 0, 3, 3, 3, 6, 6, 6, 9, 9, 9]
        assert store.state_folder.folded_through == 9
        assert _folded_rows(store, "accounts") == images[8].tables["accounts"].num_rows
    # a reopened store reads the two waiting batches back from the delta log
    with _store(tmp_path, flow) as store:
        assert store.load_state().equals(images[10])
        assert store.state_folder.waiting
        store.commit([simple_commit(12, results[11])])  # a fold is due
        assert store.folded_through() == 12
        assert not store.state_folder.waiting
        assert store.load_state().equals(images[11])


def test_a_group_commit_folds_the_batches_it_carries(tmp_path: Path) -> None:
    flow, results, images = _run(8, seed=9)
    with _store(tmp_path, flow) as store:
        store.commit([simple_commit(1, results[0])])
        store.commit([simple_commit(i, results[i - 1]) for i in (2, 3, 4, 5)])  # folds 1..5
        assert store.folded_through() == 5
        assert store.load_state().equals(images[4])
        assert _folded_rows(store, "accounts") == images[4].tables["accounts"].num_rows
        store.commit([simple_commit(6, results[5]), simple_commit(7, results[6])])
        assert store.folded_through() == 5
        assert store.load_state().equals(images[6])


def _delta_batches(store: StagingStore) -> list[int]:
    """The last batch of every registered delta-log segment of ``accounts``, oldest first."""
    return [s.last_batch for s in store.catalog.segments[("delta_log", "accounts")]]


def test_a_release_keeps_the_deltas_not_folded_yet_for_the_state_view(tmp_path: Path) -> None:
    flow, results, images = _run(7, seed=2)
    with _store(tmp_path, flow) as store:
        for i in (1, 2, 3, 4, 5):
            store.commit([simple_commit(i, results[i - 1])])
        assert store.folded_through() == 3
        staged = StagedDeltas(store)
        staged.acknowledge("duckdb", 5)
        assert staged.release(["duckdb"], 0) == 5
        # the release does not fold: batches 4 and 5 stay registered (hidden from the delta
        # log's view, which only migration reads) and the state view still overlays them
        assert store.folded_through() == 3
        assert _delta_batches(store) == [4, 5]
        assert store.query('SELECT count(*) AS n FROM delta_log."accounts"')["n"][0].as_py() == 0
        assert store.load_state().equals(images[4])
    kept = [store.segment_folder.path(s) for s in store.catalog.all() if s.relation == "delta_log"]
    # a reopened store reads the kept deltas back, though they are released
    with _store(tmp_path, flow) as store:
        assert store.load_state().equals(images[4])
        assert store.state_folder.waiting_batches == 2
        store.commit([simple_commit(6, results[5])])  # a fold is due: 4, 5 and 6
        assert store.folded_through() == 6
        assert store.load_state().equals(images[5])
        staged = StagedDeltas(store)
        # nothing new acknowledged, but the kept segments are folded now: they go
        assert staged.release(["duckdb"], 0) == 5
        assert _delta_batches(store) == [6]
        assert store.load_state().equals(images[5])
        assert kept and not any(path.exists() for path in kept)  # their files are gone too
        store.commit([simple_commit(7, results[6])])
        staged.acknowledge("duckdb", 7)
        assert staged.release(["duckdb"], 0) == 7
        assert _delta_batches(store) == [7]  # not folded yet: kept
        assert store.load_state().equals(images[6])
    with _store(tmp_path, flow) as store:
        assert store.load_state().equals(images[6])


def test_a_failed_folding_commit_leaves_the_state_as_it_was(tmp_path: Path) -> None:
    flow, results, images = _run(4, seed=4)
    with _store(tmp_path, flow) as store:
        store.commit([simple_commit(1, results[0])])
        store.commit([simple_commit(2, results[1])])

        def fail(step: str) -> None:
            if step == "commit":
                raise RuntimeError("injected")

        with pytest.raises(StagingCommitFailed):
            store.commit([simple_commit(3, results[2])], hook=fail)  # the fold was due
        assert store.folded_through() == 0
        assert store.load_state().equals(images[1])
        store.commit([simple_commit(3, results[2])])
        store.commit([simple_commit(4, results[3])])
        assert store.folded_through() == 3
        assert store.load_state().equals(images[3])


def test_history_versions_survive_the_fold(tmp_path: Path) -> None:
    flow = customers_flow()
    executor = create_executor("serial", flow)
    day = 86_400_000_000
    with _store(tmp_path, flow) as store:
        for i in range(1, 8):
            changes = [{"id": k, "tier": i * 10 + k, "_ts": i * day} for k in (1, 2, i % 3)]
            batch = make_batch(flow, i, changes=changes)
            store.commit([simple_commit(i, executor.run_batch(batch))])
            assert store.load_state().equals(executor.state_image()), f"after batch {i}"
        assert store.folded_through() == 6
        versions = store.query('SELECT count(*) AS n FROM state."customer"')["n"][0].as_py()
        assert versions == executor.state_image().tables["customer"].num_rows > 7


def test_fold_state_waits_for_enough_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(folding, "FOLD_BATCHES", 10_000)  # commits never fold here
    flow, results, images = _run(3, seed=8)
    with _store(tmp_path, flow) as store:
        store.commit([simple_commit(1, results[0])])
        store.commit([simple_commit(2, results[1])])
        assert not store.fold_state(least=3)
        assert store.folded_through() == 0
        assert store.fold_state(least=2)
        assert store.folded_through() == 2
        assert _folded_rows(store, "accounts") == images[1].tables["accounts"].num_rows
        assert not store.fold_state()  # nothing waits
        store.commit([simple_commit(3, results[2])])
        assert store.load_state().equals(images[2])


def test_a_fold_beside_a_commit_keeps_the_state_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fold in a transaction of its own (the housekeeping thread's) while a commit commits:
    DuckDB keeps them apart, the batch committed meanwhile stays waiting, the next fold takes
    it."""
    monkeypatch.setattr(folding, "FOLD_BATCHES", 10_000)  # commits never fold here
    flow, results, images = _run(6, seed=11)
    real_apply = folding.apply_deltas
    with _store(tmp_path, flow) as store:
        for i in (1, 2, 3):
            store.commit([simple_commit(i, results[i - 1])])
        committed_inside: list[int] = []

        def apply_then_commit(*args: object) -> None:
            real_apply(*args)  # type: ignore[arg-type]
            if not committed_inside:  # the fold's transaction is open: batch 4 commits now
                committed_inside.append(4)
                store.commit([simple_commit(4, results[3])])
                assert store.load_state().equals(images[3])

        monkeypatch.setattr(folding, "apply_deltas", apply_then_commit)
        assert store.fold_state()
        monkeypatch.setattr(folding, "apply_deltas", real_apply)
        assert committed_inside == [4]
        assert store.folded_through() == 3
        assert store.state_folder.waiting_batches == 1
        assert store.load_state().equals(images[3])
        assert _folded_rows(store, "accounts") == images[2].tables["accounts"].num_rows
        store.commit([simple_commit(5, results[4])])
        assert store.fold_state()
        assert store.folded_through() == 5
        assert _folded_rows(store, "accounts") == images[4].tables["accounts"].num_rows
        assert store.load_state().equals(images[4])
        store.commit([simple_commit(6, results[5])])
    with _store(tmp_path, flow) as store:
        assert store.load_state().equals(images[5])


def test_a_store_with_a_housekeeping_thread_folds_there_never_in_a_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folded_by: list[str] = []
    real_stage = folding.StateFolder.stage_fold

    def stage_fold(self: folding.StateFolder, *args: object, **kwargs: object) -> None:
        folded_by.append(threading.current_thread().name)
        real_stage(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(folding.StateFolder, "stage_fold", stage_fold)
    flow, results, images = _run(7, seed=12)
    store = StagingStore(tmp_path / "s.duckdb", flow)  # type: ignore[arg-type]
    try:
        for i, (result, image) in enumerate(zip(results, images, strict=True), start=1):
            store.commit([simple_commit(i, result)])
            assert store.load_state().equals(image), f"after batch {i}"
        folder = store.state_folder
        deadline = time.monotonic() + 30
        while (folder.due_now() or not folder.folded_through) and time.monotonic() < deadline:
            time.sleep(0.02)
        through = folder.folded_through
        assert through >= 5  # fewer than 3 batches wait once no fold is due
        assert folded_by and set(folded_by) == {"segment-merger"}  # never in a commit
        assert store.folded_through() == through
        assert _folded_rows(store, "accounts") == images[through - 1].tables["accounts"].num_rows
        assert store.load_state().equals(images[6])
    finally:
        store.close()


def test_a_commit_does_not_fold_while_another_fold_runs(tmp_path: Path) -> None:
    """One fold at a time: a commit that makes a fold due while another fold holds the fold
    lock (the housekeeping thread's) leaves its deltas waiting; the next fold takes them."""
    flow, results, images = _run(4, seed=13)
    with _store(tmp_path, flow) as store:
        for i in (1, 2):
            store.commit([simple_commit(i, results[i - 1])])
        with store.state_folder.fold_lock:  # a fold runs
            store.commit([simple_commit(3, results[2])])  # due, but left waiting
        assert store.folded_through() == 0
        assert store.state_folder.waiting_batches == 3
        assert store.load_state().equals(images[2])
        store.commit([simple_commit(4, results[3])])  # due still: this one folds all four
        assert store.folded_through() == 4
        assert _folded_rows(store, "accounts") == images[3].tables["accounts"].num_rows
        assert store.load_state().equals(images[3])


def test_a_read_with_more_threads_gives_the_same_state_and_restores_the_setting(
    tmp_path: Path,
) -> None:
    """``load_state(threads=...)``: the same image as a read with the file's own setting, and
    the setting (one thread, the default) back after it, also when the read fails."""
    flow, results, images = _run(6)
    with _store(tmp_path, flow) as store:
        for i, result in enumerate(results, start=1):
            store.commit([simple_commit(i, result)])

        def threads() -> int:
            return int(store.query("SELECT current_setting('threads') AS t")["t"][0].as_py())

        assert threads() == 1
        wide = store.load_state(sorted_rows=False, threads=2)
        assert threads() == 1
        assert _sorted(wide, store).equals(images[-1])

        def fail(name: str, *, sorted_rows: bool = True) -> object:
            assert threads() == 2  # the read runs with the threads asked for
            raise RuntimeError("read failed")

        store.state_table = fail  # type: ignore[method-assign]
        with pytest.raises(RuntimeError, match="read failed"):
            store.load_state(threads=2)
        assert threads() == 1
