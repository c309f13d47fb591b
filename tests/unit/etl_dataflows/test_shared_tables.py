"""A compiled table that interpreted steps touch too (shared, see
``etl_dataflows.executors.local.shared_rows``): a compiled step moves items between groups and
inserts them; an interpreted step inserts items, bumps whole groups through ``update_where`` and
then aborts when its guard is missing (its writes to the shared arrays undone); the local executor
must equal the serial oracle batch by batch (deltas, aborts, outputs, sequences) and a plain
model, from an empty state and from a state image loaded midway."""

from __future__ import annotations

from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from etl_dataflows import Dataflow, coalesce, col, old
from etl_dataflows.executors.local import LocalExecutor, shared_rows
from etl_dataflows.executors.local.arrays import ArrayTable
from etl_dataflows.tables import Table
from etl_dataflows.testing import make_batch, run_in_memory
from etl_dataflows.testing.harness import assert_same_results

GUARDS = range(5)
DAY = 86_400_000_000


def shared_flow(key: str) -> Dataflow:
    """``items`` (id -> grp, v, tag; surrogate sk; indexed by grp) written by the compiled
    ``move`` and the interpreted ``bump`` (``update_where`` is interpreted)."""
    flow = Dataflow("shared")
    items = flow.table(
        "items",
        key={"id": key},
        columns={"grp": "int64", "v": "int64", "tag": "string"},
        surrogate="sk",
        indexes=("grp",),
    )
    guards = flow.table("guards", key={"id": "int64"}, columns={"ok": "bool"})
    flow.source(
        "events",
        schema={
            "id": key,
            "to": "int64",
            "add": key,
            "bump": "int64",
            "guard": "int64",
            "tag": "string",
            "seed": "bool",
        },
    )
    move = flow.transact("move", input="events")
    move.update(
        items,
        "id",
        set={"grp": col("to"), "v": coalesce(old("v"), 0), "tag": col("tag")},
        if_missing="insert",
        when=col("to").not_null() & ~col("seed"),
    )
    bump = flow.transact("bump", input="events")
    bump.update(guards, "guard", set={"ok": col("seed")}, if_missing="insert", when=col("seed"))
    bump.update(
        items,
        "add",
        set={"grp": coalesce(col("to"), 0), "v": coalesce(old("v"), 0)},
        if_missing="insert",
        when=col("add").not_null() & ~col("seed"),
    )
    bump.update_where(items, "grp", col("bump"), set={"v": old("v") + 1, "tag": col("tag")})
    bump.update(
        guards,
        "guard",
        set={"ok": old("ok")},
        if_missing="abort",
        when=col("guard").not_null() & ~col("seed"),
    )
    bump.emit(id=col("id"))
    flow.sink("bumped", input="bump")
    return flow


def model(batches: list[list[dict[str, Any]]]) -> dict[Any, tuple[int, int]]:
    """id -> (grp, v): per batch, every move first (the compiled step), then every bump, each
    bump all or nothing."""
    items: dict[Any, tuple[int, int]] = {}
    for rows in batches:
        for e in rows:
            if e["to"] is not None:
                items[e["id"]] = (e["to"], items.get(e["id"], (0, 0))[1])
        for e in rows:
            after = dict(items)
            if e["add"] is not None:
                after[e["add"]] = (
                    e["to"] if e["to"] is not None else 0,
                    after.get(e["add"], (0, 0))[1],
                )
            if e["bump"] is not None:
                after = {i: (g, v + 1) if g == e["bump"] else (g, v) for i, (g, v) in after.items()}
            if e["guard"] is None or e["guard"] in GUARDS:
                items = after
    return items


def runs(flow: Dataflow, batches: list[list[dict[str, Any]]], executor: str) -> Any:
    seed = [{"id": None, "guard": g, "seed": True, "_ts": DAY} for g in GUARDS]
    made = [make_batch(flow, 1, events=seed)]
    for i, rows in enumerate(batches, start=2):
        made.append(
            make_batch(flow, i, events=[{**r, "seed": False, "_ts": (i + 1) * DAY} for r in rows])
        )
    half = len(made) // 2 + 1
    first = run_in_memory(flow, made[:half], executor=executor)
    second = run_in_memory(flow, made[half:], executor=executor, state=first.final_state)
    return first, second


def keys(key: str) -> st.SearchStrategy[Any]:
    ids = st.integers(0, 12)
    return ids if key == "int64" else ids.map(lambda i: f"k{i}")


def events(key: str) -> st.SearchStrategy[list[dict[str, Any]]]:
    return st.lists(
        st.fixed_dictionaries(
            {
                "id": keys(key),
                "to": st.none() | st.integers(0, 3),
                "add": st.none() | keys(key),
                "bump": st.none() | st.integers(0, 3),
                "guard": st.none() | st.integers(0, 9),
                "tag": st.none() | st.sampled_from(["a", "b", "c"]),
            }
        ),
        min_size=1,
        max_size=40,
    )


@pytest.mark.parametrize("key", ["int64", "string"])
def test_the_table_is_shared(key: str) -> None:
    executor = LocalExecutor(shared_flow(key))
    assert executor.explain()["move"].compiled
    assert not executor.explain()["bump"].compiled
    assert set(executor.shared) == {"items"}  # (guards: only the interpreted step uses it)


@pytest.mark.parametrize("key", ["int64", "string"])
@pytest.mark.parametrize("overlay", [0, 1024], ids=["rebuilt", "overlaid"])
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_shared_table_matches_the_oracle_and_the_model(
    key: str, overlay: int, data: st.DataObject
) -> None:
    """``overlay``: moved slots the index takes one by one before it rebuilds (0: rebuilt at
    every catch-up with anything moved)."""
    batches = data.draw(st.lists(events(key), min_size=1, max_size=4))
    flow = shared_flow(key)
    serial = runs(flow, batches, "serial")
    with patch.object(shared_rows, "_OVERLAY_MIN", overlay):
        local = runs(flow, batches, "local")
    for expected, actual in zip(serial, local, strict=True):
        assert_same_results(expected, actual)
    table = local[1].final_state.tables["items"].to_pylist()
    assert {r["id"]: (r["grp"], r["v"]) for r in table} == model(batches)


@pytest.mark.parametrize("key", ["int64", "string"])
def test_a_rolled_back_batch_leaves_the_shared_table_as_before(key: str) -> None:
    """A batch whose steps both wrote the shared arrays is rolled back (the composing protocol:
    begin, the steps, rollback); the state is the one before, and the batch run again gives the
    oracle's result (the group index catches up with the restored values)."""
    flow = shared_flow(key)

    def k(i: int) -> Any:
        return i if key == "int64" else f"k{i}"

    first = [
        {"id": k(i), "to": i % 2, "add": None, "bump": None, "guard": None, "tag": "a"}
        for i in range(6)
    ]
    second = [
        {"id": k(0), "to": 1, "add": k(9), "bump": 1, "guard": None, "tag": "b"},
        {"id": k(3), "to": 0, "add": None, "bump": 0, "guard": 1, "tag": "c"},
        {"id": k(4), "to": None, "add": None, "bump": 0, "guard": 7, "tag": "c"},
    ]
    seed = [{"id": None, "guard": g, "seed": True, "_ts": DAY} for g in GUARDS]
    batches = [
        make_batch(flow, 1, events=seed),
        make_batch(flow, 2, events=[{**r, "seed": False, "_ts": 3 * DAY} for r in first]),
        make_batch(flow, 3, events=[{**r, "seed": False, "_ts": 4 * DAY} for r in second]),
    ]
    local = LocalExecutor(flow)
    for batch in batches[:2]:
        local.run_batch(batch)
    before = local.state_image().tables["items"].to_pylist()
    prepared = local.prepare_batch(batches[2])
    local.begin_batch()
    committed = 0
    for step in local.flow.transactional_steps():
        outcome = local.run_transactions(step, prepared.produced[step.input or ""], prepared.dead)
        committed += outcome.committed
    assert committed > 0
    assert local.state_image().tables["items"].to_pylist() != before
    local.rollback_batch()
    assert local.state_image().tables["items"].to_pylist() == before
    again = local.run_batch(batches[2])
    serial = run_in_memory(flow, batches, executor="serial")
    expected = serial.results[2]
    assert again.deltas["items"].upserts.equals(expected.deltas["items"].upserts)
    assert again.deltas["items"].deletes.equals(expected.deltas["items"].deletes)
    assert local.state_image().tables["items"].equals(serial.final_state.tables["items"])


def test_the_index_after_a_restored_batch() -> None:
    """A batch moved a row to another group and the index was rebuilt from the new values (the
    rebuild forgets the old ones); the batch is restored in the arrays (bypassing the mapping):
    after ``stale()`` the row is found under its group again."""
    table = shared_flow("int64").build().tables["items"]
    assert isinstance(table, Table)
    arrays = ArrayTable(table)
    rows = shared_rows.SharedRows(arrays)
    arrays.begin_batch()
    rows[(1,)] = {"id": 1, "sk": 1, "grp": 0, "v": 0, "tag": None}
    arrays.end_batch()
    arrays.begin_batch()
    rows[(1,)] = {"id": 1, "sk": 1, "grp": 1, "v": 0, "tag": None}
    rows.stale()
    with patch.object(shared_rows, "_OVERLAY_MIN", 0):
        assert rows.keys_with("grp", 1) == [(1,)]  # (rebuilt: moved 1 > 0 // 8 + 0)
    arrays.restore()
    assert rows.get((1,))["grp"] == 0  # type: ignore[index]
    rows.stale()
    assert rows.keys_with("grp", 0) == [(1,)]
