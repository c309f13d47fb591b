"""The cache of recent commits answers a range read exactly as the staging file does, and only
when it holds the whole range."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from staging.handoff import StagedDeltas
from tests.migration_shop import stage_shop


def _sorted(table: pa.Table) -> list[tuple[object, ...]]:
    columns = [table.column(i).to_pylist() for i in range(table.num_columns)]
    return sorted(zip(*columns, strict=True), key=repr)


def _read_from_file(staged: StagedDeltas, after: int, upto: int) -> tuple[dict, dict]:  # type: ignore[type-arg]
    recent = staged.store.recent
    limit = recent.limit_bytes
    entries = recent.entries()
    recent.clear()
    try:
        changes = staged.read(after, upto)
    finally:
        for entry in entries:
            recent.add(entry)
        recent.limit_bytes = limit
    return changes.tables, changes.outputs


def test_cached_ranges_equal_file_reads_including_ranges_that_cut_a_commit(
    tmp_path: Path,
) -> None:
    store = stage_shop(tmp_path / "s.duckdb", range(1, 11), events=80, per_commit=3)
    staged = StagedDeltas(store)
    assert store.recent.nbytes > 0
    for after, upto in [(0, 10), (0, 3), (1, 5), (4, 5), (5, 9), (9, 10)]:
        assert store.recent.changes(after, upto, list(store.flow.tables), list(store.flow.sinks))
        cached = staged.read(after, upto)
        tables, outputs = _read_from_file(staged, after, upto)
        for name, table in tables.items():
            assert cached.tables[name].schema == table.schema, name
            assert _sorted(cached.tables[name]) == _sorted(table), (name, after, upto)
        for sink, table in outputs.items():
            assert cached.outputs[sink].schema == table.schema, sink
            assert _sorted(cached.outputs[sink]) == _sorted(table), (sink, after, upto)
    assert staged.read(0, 10).rows > 0
    store.close()


def test_the_cache_serves_only_ranges_it_holds_and_forgets_released_batches(
    tmp_path: Path,
) -> None:
    store = stage_shop(tmp_path / "s.duckdb", range(1, 7), events=80)
    flow = store.flow
    tables, sinks = list(flow.tables), list(flow.sinks)
    staged = StagedDeltas(store)
    assert store.recent.changes(0, 6, tables, sinks) is not None
    staged.acknowledge("duckdb", 3)
    staged.release(["duckdb"], 0)
    assert store.recent.changes(0, 6, tables, sinks) is None  # batches 1..3 are gone
    assert store.recent.changes(3, 6, tables, sinks) is not None
    store.close()

    # a reopened store starts with an empty cache: reads come from the file, and are complete
    store = stage_shop(tmp_path / "s.duckdb", range(7, 9), events=80)
    staged = StagedDeltas(store)
    assert store.recent.changes(3, 8, tables, sinks) is None
    assert store.recent.changes(6, 8, tables, sinks) is not None
    whole = staged.read(3, 8)
    assert sorted(whole.rows_per_batch()) == [4, 5, 6, 7, 8]
    store.close()


def test_a_small_limit_keeps_only_the_newest_commits(tmp_path: Path) -> None:
    store = stage_shop(tmp_path / "s.duckdb", range(1, 9), events=80, recent_cache_bytes=1)
    tables, sinks = list(store.flow.tables), list(store.flow.sinks)
    assert store.recent.changes(0, 8, tables, sinks) is None
    assert store.recent.nbytes == 0  # every entry is larger than one byte
    assert StagedDeltas(store).read(0, 8).rows > 0  # the file still answers
    store.close()
