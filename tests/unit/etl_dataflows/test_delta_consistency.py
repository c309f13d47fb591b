"""Each batch's deltas take the state image before it to the image after it, exactly and with net
changes only (an upsert differs from the row before, a delete names a row that existed), for
plain, history and window tables, on every executor (the serial executor's deltas skip rows that
are the same object as before the batch: this is what would catch a row changed without it)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from etl_dataflows import Dataflow
from etl_dataflows.executors import create_executor
from etl_dataflows.state import row_id_getter
from etl_dataflows.testing import make_batch
from tests.unit.etl_dataflows.test_update_where import GUARDS, items_flow
from tests.unit.etl_dataflows.test_window_model import window_flow

DAY = 86_400_000_000


def by_id(flow: Any, name: str, rows: list[dict[str, Any]]) -> dict[Any, dict[str, Any]]:
    row_id = row_id_getter(flow.tables[name])
    return {row_id(r): r for r in rows}


def check(flow: Dataflow, batches: list[Any], executor: str) -> None:
    runner = create_executor(executor, flow.build())
    compiled = runner.flow
    image = {n: by_id(compiled, n, t.to_pylist()) for n, t in runner.state_image().tables.items()}
    for batch in batches:
        result = runner.run_batch(batch)
        after = runner.state_image().tables
        for name, delta in result.deltas.items():
            rows = dict(image[name])
            for rid, row in by_id(compiled, name, delta.upserts.to_pylist()).items():
                assert rows.get(rid) != row, f"{name}: an upsert that changes nothing"
                rows[rid] = row
            for rid in by_id(compiled, name, delta.deletes.to_pylist()):
                assert rid in rows, f"{name}: a delete of a row that did not exist"
                del rows[rid]
            assert rows == by_id(compiled, name, after[name].to_pylist()), name
            image[name] = rows
    runner.close()


item_events = st.lists(
    st.fixed_dictionaries(
        {
            "id": st.integers(0, 8),
            "to": st.none() | st.integers(0, 3),
            "bump": st.none() | st.integers(0, 3),
            "guard": st.none() | st.integers(0, 9),
        }
    ),
    min_size=1,
    max_size=30,
)


@pytest.mark.parametrize("executor", ["serial", "local"])
@pytest.mark.parametrize("history", [False, True], ids=["table", "history"])
@settings(max_examples=40, deadline=None)
@given(st.lists(item_events, min_size=1, max_size=4))
def test_item_deltas(executor: str, history: bool, drawn: list[list[dict[str, Any]]]) -> None:
    flow = items_flow(history)
    seed = [{"id": 0, "guard": g, "seed": True, "_ts": DAY} for g in GUARDS]
    batches = [make_batch(flow, 1, events=seed)]
    for i, rows in enumerate(drawn, start=2):
        events = [{**r, "seed": False, "_ts": (i + 1) * DAY} for r in rows]
        batches.append(make_batch(flow, i, events=events))
    check(flow, batches, executor)


@pytest.mark.parametrize("executor", ["serial", "local"])
@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.lists(
            st.tuples(st.integers(0, 2), st.none() | st.integers(-3, 3), st.integers(0, 6)),
            min_size=1,
            max_size=20,
        ),
        min_size=1,
        max_size=4,
    )
)
def test_window_deltas(executor: str, drawn: list[list[tuple[int, int | None, int]]]) -> None:
    flow = window_flow()
    clock = 100
    batches = []
    for i, rows in enumerate(drawn, start=1):
        events = []
        for k, v, step in rows:
            clock += step
            events.append({"k": k, "v": v, "_ts": clock})
        batches.append(make_batch(flow, i, events=events))
    check(flow, batches, executor)
