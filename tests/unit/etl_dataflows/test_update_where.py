"""``update_where`` against a plain model: rows move between groups (the indexed column), whole
groups are updated, and transactions that abort after changing rows are undone; on plain and
history tables, from an empty state and from a state image loaded midway, on every executor."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from etl_dataflows import EXECUTORS, Dataflow, coalesce, col, old
from etl_dataflows.testing import make_batch, run_in_memory

#: Guard keys that exist: an event naming another guard aborts after its other operations.
GUARDS = range(5)
DAY = 86_400_000_000


def items_flow(history: bool) -> Dataflow:
    """``items`` (id -> grp, v; indexed by grp): an event moves one item to a group (insert if
    new), adds one to ``v`` of every item of a group, or both, then aborts if its guard is
    missing."""
    flow = Dataflow("groups")
    columns = {"grp": "int64", "v": "int64"}
    if history:
        items = flow.history_table(
            "items", key={"id": "int64"}, columns=columns, surrogate="sk", indexes=("grp",)
        )
    else:
        items = flow.table("items", key={"id": "int64"}, columns=columns, indexes=("grp",))
    guards = flow.table("guards", key={"id": "int64"}, columns={"ok": "bool"})
    flow.source(
        "events",
        schema={"id": "int64", "to": "int64", "bump": "int64", "guard": "int64", "seed": "bool"},
    )
    t = flow.transact("apply", input="events")
    t.update(guards, "guard", set={"ok": col("seed")}, if_missing="insert", when=col("seed"))
    t.update(
        items,
        "id",
        set={"grp": col("to"), "v": coalesce(old("v"), 0)},
        if_missing="insert",
        when=col("to").not_null() & ~col("seed"),
    )
    t.update_where(items, "grp", col("bump"), set={"v": old("v") + 1})
    t.update(
        guards,
        "guard",
        set={"ok": old("ok")},
        if_missing="abort",
        when=col("guard").not_null() & ~col("seed"),
    )
    t.emit(id=col("id"))
    flow.sink("applied")
    return flow


events = st.lists(
    st.fixed_dictionaries(
        {
            "id": st.integers(0, 12),
            "to": st.none() | st.integers(0, 3),
            "bump": st.none() | st.integers(0, 3),
            "guard": st.none() | st.integers(0, 9),
        }
    ),
    min_size=1,
    max_size=60,
)


def model(rows: list[dict[str, Any]]) -> dict[int, tuple[int, int]]:
    """id -> (grp, v) after the events, each transaction all or nothing."""
    items: dict[int, tuple[int, int]] = {}
    for e in rows:
        after = dict(items)
        if e["to"] is not None:
            after[e["id"]] = (e["to"], after.get(e["id"], (0, 0))[1])
        if e["bump"] is not None:
            after = {i: (g, v + 1) if g == e["bump"] else (g, v) for i, (g, v) in after.items()}
        if e["guard"] is None or e["guard"] in GUARDS:
            items = after
    return items


def final_items(flow: Dataflow, batches: list[list[dict[str, Any]]], executor: str) -> Any:
    """Run the batches (the guards seeded first), the second half from the first half's state
    image (so the index is also built from a loaded image); the items' current rows."""
    seed = [{"id": 0, "guard": g, "seed": True, "_ts": DAY} for g in GUARDS]
    made = [make_batch(flow, 1, events=seed)]
    for i, rows in enumerate(batches, start=2):
        made.append(
            make_batch(flow, i, events=[{**r, "seed": False, "_ts": (i + 1) * DAY} for r in rows])
        )
    half = len(made) // 2 + 1
    first = run_in_memory(flow, made[:half], executor=executor)
    second = run_in_memory(flow, made[half:], executor=executor, state=first.final_state)
    table = second.final_state.tables["items"].to_pylist()
    current = [r for r in table if r.get("is_current", True)]  # a history table's open versions
    return {r["id"]: (r["grp"], r["v"]) for r in current}


@pytest.mark.parametrize("executor", ["serial", "local"])
@pytest.mark.parametrize("history", [False, True], ids=["table", "history"])
@settings(max_examples=60, deadline=None)
@given(st.lists(events, min_size=1, max_size=4))
def test_update_where_matches_the_model(
    executor: str, history: bool, batches: list[list[dict[str, Any]]]
) -> None:
    flow = items_flow(history)
    expected = model([e for rows in batches for e in rows])
    assert final_items(flow, batches, executor) == expected


def test_every_executor_agrees_on_a_long_mixed_run() -> None:
    rows = [
        {"id": i % 13, "to": (i * 7) % 4, "bump": (i * 3) % 5 or None, "guard": (i * 11) % 10}
        for i in range(400)
    ]
    batches = [rows[i : i + 50] for i in range(0, 400, 50)]
    expected = model(rows)
    assert expected  # rows moved and groups were bumped
    for executor in EXECUTORS:
        for history in (False, True):
            assert final_items(items_flow(history), batches, executor) == expected, executor
