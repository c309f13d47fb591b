"""State folded every few batches (staging.folding): after every commit — folding or not, grouped
or not, across a reopen, a release and a failed commit — ``state.<table>`` equals the engine's
state, and the folded tables hold exactly the batches ``state_folded_through`` says."""

from __future__ import annotations

from pathlib import Path

import pytest

from etl_dataflows import create_executor
from etl_dataflows.batch import BatchResult
from etl_dataflows.state import StateImage
from etl_dataflows.testing import WorkloadSpec, ledger_workload, make_batch
from staging import StagingStore, folding
from staging.exceptions import StagingCommitFailed
from staging.handoff import StagedDeltas
from tests.unit.staging.helpers import customers_flow, simple_commit


@pytest.fixture(autouse=True)
def _fold_every_3(monkeypatch: pytest.MonkeyPatch) -> None:
    """A commit folds every third batch."""
    monkeypatch.setattr(folding, "FOLD_BATCHES", 3)


def _run(batches: int, seed: int = 5) -> tuple[object, list[BatchResult], list[StateImage]]:
    """The ledger workload (opens, closes: inserts and deletes) run by the serial oracle: each
    batch's result and the engine's state after it."""
    work = ledger_workload(
        WorkloadSpec(keys=30, batch_size=120, batches=batches, insert_delete_ratio=0.2, seed=seed)
    )
    executor = create_executor("serial", work.flow)
    results, images = [], []
    for batch in work.batches:
        results.append(executor.run_batch(batch))
        images.append(executor.state_image())
    return work.flow, results, images


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
    return int(store.query(f'SELECT count(*) AS n FROM state_base."{name}"')["n"][0].as_py())


def test_the_state_view_equals_the_engine_state_after_everysimple_commit(tmp_path: Path) -> None:
    flow, results, images = _run(12)
    with _store(tmp_path, flow) as store:
        folded = []
        for i, (result, image) in enumerate(zip(results[:11], images, strict=False), start=1):
            store.commit([simple_commit(i, result)])
            assert store.load_state().equals(image), f"after batch {i}"
            assert _sorted(store.load_state(sorted_rows=False), store).equals(image)
            folded.append(int(store.meta(folding.FOLDED_THROUGH) or 0))
        # folds at 3, 6, 9 (every third batch), and the folded table holds what it says
        assert folded == [0, 0, 3, 3, 3, 6, 6, 6, 9, 9, 9]
        assert store.state_folder.folded_through == 9
        assert _folded_rows(store, "accounts") == images[8].tables["accounts"].num_rows
    # a reopened store reads the two waiting batches back from the delta log
    with _store(tmp_path, flow) as store:
        assert store.load_state().equals(images[10])
        assert store.state_folder.waiting
        store.commit([simple_commit(12, results[11])])  # a fold is due
        assert store.meta(folding.FOLDED_THROUGH) == "12"
        assert not store.state_folder.waiting
        assert store.load_state().equals(images[11])


def test_a_group_commit_folds_the_batches_it_carries(tmp_path: Path) -> None:
    flow, results, images = _run(8, seed=9)
    with _store(tmp_path, flow) as store:
        store.commit([simple_commit(1, results[0])])
        store.commit([simple_commit(i, results[i - 1]) for i in (2, 3, 4, 5)])  # folds 1..5
        assert store.meta(folding.FOLDED_THROUGH) == "5"
        assert store.load_state().equals(images[4])
        assert _folded_rows(store, "accounts") == images[4].tables["accounts"].num_rows
        store.commit([simple_commit(6, results[5]), simple_commit(7, results[6])])
        assert store.meta(folding.FOLDED_THROUGH) == "5"
        assert store.load_state().equals(images[6])


def test_a_release_folds_before_it_hides_a_delta(tmp_path: Path) -> None:
    flow, results, images = _run(5, seed=2)
    with _store(tmp_path, flow) as store:
        for i in (1, 2, 3, 4, 5):
            store.commit([simple_commit(i, results[i - 1])])
        assert store.meta(folding.FOLDED_THROUGH) == "3"
        staged = StagedDeltas(store)
        staged.acknowledge("duckdb", 5)
        assert staged.release(["duckdb"], 0) == 5
        # the delta log holds nothing any more; the state is whole from the folded tables
        assert store.query('SELECT count(*) AS n FROM delta_log."accounts"')["n"][0].as_py() == 0
        assert store.meta(folding.FOLDED_THROUGH) == "5"
        assert store.load_state().equals(images[4])
    with _store(tmp_path, flow) as store:
        assert store.load_state().equals(images[4])


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
        assert store.meta(folding.FOLDED_THROUGH) == "0"
        assert store.load_state().equals(images[1])
        store.commit([simple_commit(3, results[2])])
        store.commit([simple_commit(4, results[3])])
        assert store.meta(folding.FOLDED_THROUGH) == "3"
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
        assert store.meta(folding.FOLDED_THROUGH) == "6"
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
        assert store.meta(folding.FOLDED_THROUGH) == "0"
        assert store.fold_state(least=2)
        assert store.meta(folding.FOLDED_THROUGH) == "2"
        assert _folded_rows(store, "accounts") == images[1].tables["accounts"].num_rows
        assert not store.fold_state()  # nothing waits
        store.commit([simple_commit(3, results[2])])
        assert store.load_state().equals(images[2])
