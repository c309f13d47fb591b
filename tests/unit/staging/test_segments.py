"""The delta logs and outputs as segment files: a commit's rows reach the views through its
registered files only, orphans go at open, a failed commit leaves no file, release and merge keep
the views exact and delete files only once no pinned reader can see them, and a file of the table
layout (3) is moved into segments (and its state into the folded tables) when it opens."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from etl_dataflows import create_executor
from etl_dataflows.batch import BatchResult
from etl_dataflows.testing import WorkloadSpec, ledger_workload
from staging import StagingStore, state_file
from staging import segments as segments_module
from staging.exceptions import StagingCommitFailed, StagingMismatch
from staging.handoff import StagedDeltas
from staging.layout import DELTA, LAYOUT_VERSION, OUTPUTS
from tests.unit.staging.helpers import simple_commit

OUT = 'SELECT * FROM outputs."balances" ORDER BY batch_id, _pos'
DELTA_SQL = 'SELECT * FROM delta_log."accounts" ORDER BY batch_id, id'
STATE_SQL = 'SELECT * FROM state."accounts" ORDER BY id'


def _results(batches: int) -> tuple[object, list[BatchResult]]:
    work = ledger_workload(WorkloadSpec(keys=40, batch_size=200, batches=batches, seed=3))
    executor = create_executor("serial", work.flow)
    return work.flow, [executor.run_batch(b) for b in work.batches]


def _files(store: StagingStore) -> set[Path]:
    return {
        p
        for p in store.segment_folder.folder.glob("*.parquet")
        if not p.name.endswith("anchor.parquet")
    }


def _stage(path: Path, batches: int = 6) -> tuple[StagingStore, list[BatchResult]]:
    flow, results = _results(batches)
    # merges run when a test asks (the background merger would race the assertions)
    store = StagingStore(path, flow, background_merge=False)  # type: ignore[arg-type]
    for i, result in enumerate(results, start=1):
        store.commit([simple_commit(i, result)])
    return store, results


def test_a_commit_writes_its_rows_as_registered_segment_files(tmp_path: Path) -> None:
    store, results = _stage(tmp_path / "s.duckdb", batches=3)
    expected = sum(r.outputs["balances"].num_rows for r in results)
    assert store.query(OUT).num_rows == expected
    registered = store.query(
        "SELECT relation, name, first_batch, last_batch FROM streamdi.segments"
    )
    assert sorted(set(registered.column("relation").to_pylist())) == [DELTA, OUTPUTS]
    assert sorted(registered.column("first_batch").to_pylist())[-1] == 3
    assert len(_files(store)) == registered.num_rows
    tables = store.query(
        "SELECT table_schema, table_type FROM information_schema.tables "
        "WHERE table_schema IN ('delta_log', 'outputs')"
    )
    assert set(tables.column("table_type").to_pylist()) == {"VIEW"}
    store.close()


def test_a_file_nothing_registered_is_never_read(tmp_path: Path) -> None:
    # a commit between writing its files and its COMMIT: the glob lists the file, the view
    # must not show its rows (they belong to a batch no reader may see yet)
    store, _ = _stage(tmp_path / "s.duckdb", batches=2)
    before, delta = store.query(OUT), store.query(DELTA_SQL)
    prefix = store.segment_folder.prefix(OUTPUTS, "balances")
    copied = next(iter(f for f in _files(store) if f.name.startswith(prefix)))
    stray = store.segment_folder.folder / f"{prefix}000000000003-000000000003.L0.cafe.parquet"
    stray.write_bytes(copied.read_bytes())
    assert store.query(OUT).equals(before)
    assert store.query(DELTA_SQL).equals(delta)
    store.close()


def test_orphans_and_temporary_files_go_when_the_store_opens(tmp_path: Path) -> None:
    store, _ = _stage(tmp_path / "s.duckdb", batches=2)
    before = store.query(OUT)
    folder = store.segment_folder.folder
    prefix = store.segment_folder.prefix(OUTPUTS, "balances")
    kept = _files(store)
    store.close()
    # a commit killed before its COMMIT leaves a file with rows of batches nothing committed
    stray = folder / f"{prefix}000000000003-000000000003.L0.deadbeef.parquet"
    stray.write_bytes(next(iter(f for f in kept if f.name.startswith(prefix))).read_bytes())
    (folder / f"{prefix}x.parquet.tmp").write_bytes(b"half a file")
    with StagingStore(tmp_path / "s.duckdb", _results(1)[0]) as store:  # type: ignore[arg-type]
        assert not stray.exists()
        assert not (folder / f"{prefix}x.parquet.tmp").exists()
        assert _files(store) == kept
        assert store.query(OUT).equals(before)


def test_a_failed_commit_leaves_no_file_and_the_batch_commits_again(tmp_path: Path) -> None:
    flow, results = _results(2)
    store = StagingStore(tmp_path / "s.duckdb", flow)  # type: ignore[arg-type]
    store.commit([simple_commit(1, results[0])])
    files = _files(store)

    def fail(step: str) -> None:
        if step == "commit":
            raise RuntimeError("killed before COMMIT")

    with pytest.raises(StagingCommitFailed):
        store.commit([simple_commit(2, results[1])], hook=fail)
    assert _files(store) == files
    assert store.query("SELECT max(batch_id) AS b FROM outputs.balances")["b"][0].as_py() == 1
    store.commit([simple_commit(2, results[1])])
    assert store.query("SELECT max(batch_id) AS b FROM outputs.balances")["b"][0].as_py() == 2
    store.close()


def test_release_hides_released_batches_and_deletes_files_only_when_unpinned(
    tmp_path: Path,
) -> None:
    store, results = _stage(tmp_path / "s.duckdb", batches=4)
    full = store.query(OUT)
    assert store.fold_state()  # a delta log's segment is released once folded
    staged = StagedDeltas(store)
    staged.acknowledge("duckdb", 2)
    reader = store.cursor()  # a reader that began before the release may still list the files
    first_two = {store.segment_folder.path(s) for s in store.catalog.all() if s.last_batch <= 2}
    assert len(first_two) == 2 * 3  # batches 1 and 2: outputs, accounts and book each
    assert staged.release(["duckdb"], 0) == 2
    assert all(p.exists() for p in first_two)  # pinned
    reader.close()
    assert not any(p.exists() for p in first_two)
    after = store.query(OUT)
    assert after.equals(full.filter(pa.compute.greater(full["batch_id"], 2)))
    assert staged.read(2, 4).rows == sum(
        r.outputs["balances"].num_rows
        + sum(d.upserts.num_rows + d.deletes.num_rows for d in r.deltas.values())
        for r in results[2:]
    )
    store.close()


def test_a_release_point_inside_a_group_commit_hides_the_released_part(tmp_path: Path) -> None:
    flow, results = _results(3)
    store = StagingStore(tmp_path / "s.duckdb", flow)  # type: ignore[arg-type]
    store.commit([simple_commit(i, r) for i, r in enumerate(results, start=1)])  # one segment: 1..3
    staged = StagedDeltas(store)
    staged.acknowledge("duckdb", 2)
    staged.release(["duckdb"], 0)
    seen = store.query("SELECT DISTINCT batch_id FROM outputs.balances")["batch_id"].to_pylist()
    assert seen == [3]
    assert len(_files(store)) == 3  # the straddling segments (outputs, accounts, book) stay
    store.close()


def test_merging_keeps_every_row_once_and_deletes_the_inputs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(segments_module, "FANOUT", 4)
    store, _ = _stage(tmp_path / "s.duckdb", batches=9)
    out, delta = store.query(OUT), store.query(DELTA_SQL)
    while store.merge_segments():
        pass
    levels = store.query("SELECT name, level, count(*) AS n FROM streamdi.segments GROUP BY ALL")
    assert 1 in levels["level"].to_pylist()
    assert store.query(OUT).equals(out)
    assert store.query(DELTA_SQL).equals(delta)
    registered = store.query("SELECT count(*) AS n FROM streamdi.segments")["n"][0].as_py()
    assert len(_files(store)) == registered
    store.close()
    with StagingStore(tmp_path / "s.duckdb", _results(1)[0]) as reopened:  # type: ignore[arg-type]
        assert reopened.query(OUT).equals(out)


def test_a_merge_whose_inputs_were_released_meanwhile_is_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(segments_module, "FANOUT", 2)
    store, _ = _stage(tmp_path / "s.duckdb", batches=3)
    assert store.fold_state()  # a delta log's segment is released once folded
    staged = StagedDeltas(store)
    real_merge = store.segment_folder.merge

    def merge_then_release(picked: list[segments_module.Segment]) -> segments_module.Segment:
        merged = real_merge(picked)
        staged.acknowledge("duckdb", 1)
        staged.release(["duckdb"], 0)  # takes batch 1's segments while the merge runs
        return merged

    monkeypatch.setattr(store.segment_folder, "merge", merge_then_release)
    out = store.query(OUT)
    assert store.merge_segments()
    assert store.query(OUT).equals(out.filter(pa.compute.greater(out["batch_id"], 1)))
    registered = store.query("SELECT count(*) AS n FROM streamdi.segments")["n"][0].as_py()
    assert len(_files(store)) == registered  # the lost merge's file is gone
    store.close()


def test_a_lost_merges_file_stays_while_a_reader_that_may_have_listed_it_is_pinned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: a merge that lost its race to a release deleted its file at once, and a
    union query whose view had listed it failed ("IO Error: Cannot open file ...L1...parquet",
    a 500 in ``streamdi bench freshness``)."""
    monkeypatch.setattr(segments_module, "FANOUT", 2)
    store, _ = _stage(tmp_path / "s.duckdb", batches=3)
    assert store.fold_state()  # a delta log's segment is released once folded
    staged = StagedDeltas(store)
    real_merge = store.segment_folder.merge
    lost: list[Path] = []

    def merge_then_release(picked: list[segments_module.Segment]) -> segments_module.Segment:
        merged = real_merge(picked)
        lost.append(store.segment_folder.path(merged))
        staged.acknowledge("duckdb", 1)
        staged.release(["duckdb"], 0)
        return merged

    monkeypatch.setattr(store.segment_folder, "merge", merge_then_release)
    reader = store.cursor()  # began before the merge wrote its file: its glob may list it
    assert store.merge_segments()
    assert lost and lost[0].exists()  # the merge lost, but the pinned reader keeps its file
    reader.close()
    assert not lost[0].exists()
    store.close()


def test_a_file_of_the_table_layout_moves_into_segments(tmp_path: Path) -> None:
    store, _ = _stage(tmp_path / "s.duckdb", batches=3)
    out, delta = store.query(OUT), store.query(DELTA_SQL)
    state = store.query(STATE_SQL)
    flow = store.flow
    store.close()
    # rebuild layout 3: the state, delta logs and outputs as tables, no segment files
    con = duckdb.connect(str(tmp_path / "s.duckdb"))
    state_file.attach(con, tmp_path / "s.duckdb")
    for name in flow.tables:
        con.execute(f'CREATE TABLE state."_{name}" AS SELECT * FROM state."{name}"')
        con.execute(f'DROP VIEW state."{name}"')
        con.execute(f'ALTER TABLE state."_{name}" RENAME TO "{name}"')
    con.execute(f"DETACH {state_file.STATE_CATALOG}")
    state_file.state_path(tmp_path / "s.duckdb").unlink()  # no state file before layout 8
    con.execute("DELETE FROM streamdi.meta WHERE key = 'state_tables'")
    for relation, names in ((DELTA, flow.tables), (OUTPUTS, flow.sinks)):
        for name in names:
            con.execute(
                f'CREATE TABLE "{relation}"."_{name}" AS SELECT * FROM "{relation}"."{name}"'
            )
            con.execute(f'DROP VIEW "{relation}"."{name}"')
            con.execute(f'ALTER TABLE "{relation}"."_{name}" RENAME TO "{name}"')
    con.execute("DELETE FROM streamdi.segments")
    con.execute("UPDATE streamdi.meta SET value = '3' WHERE key = 'layout_version'")
    con.close()
    with StagingStore(tmp_path / "s.duckdb", flow) as upgraded:
        assert upgraded.meta("layout_version") == str(LAYOUT_VERSION)
        assert upgraded.query(OUT).equals(out)
        assert upgraded.query(DELTA_SQL).equals(delta)
        assert upgraded.query(STATE_SQL).equals(state)
        assert upgraded.folded_through() == 3  # a table held every batch
        kinds = upgraded.query(
            "SELECT DISTINCT table_type FROM information_schema.tables "
            "WHERE table_schema IN ('delta_log', 'outputs', 'state')"
        )
        assert kinds["table_type"].to_pylist() == ["VIEW"]


def test_a_missing_segment_file_stops_the_opening(tmp_path: Path) -> None:
    store, _ = _stage(tmp_path / "s.duckdb", batches=1)
    victim = next(iter(_files(store)))
    flow = store.flow
    store.close()
    victim.unlink()
    with pytest.raises(StagingMismatch, match="segment files are missing"):
        StagingStore(tmp_path / "s.duckdb", flow)


def test_staging_disk_bytes_counts_a_file_deleted_meanwhile_as_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ledger fault campaign (seed 1, 1,000 offers), near fault 80: ``GET /status`` answered
    500 with a FileNotFoundError when a merge deleted a segment file between the folder's listing
    and its ``stat``. A file gone meanwhile now counts as 0 bytes."""
    path = tmp_path / "staging.duckdb"
    path.write_bytes(b"x" * 10)
    folder = tmp_path / "staging.duckdb.segments"
    (folder / "nested").mkdir(parents=True)
    (folder / "a.parquet").write_bytes(b"x" * 100)
    (folder / "nested" / "b.parquet").write_bytes(b"x" * 1000)
    assert segments_module.staging_disk_bytes(path) == 1110
    real_stat = Path.stat

    def racing_stat(self: Path, **kwargs: bool) -> object:
        if self.name == "a.parquet":  # listed, then deleted by a merge before its stat
            self.unlink()
        return real_stat(self, **kwargs)

    monkeypatch.setattr(Path, "stat", racing_stat)
    assert segments_module.staging_disk_bytes(path) == 1010
