"""The folded state in a file of its own (staging.state_file): a file of layout 7 moves its folded
rows there when it opens (again after a crash between the two files' transactions), a seed or an
opening that dies between them leaves no table behind, and readers see the state of exactly one
batch while folds and releases commit beside them."""

from __future__ import annotations

import threading
from pathlib import Path

import duckdb
import pytest

from etl_dataflows.batch import BatchResult
from etl_dataflows.state import StateImage
from staging import StagingStore, folding, state_file
from staging.exceptions import StagingCommitFailed
from staging.handoff import StagedDeltas
from staging.layout import LAYOUT_VERSION
from staging.snapshot import open_snapshot
from tests.unit.staging.helpers import oracle_run, simple_commit


@pytest.fixture(autouse=True)
def _fold_every_3(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(folding, "FOLD_BATCHES", 3)


def _run(batches: int, seed: int = 7) -> tuple[object, list[BatchResult], list[StateImage]]:
    return oracle_run(batches, seed)


def _store(path: Path, flow: object, **kwargs: bool) -> StagingStore:
    return StagingStore(path, flow, background_merge=False, **kwargs)  # type: ignore[arg-type]


def _commit_all(path: Path, flow: object, results: list[BatchResult]) -> int:
    """Commit ``results`` as batches 1, 2, ... to the staging file at ``path`` and close it;
    returns the last batch its folded tables then hold."""
    with _store(path, flow) as store:
        for i, result in enumerate(results, start=1):
            store.commit([simple_commit(i, result)])
        return store.folded_through()


def _as_layout_7(path: Path, flow: object) -> None:
    """Rewrite a closed staging file as layout 7 wrote it: the folded rows in the staging file's
    own ``state_base`` schema, ``state_folded_through`` in its ``streamdi.meta``, no state file."""
    con = duckdb.connect(str(path))
    state_file.attach(con, path)
    tables = state_file.read_map(dict(con.execute("SELECT * FROM streamdi.meta").fetchall()))
    folded = state_file.read_meta(con, folding.FOLDED_THROUGH)
    con.execute("CREATE SCHEMA state_base")
    for name, table in tables.items():
        con.execute(
            f'CREATE TABLE state_base."{name}" AS SELECT * FROM {state_file.table_ref(table)}'
        )
    con.execute("DELETE FROM streamdi.meta WHERE key = 'state_tables'")
    con.execute("INSERT INTO streamdi.meta VALUES ('state_folded_through', ?)", [folded])
    con.execute("UPDATE streamdi.meta SET value = '7' WHERE key = 'layout_version'")
    con.execute(f"DETACH {state_file.STATE_CATALOG}")
    con.close()
    state_file.state_path(path).unlink()


def _die(*args: object) -> None:
    raise RuntimeError("killed between the two transactions")


def _staging_tables(path: Path) -> set[str]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        rows = con.execute("SELECT schema_name, table_name FROM duckdb_tables()").fetchall()
    finally:
        con.close()
    return {f"{s}.{t}" for s, t in rows}


def _state_file_tables(store: StagingStore) -> set[str]:
    cursor = store.cursor()
    try:
        return state_file.existing_tables(cursor)
    finally:
        cursor.close()


def test_a_file_of_layout_7_moves_its_folded_rows_into_the_state_file(tmp_path: Path) -> None:
    flow, results, images = _run(5)
    path = tmp_path / "s.duckdb"
    assert _commit_all(path, flow, results) == 3
    _as_layout_7(path, flow)
    assert "state_base.accounts" in _staging_tables(path)
    with _store(path, flow) as store:
        assert store.meta("layout_version") == str(LAYOUT_VERSION)
        assert store.folded_through() == 3
        assert store.load_state().equals(images[4])  # the folded rows and batches 4, 5
        assert store.meta(folding.FOLDED_THROUGH) is None
    assert not any(t.startswith("state_base.") for t in _staging_tables(path))
    assert state_file.state_path(path).exists()


def test_an_opening_that_dies_between_the_two_files_copies_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The state file's transaction committed its copy, the staging file's did not: the file is
    still of layout 7, and the next opening copies the rows again (not twice)."""
    flow, results, images = _run(4)
    path = tmp_path / "s.duckdb"
    _commit_all(path, flow, results)
    _as_layout_7(path, flow)

    with monkeypatch.context() as patch:
        patch.setattr(state_file, "write_map", _die)
        with pytest.raises(RuntimeError, match="killed"):
            _store(path, flow)
    assert "state_base.accounts" in _staging_tables(path)  # the staging file is untouched
    with _store(path, flow) as store:
        assert store.load_state().equals(images[3])
        assert store.state_folder.waiting_batches == 1
        assert store.folded_through() == 3


def test_a_seed_that_does_not_reach_the_staging_file_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flow, _, images = _run(3)
    image = images[2]
    path = tmp_path / "s.duckdb"
    with _store(path, flow) as store:
        with monkeypatch.context() as patch:
            patch.setattr(state_file, "write_map", _die)
            with pytest.raises(StagingCommitFailed, match=r"seeding failed.*killed"):
                store.seed(image, checkpoint=False)
        assert not store.seeded
        assert all(t.num_rows == 0 for t in store.load_state().tables.values())
        assert _state_file_tables(store) > set(store.state_tables.values())
    with _store(path, flow) as store:  # the opening drops the tables the seed left
        assert _state_file_tables(store) == set(store.state_tables.values())
        store.seed(image, checkpoint=False)
        assert store.seeded
        assert store.load_state().equals(image)
    with _store(path, flow) as store:
        assert store.load_state().equals(image)


def test_readers_see_one_batch_while_folds_and_releases_commit_beside_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every snapshot's state equals the oracle's state after the snapshot's batch, while the
    housekeeping thread folds every second batch and each commit is acknowledged and released
    (a release unregisters the delta segments a fold holds)."""
    monkeypatch.setattr(folding, "FOLD_BATCHES", 2)
    flow, results, images = _run(60, seed=21)
    store = StagingStore(tmp_path / "s.duckdb", flow)  # type: ignore[arg-type]
    staged = StagedDeltas(store)
    done = threading.Event()
    checked: list[int] = []
    wrong: list[str] = []

    def read() -> None:
        while not done.is_set():
            with open_snapshot(store) as snap:
                if snap.watermark == 0:
                    continue
                got = snap.table("accounts")
                want = images[snap.watermark - 1].tables["accounts"]
                if not got.equals(want.select(got.column_names).cast(got.schema)):
                    wrong.append(f"batch {snap.watermark}: {got.num_rows} rows")
                checked.append(snap.watermark)

    readers = [threading.Thread(target=read) for _ in range(2)]
    for reader in readers:
        reader.start()
    try:
        for i, result in enumerate(results, start=1):
            store.commit([simple_commit(i, result)])
            staged.acknowledge("duckdb", i)
            staged.release(["duckdb"], 0)
    finally:
        done.set()
        for reader in readers:
            reader.join()
        folds = store.state_folder.folded_through
        store.close()
    assert not wrong, wrong[:5]
    assert len(set(checked)) >= 10  # the readers saw many batches, not one
    assert folds >= 40  # and the folds ran meanwhile


def test_a_new_staging_file_empties_a_state_file_left_beside_it(tmp_path: Path) -> None:
    """A staging file deleted without its state file: the next run's state starts empty, not
    with the rows of the run before."""
    flow, results, _ = _run(4)
    path = tmp_path / "s.duckdb"
    assert _commit_all(path, flow, results) == 3
    path.unlink()
    with _store(path, flow) as store:
        assert store.watermark == 0
        assert store.folded_through() == 0
        assert all(t.num_rows == 0 for t in store.load_state().tables.values())
