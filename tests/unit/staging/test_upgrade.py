"""Upgrading a staging file in place (staging.upgrade): a dataflow changed over live state keeps
every row, switches at the last committed batch, and from then on equals the serial oracle run
with the same versions switched at the same batch."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow.compute as pc
import pytest

from etl_dataflows import Dataflow, col, if_else, old
from etl_dataflows.batch import EngineBatch
from etl_dataflows.dataflow import CompiledDataflow
from etl_dataflows.evolution import describe_flow
from etl_dataflows.evolution.convert import convert_image
from etl_dataflows.executors import create_executor
from etl_dataflows.testing import make_batch
from staging import StagingStore
from staging.exceptions import StagingMissing, StagingUpgradeNeeded, StagingUpgradeRefused
from staging.handoff import StagedDeltas
from staging.upgrade import plan_staging, upgrade_staging
from tests.unit.staging.helpers import simple_commit


def bank(version: int) -> CompiledDataflow:
    """Version 1: accounts with a balance, moved by transfers. Version 2 adds a ``tier`` column
    filled from the balance, a ``moves`` table counting each account's transfers, and a sink."""
    flow = Dataflow("bank")
    columns = {"balance": "int64"} | ({"tier": "string"} if version >= 2 else {})
    accounts = flow.table(
        "accounts",
        key={"id": "int64"},
        columns=columns,
        defaults={"balance": 0} | ({"tier": "basic"} if version >= 2 else {}),
        fills={"tier": if_else(col("balance") > 100, "gold", "basic")} if version >= 2 else None,
    )
    moves = (
        flow.table("moves", key={"id": "int64"}, columns={"n": "int64"}, defaults={"n": 0})
        if version >= 2
        else None
    )
    flow.source("transfers", schema={"src": "int64", "dst": "int64", "amount": "int64"})
    t = flow.transact("transfer")
    t.update(accounts, "src", set={"balance": old("balance") - col("amount")}, if_missing="insert")
    credit = {"balance": old("balance") + col("amount")}
    if version >= 2:
        credit["tier"] = if_else(old("balance") + col("amount") > 100, "gold", "basic")
    t.update(accounts, "dst", set=credit, if_missing="insert")
    if moves is not None:
        t.update(moves, "src", set={"n": old("n") + 1}, if_missing="insert")
    t.emit(amount=col("amount"))
    flow.sink("moved")
    if version >= 2:
        flow.sink("moved_too", input="transfer")
    return flow.build()


def batches(flow: CompiledDataflow, first: int, count: int, seed: int) -> list[EngineBatch]:
    rng = random.Random(seed)
    out = []
    for batch_id in range(first, first + count):
        rows = [
            {
                "src": rng.randrange(12),
                "dst": rng.randrange(12),
                "amount": rng.randrange(1, 80),
                "_ts": batch_id * 1000 + i,
            }
            for i in range(40)
        ]
        out.append(make_batch(flow, batch_id, transfers=rows))
    return out


def test_an_additive_upgrade_keeps_every_row_and_matches_the_oracle(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    v1, v2 = bank(1), bank(2)
    oracle = create_executor("serial", v1)
    with StagingStore(path, v1, background_merge=False) as store:
        for batch in batches(v1, 1, 5, seed=1):
            store.commit([simple_commit(batch.batch_id, oracle.run_batch(batch))])
        assert store.version == 1

    # the changed dataflow does not open: the error carries the plan
    with pytest.raises(StagingUpgradeNeeded) as refused:
        StagingStore(path, v2, background_merge=False)
    kinds = {(c.kind, c.subject) for c in refused.value.plan.changes}
    assert ("column_added", "accounts.tier") in kinds
    assert ("table_added", "moves") in kinds
    assert ("sink_added", "moved_too") in kinds
    assert ("step_logic_changed", "transfer") in kinds
    assert refused.value.plan.applicable
    assert "streamdi upgrade apply" in str(refused.value)

    plan, recorded = plan_staging(path, v2)
    assert recorded.version == 1 and plan.applicable
    switch = upgrade_staging(path, v2)
    assert switch.version is not None and switch.version.version == 2
    assert switch.watermark == 5 and switch.rows > 0
    # a second run finds nothing to do (resumable: the switch is recorded)
    assert upgrade_staging(path, v2).version is None

    image = convert_image(oracle.state_image(), describe_flow(v1), v2)
    tiers = image.tables["accounts"].column("tier").to_pylist()
    balances = image.tables["accounts"].column("balance").to_pylist()
    assert tiers == ["gold" if b > 100 else "basic" for b in balances]
    oracle2 = create_executor("serial", v2, image)
    with StagingStore(path, v2, background_merge=False) as store:
        assert store.load_state().equals(image)
        for batch in batches(v2, 6, 5, seed=2):
            store.commit([simple_commit(batch.batch_id, oracle2.run_batch(batch))])
            assert store.load_state().equals(oracle2.state_image()), f"batch {batch.batch_id}"
        assert [(v.version, v.watermark) for v in store.history] == [(1, 0), (2, 5)]
        versions = store.query("SELECT batch_id, version FROM streamdi.batches ORDER BY 1")
        assert versions["version"].to_pylist() == [1] * 5 + [2] * 5
        # the staged deltas of batches before the switch are in the new layout, filled
        changes = StagedDeltas(store).read(0, 10)
        accounts = changes.tables["accounts"]
        early = accounts.filter(pc.less_equal(accounts["batch_id"], 5))
        assert early.num_rows > 0
        assert early.column("tier").null_count == 0
        assert set(changes.outputs) == {"moved", "moved_too"}


def test_a_refused_upgrade_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    v1 = bank(1)
    oracle = create_executor("serial", v1)
    with StagingStore(path, v1, background_merge=False) as store:
        for batch in batches(v1, 1, 3, seed=3):
            store.commit([simple_commit(batch.batch_id, oracle.run_batch(batch))])
    narrowed = Dataflow("bank")
    accounts = narrowed.table("accounts", key={"id": "string"}, columns={"balance": "int64"})
    narrowed.source("transfers", schema={"src": "int64", "dst": "int64", "amount": "int64"})
    narrowed.transact("transfer").update(
        accounts, col("src").cast("string"), set={"balance": col("amount")}, if_missing="insert"
    )
    narrowed.sink("moved")
    with pytest.raises(StagingUpgradeRefused) as refused:
        upgrade_staging(path, narrowed.build())
    blocking = refused.value.plan.blocking
    assert [(c.kind, c.action) for c in blocking] == [("key_changed", "reprocess")]
    assert "flow.migrate('accounts', fn)" in str(refused.value)
    with StagingStore(path, v1, background_merge=False) as store:
        assert store.load_state().equals(oracle.state_image())
        assert store.version == 1


def test_planning_against_no_staging_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(StagingMissing, match="nothing was staged there yet"):
        plan_staging(tmp_path / "none.duckdb", bank(2))
    assert not (tmp_path / "none.duckdb").exists()


def counter(step: int) -> CompiledDataflow:
    """One table counted up by ``step`` per event: versions differ in step logic only."""
    flow = Dataflow("counter")
    counts = flow.table("counts", key={"id": "int64"}, columns={"n": "int64"}, defaults={"n": 0})
    flow.source("hits", schema={"id": "int64"})
    t = flow.transact("count")
    t.update(counts, "id", set={"n": old("n") + step}, if_missing="insert")
    t.emit(id=col("id"))
    flow.sink("counted")
    return flow.build()


def test_a_change_of_step_logic_is_recorded_at_open_and_logged_as_done(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Step logic alone changes in place when the file opens: before any batch (a seeded file
    opened again with its dataflow built anew, as TPC-DI's run does) one line names the steps;
    after batches, the plan without advice to run an upgrade that is already made."""
    path = tmp_path / "staging.duckdb"
    StagingStore(path, counter(1), background_merge=False).close()
    caplog.set_level("INFO", logger="staging.store")
    with StagingStore(path, counter(2), background_merge=False) as store:
        assert [(v.version, v.watermark) for v in store.history] == [(1, 0), (2, 0)]
        batch = make_batch(store.flow, 1, hits=[{"id": 1, "_ts": 1000}])
        oracle = create_executor("serial", store.flow, store.load_state())
        store.commit([simple_commit(1, oracle.run_batch(batch))])
    before = [r.getMessage() for r in caplog.records if "version=2" in r.getMessage()]
    assert before == ["dataflow counter version=2 recorded before any batch (steps changed: count)"]
    caplog.clear()
    with StagingStore(path, counter(3), background_merge=False) as store:
        assert [(v.version, v.watermark) for v in store.history][-1] == (3, 1)
    after = [r.getMessage() for r in caplog.records if "version=3" in r.getMessage()]
    assert len(after) == 1 and "after_batch=1" in after[0] and "step_logic_changed" in after[0]
    assert "streamdi upgrade apply" not in after[0]
