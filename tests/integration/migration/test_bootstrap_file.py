"""kill -9 during a bootstrap's file path (a DuckDB target made from a copy of a DuckDB peer's
file): a real process (:mod:`tests.integration.migration.bootstrap_file_run`) killed with
SIGKILL in the middle of the copy of the peer's file, with the copy rewritten but not committed,
just before the swap, and after it before staging heard of it; then run again. The target is left
as it was (its ledger holds no batch, its record says ``copying``) or bootstrapped whole, never
half; the second run starts over (or goes on) and both warehouses end equal, row for row, to a
migration of the same batches without any crash; the bootstrapped one's ledger says its snapshot
once and each later batch once, and staging releases only what both hold."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from migration.bootstrap import read_record
from migration.bootstrap.file_copy import side_file
from migration.migrator import Migrator
from migration.schema import WarehouseLayout
from migration.targets.duckdb_file import DuckDBTarget
from staging.handoff import StagedDeltas
from staging.store import StagingStore
from streamdi.settings import MigrationSettings
from tests.integration.migration.test_bootstrap import assert_ledger
from tests.migration_shop import shop_dataflow, stage_shop

REPO = Path(__file__).resolve().parents[3]
RELATIONS = ("customers", "accounts", "prices", "activity")
EVENTS = 150
PEER_HOLDS = 8  # batches the peer loaded (and staging released) before the new target came
STAGED = 12  # then staged, the new target added
Rows = dict[str, list[tuple[Any, ...]]]


def _settings() -> MigrationSettings:
    return MigrationSettings(targets="duckdb", max_batches_per_load=4, release_ms=0)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Rows]:
    """What a migration without crashes and without bootstrap makes of batches 1..12 and 1..14."""
    root = tmp_path_factory.mktemp("bootstrap-file-reference")
    layout = WarehouseLayout(shop_dataflow().build())
    out: dict[int, Rows] = {}
    for last in (STAGED, STAGED + 2):
        store = stage_shop(root / f"staging-{last}.duckdb", range(1, last + 1), events=EVENTS)
        target = DuckDBTarget(layout, root / f"wh-{last}.duckdb")
        migrator = Migrator(StagedDeltas(store), {"wh": target}, _settings())
        migrator.migrate(merge="force")
        target.open()
        out[last] = {name: target.table_rows(name) for name in RELATIONS}
        assert all(out[last].values())
        migrator.close()
        store.close()
    return out


def _run(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "STREAMDI__LOG_LEVEL": "WARNING"}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.integration.migration.bootstrap_file_run",
            str(tmp_path / "staging.duckdb"),
            str(tmp_path),
            *extra,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _staging(tmp_path: Path) -> tuple[dict[str, int], int]:
    store = StagingStore(tmp_path / "staging.duckdb", shop_dataflow())
    try:
        staged = StagedDeltas(store)
        return staged.acks(), staged.released_through()
    finally:
        store.close()


CASES = [
    # (--crash-at, what the target holds after the kill, staging moves on before the restart)
    # in the middle of the copy of the peer's file (64 KB of it copied): the side file is a
    # torn copy, the target untouched; the restart starts over at a new snapshot
    ("bootstrap-file-copy", "copying", True),
    # just before the rename: the side file is whole and rewritten, the target untouched
    ("bootstrap-file-swap", "copying", True),
    # the copy rewritten, its transaction not committed
    pytest.param("bootstrap-file-rewrite", "copying", False, marks=pytest.mark.slow),
    # after the swap, before staging's acknowledgement: nothing to redo
    pytest.param("bootstrapped", "loaded", False, marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("crash", "state", "more"), CASES)
def test_a_killed_file_copy_leaves_the_target_whole_and_starts_over(
    tmp_path: Path, reference: dict[int, Rows], crash: str, state: str, more: bool
) -> None:
    layout = WarehouseLayout(shop_dataflow().build())
    store = stage_shop(tmp_path / "staging.duckdb", range(1, PEER_HOLDS + 1), events=EVENTS)
    old = DuckDBTarget(layout, tmp_path / "old.duckdb")
    first = Migrator(StagedDeltas(store), {"old": old}, _settings())
    assert first.migrate(merge="force").released_through == PEER_HOLDS
    first.close()
    store.close()
    stage_shop(
        tmp_path / "staging.duckdb", range(PEER_HOLDS + 1, STAGED + 1), events=EVENTS
    ).close()

    crashed = _run(tmp_path, "--crash-at", crash, "--chunk", str(64 << 10))
    assert crashed.returncode == -9, crashed.stderr
    new = DuckDBTarget(layout, tmp_path / "new.duckdb")
    side = side_file(new.path)
    if crash == "bootstrap-file-copy":  # killed mid-copy: a part of the peer's file
        assert 0 < side.stat().st_size < old.path.stat().st_size
    elif crash != "bootstrapped":
        assert side.exists()  # left by the kill: the next run removes it
    new.open()
    record = read_record(new)
    assert record is not None and record.state == state
    if state == "loaded":
        assert new.watermark() == STAGED and record.through == STAGED
    else:  # never half: nothing of the copy is in the target
        assert new.watermark() == 0 and record.relations == {}
        assert new.delta_rows() == 0
        assert all(not new.table_rows(name) for name in RELATIONS)
    new.close()
    acks, released = _staging(tmp_path)
    assert acks.get("new", 0) == 0 and released == PEER_HOLDS  # staging kept every batch for it

    last = STAGED
    if more:  # staging moves on before the restart
        stage_shop(
            tmp_path / "staging.duckdb", range(STAGED + 1, STAGED + 3), events=EVENTS
        ).close()
        last = STAGED + 2
    again = _run(tmp_path)
    assert again.returncode == 0, again.stderr
    boot = json.loads(again.stdout.strip().splitlines()[-1])
    if state == "copying":
        assert (boot["method"], boot["through"], boot["peer"]) == ("file", last, "old")
    else:
        assert boot is None  # bootstrapped already: the round just loads it
    assert not side.exists()

    for name in ("old", "new"):
        target = DuckDBTarget(layout, tmp_path / f"{name}.duckdb")
        target.open()
        assert_ledger(target, last, bootstrapped=name == "new")
        for relation in RELATIONS:
            assert target.table_rows(relation) == reference[last][relation], f"{name}.{relation}"
        target.close()
    acks, released = _staging(tmp_path)
    assert acks == {"old": last, "new": last} and released == last
