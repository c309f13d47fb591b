"""Window operations compiled (the local executor's extended form, see
:mod:`etl_dataflows.executors.local.window_arrays`) against the serial oracle.

Random events over a window with float and int values (nulls among them), late entries, a null
time (an error), an operation after the window that aborts (its entry undone), and a second step
that reads the window without adding an entry; keys of one int, one string or two columns. Batch
by batch the local executor must give what the serial executor gives (outputs, aborts with their
reasons, dead letters, deltas, sequences), from an empty state and from a state image loaded
midway, with the entry pool compacted after every batch or not at all. A batch rolled back leaves
the arrays as they were. A window with a ``sum`` stays interpreted."""

from __future__ import annotations

import datetime
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from etl_dataflows import Dataflow, col
from etl_dataflows.executors import LocalExecutor, create_executor
from etl_dataflows.executors.local import window_arrays
from etl_dataflows.testing import assert_same_results, make_batch, run_in_memory

SPAN = 10
AGGREGATES = {
    "v_max": ("max", "v"),
    "v_min": ("min", "v"),
    "v_argmax": ("argmax", "v"),
    "v_argmin": ("argmin", "v"),
    "n_count": ("count", "n"),
    "n_first": ("first", "n"),
    "n_last": ("last", "n"),
    "n_max": ("max", "n"),
}
KEYS = {"int": ("k",), "string": ("name",), "pair": ("k", "name")}


def windows_flow(key: str, sums: bool = False) -> Dataflow:
    """``apply`` adds an entry to window ``w`` then writes ``marks`` only when ``ok`` (else the
    transaction aborts after its entry was stored); ``peek`` reads ``w`` at its event's time."""
    flow = Dataflow("windows")
    kinds = {"k": "int64", "name": "string"}
    aggregates = {**AGGREGATES, "v_sum": ("sum", "v")} if sums else AGGREGATES
    w = flow.window_table(
        "w",
        key={name: kinds[name] for name in KEYS[key]},
        columns={"v": "float64", "n": "int64"},
        span=SPAN,
        aggregates=aggregates,
    )
    marks = flow.table("marks", key={"k": "int64"}, columns={"n": "int64"})
    flow.source(
        "events",
        schema={
            "k": "int64",
            "name": "string",
            "v": "float64",
            "n": "int64",
            "ok": "bool",
            "at": "int64",
        },
    )
    flow.source("probes", schema={"k": "int64", "name": "string"})
    key_columns = list(KEYS[key])
    t = flow.transact("apply", input="events")
    got = t.window(w, key_columns, {"v": col("v"), "n": col("n")}, at=col("at"))
    t.write(marks, "k", {"n": col("n")}, require=(col("ok"), "refused"))
    t.emit(k=col("k"), found=got.found, **{name: got[name] for name in aggregates})
    flow.sink("applied", input="apply")
    p = flow.transact("peek", input="probes")
    seen = p.window(w, key_columns)
    p.emit(k=col("k"), found=seen.found, **{name: seen[name] for name in aggregates})
    flow.sink("peeked", input="peek")
    return flow


drawn_events = st.lists(
    st.fixed_dictionaries(
        {
            "probe": st.booleans(),
            "k": st.integers(0, 3),
            "name": st.sampled_from(["a", "b"]),
            "v": st.none() | st.sampled_from([-1.5, 0.0, 2.0, 2.0, 7.25]),
            "n": st.none() | st.integers(-3, 3),
            "ok": st.booleans() | st.just(True),
            "step": st.integers(-2, 6),
            "null_at": st.integers(0, 19),
        }
    ),
    min_size=1,
    max_size=60,
)


def _batches(flow: Dataflow, drawn: list[dict[str, Any]], pieces: int) -> list[Any]:
    clock = 100
    rows: list[tuple[str, dict[str, Any]]] = []
    for e in drawn:
        clock += e["step"]
        if e["probe"]:
            rows.append(("probes", {"k": e["k"], "name": e["name"], "_ts": clock}))
            continue
        at = None if e["null_at"] == 0 else clock
        event = {name: e[name] for name in ("k", "name", "v", "n", "ok")}
        rows.append(("events", {**event, "at": at, "_ts": clock}))
    size = -(-len(rows) // pieces)
    batches = []
    for b, start in enumerate(range(0, len(rows), size)):
        part = rows[start : start + size]
        batches.append(
            make_batch(
                flow,
                b + 1,
                events=[r for source, r in part if source == "events"],
                probes=[r for source, r in part if source == "probes"],
            )
        )
    return batches


@pytest.mark.parametrize("compact", [False, True])
@pytest.mark.parametrize("key", sorted(KEYS))
@settings(max_examples=40, deadline=None)
@given(drawn_events, st.integers(1, 4))
def test_compiled_windows_equal_the_oracle(
    key: str, compact: bool, drawn: list[dict[str, Any]], pieces: int
) -> None:
    flow = windows_flow(key)
    batches = _batches(flow, drawn, pieces)
    with patch.object(window_arrays, "COMPACT_MIN_DROPPED", -1 if compact else 1 << 62):
        expected = run_in_memory(flow, batches, executor="serial")
        actual = run_in_memory(flow, batches, executor="local")
        assert_same_results(expected, actual)
        half = len(batches) // 2
        first = run_in_memory(flow, batches[:half], executor="serial")
        resumed = run_in_memory(flow, batches[half:], executor="local", state=first.final_state)
        assert_same_results(
            run_in_memory(flow, batches[half:], executor="serial", state=first.final_state),
            resumed,
        )
    for result in actual.results:
        for decision in result.decisions:
            assert decision.strategy == "sequential", decision


def test_window_steps_are_compiled_and_a_sum_is_not() -> None:
    local = create_executor("local", windows_flow("pair").build())
    assert isinstance(local, LocalExecutor)
    explained = local.explain()
    assert explained["apply"].compiled and explained["apply"].extended
    assert explained["peek"].compiled
    summed = create_executor("local", windows_flow("int", sums=True).build())
    assert isinstance(summed, LocalExecutor)
    assert not summed.explain()["apply"].compiled
    assert "table 'w' is not compiled" in summed.explain()["apply"].reasons[0]


def test_late_and_untimed_entries_abort_with_the_oracles_reasons() -> None:
    flow = windows_flow("int")
    rows = [
        {"k": 1, "name": "a", "v": 1.0, "n": 1, "ok": True, "at": 120, "_ts": 120},
        {"k": 1, "name": "a", "v": 2.0, "n": 2, "ok": True, "at": 110, "_ts": 121},
        {"k": 1, "name": "a", "v": 3.0, "n": 3, "ok": True, "at": None, "_ts": 122},
    ]
    batches = [make_batch(flow, 1, events=rows)]
    local = run_in_memory(flow, batches, executor="local")
    assert_same_results(run_in_memory(flow, batches, executor="serial"), local)
    reasons = local.results[0].aborts.column("reason").to_pylist()
    assert reasons == [
        "op0 window w: window entry at 110 is older than the key's latest (120)",
        "op0 window w: window time is null",
    ]


def test_a_rolled_back_batch_leaves_the_window_as_it_was() -> None:
    flow = windows_flow("int").build()
    clock = 100
    rows = []
    for i in range(40):
        clock += 3
        rows.append({"k": i % 3, "name": "a", "v": float(i), "n": i, "ok": i % 7 != 0})
        rows[-1].update(at=clock, _ts=clock)
    batches = [make_batch(flow, b + 1, events=rows[b * 10 : b * 10 + 10]) for b in range(4)]
    runner = create_executor("local", flow)
    oracle = create_executor("serial", flow)
    for batch in batches[:2]:
        runner.run_batch(batch)
        oracle.run_batch(batch)
    before = runner.state_image()
    prepared = runner.prepare_batch(batches[2])
    runner.begin_batch()
    step = flow.transactional_steps()[0]
    outcome = runner.run_transactions(step, prepared.produced[step.input or ""], prepared.dead)
    assert outcome.committed > 0
    assert not runner.state_image().tables["w"].equals(before.tables["w"])
    runner.rollback_batch()
    assert runner.state_image().tables["w"].equals(before.tables["w"])
    assert runner.state_image().sequences == before.sequences
    for batch in batches[2:]:
        got, want = runner.run_batch(batch), oracle.run_batch(batch)
        assert got.deltas["w"].upserts.equals(want.deltas["w"].upserts)
        assert got.deltas["w"].deletes.equals(want.deltas["w"].deletes)
    assert runner.state_image().tables["w"].equals(oracle.state_image().tables["w"])
    runner.close()
    oracle.close()


def test_a_window_timed_by_a_timestamp_column_equals_the_oracle() -> None:
    """A timestamp-typed time runs in the kernel as the µs the serial executor compares."""
    flow = Dataflow("stamped")
    w = flow.window_table(
        "w",
        key={"k": "int64"},
        columns={"v": "float64"},
        span=10,
        aggregates={"high": ("max", "v"), "high_at": ("argmax", "v")},
    )
    flow.source("events", schema={"k": "int64", "v": "float64", "at": "timestamp"})
    t = flow.transact("apply", input="events")
    got = t.window(w, "k", {"v": col("v")}, at=col("at"))
    t.emit(k=col("k"), high=got["high"], high_at=got["high_at"])
    flow.sink("out")
    start = datetime.datetime(2020, 1, 1)
    rows = [
        {
            "k": i % 2,
            "v": float(i % 5),
            "at": start + datetime.timedelta(microseconds=3 * i - (9 if i == 6 else 0)),
            "_ts": i,
        }
        for i in range(12)
    ]
    batches = [make_batch(flow, 1, events=rows[:6]), make_batch(flow, 2, events=rows[6:])]
    local = run_in_memory(flow, batches, executor="local")
    assert_same_results(run_in_memory(flow, batches, executor="serial"), local)
    assert local.results[0].decisions[0].strategy == "sequential"
    assert local.results[1].aborts.column("reason").to_pylist() == [
        "op0 window w: window entry at 1577836800000009 is older than the key's latest "
        "(1577836800000012)"
    ]


def test_a_batch_that_changes_many_entries_equals_the_oracle() -> None:
    """More entries added and dropped in one batch than the delta's first arrays hold (they
    grow), over many keys."""
    flow = windows_flow("int")
    rows = []
    for i in range(400):
        ts = 100 + 2 * i
        event = {"k": i % 40, "name": "a", "v": float(i % 9), "n": i, "ok": True}
        rows.append({**event, "at": ts, "_ts": ts})
    batches = [make_batch(flow, b + 1, events=rows[b * 200 : b * 200 + 200]) for b in range(2)]
    local = run_in_memory(flow, batches, executor="local")
    assert_same_results(run_in_memory(flow, batches, executor="serial"), local)
    assert local.results[1].deltas["w"].deletes.num_rows > 16
    assert local.results[1].deltas["w"].upserts.num_rows > 16
