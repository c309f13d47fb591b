"""Window tables against a brute-force model: every aggregate kind over the entries of the last
``span`` µs, nulls ignored, ties of the max/min at their earliest time, late entries aborted, on
every executor, with the state image reloaded midway. The local executor runs a window with a
sum interpreted and one without compiled (``RUNS``)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from etl_dataflows import Dataflow, col
from etl_dataflows.executors import LocalExecutor, create_executor
from etl_dataflows.tables import WindowTable
from etl_dataflows.testing import make_batch, run_in_memory

SPAN = 10
KINDS = ("max", "min", "sum", "count", "first", "last", "argmax", "argmin")
#: The aggregates of a window the local executor compiles (no sum).
COMPILED_KINDS = tuple(kind for kind in KINDS if kind != "sum")
#: (executor, the window's aggregates, whether the local executor compiles the step)
RUNS = [("serial", KINDS, False), ("local", KINDS, False), ("local", COMPILED_KINDS, True)]


def _window(flow: Dataflow, value_type: str, kinds: tuple[str, ...]) -> WindowTable:
    """The window table ``w`` of both flows: key ``k``, value ``v``, the aggregate ``kinds``."""
    return flow.window_table(
        "w",
        key={"k": "int64"},
        columns={"v": value_type},
        span=SPAN,
        aggregates={f"a_{kind}": (kind, "v") for kind in kinds},
    )


def _check_compiled(flow: Dataflow, executor: str, compiled: bool) -> None:
    """The local executor compiles the step, or not, as the run expects."""
    if executor == "local":
        local = create_executor("local", flow.build())
        assert isinstance(local, LocalExecutor)
        assert local.explain()["apply"].compiled is compiled


def window_flow(kinds: tuple[str, ...] = KINDS) -> Dataflow:
    flow = Dataflow("windows")
    w = _window(flow, "int64", kinds)
    flow.source("events", schema={"k": "int64", "v": "int64"})
    t = flow.transact("apply", input="events")
    got = t.window(w, "k", {"v": col("v")})
    # (aggregates named apart from an operation result's own "count" and "found")
    t.emit(k=col("k"), **{kind: got[f"a_{kind}"] for kind in kinds})
    flow.sink("out")
    return flow


def model(batches: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The output row of every event that is not late (a batch's events in time order)."""
    entries: dict[int, list[tuple[int, int | None]]] = {}
    out = []
    ordered = [r for rows in batches for r in sorted(rows, key=lambda r: r["_ts"])]
    for r in ordered:
        mine = entries.setdefault(r["k"], [])
        if mine and r["_ts"] < mine[-1][0]:
            continue  # late: aborted
        mine.append((r["_ts"], r["v"]))
        seen = [(at, v) for at, v in mine if r["_ts"] - SPAN < at <= r["_ts"]]
        values = [(at, v) for at, v in seen if v is not None]
        vs = [v for _, v in values]
        result: dict[str, Any] = {"k": r["k"], "count": len(vs)}
        if vs:
            result.update(
                max=max(vs),
                min=min(vs),
                sum=sum(vs),
                first=vs[0],
                last=vs[-1],
                # the earliest entry holding the max (as list.index finds it: NaN by identity)
                argmax=values[vs.index(max(vs))][0],
                argmin=values[vs.index(min(vs))][0],
            )
        else:
            result.update({kind: None for kind in KINDS if kind != "count"})
        out.append(result)
    return out


events = st.lists(
    st.fixed_dictionaries(
        {
            "k": st.integers(0, 2),
            "v": st.none() | st.integers(-3, 3),
            "step": st.integers(-2, 6),
        }
    ),
    min_size=1,
    max_size=50,
)


@pytest.mark.parametrize(("executor", "kinds", "compiled"), RUNS)
@settings(max_examples=60, deadline=None)
@given(events)
def test_window_matches_the_model(
    executor: str, kinds: tuple[str, ...], compiled: bool, drawn: list[dict[str, Any]]
) -> None:
    rows = []
    clock = 100
    for e in drawn:
        clock += e["step"]  # a negative step: an earlier time (late in the second batch)
        rows.append({"k": e["k"], "v": e["v"], "_ts": clock})
    flow = window_flow(kinds)
    _check_compiled(flow, executor, compiled)
    half = len(rows) // 2
    batches = [make_batch(flow, 1, events=rows[:half]), make_batch(flow, 2, events=rows[half:])]
    first = run_in_memory(flow, batches[:1], executor=executor)
    second = run_in_memory(flow, batches[1:], executor=executor, state=first.final_state)
    got = [
        {name: r[name] for name in ("k", *kinds)}
        for r in [*first.sink.rows("out"), *second.sink.rows("out")]
    ]
    want = model([rows[:half], rows[half:]])
    assert got == [{name: r[name] for name in ("k", *kinds)} for r in want]


def guarded_flow(kinds: tuple[str, ...] = KINDS) -> Dataflow:
    """Float values (NaN and null among them) and a second operation that aborts the transaction
    after its window entry was stored (``ok`` false): the entry must be undone."""
    flow = Dataflow("guarded")
    w = _window(flow, "float64", kinds)
    marks = flow.table("marks", key={"k": "int64"}, columns={"n": "int64"})
    flow.source("events", schema={"k": "int64", "v": "float64", "ok": "bool"})
    t = flow.transact("apply", input="events")
    got = t.window(w, "k", {"v": col("v")})
    t.write(marks, "k", {"n": col("k")}, require=(col("ok"), "refused"))
    t.emit(k=col("k"), **{kind: got[f"a_{kind}"] for kind in kinds})
    flow.sink("out")
    return flow


guarded_events = st.lists(
    st.fixed_dictionaries(
        {
            "k": st.integers(0, 2),
            "v": st.none() | st.sampled_from([-1.5, 0.0, -0.0, 2.0, 2.0, 7.25, float("nan")]),
            "step": st.integers(-1, 6),
            "ok": st.booleans() | st.just(True),
        }
    ),
    min_size=1,
    max_size=60,
)


def _same(a: Any, b: Any) -> bool:
    """Equal, NaN equal to NaN, and -0.0 told from 0.0."""
    if isinstance(a, float) and isinstance(b, float):
        return (a != a and b != b) or (a == b and str(a) == str(b))
    return type(a) is type(b) and a == b


@pytest.mark.parametrize(("executor", "kinds", "compiled"), RUNS)
@settings(max_examples=80, deadline=None)
@given(guarded_events, st.integers(1, 4))
def test_running_aggregates_match_the_model_across_batches_and_aborts(
    executor: str,
    kinds: tuple[str, ...],
    compiled: bool,
    drawn: list[dict[str, Any]],
    pieces: int,
) -> None:
    """One executor runs several batches (the running aggregates of :mod:`window_summary` live
    on across them); a refused transaction's entry is undone; NaN, null and -0.0 values."""
    rows = []
    clock = 100
    for e in drawn:
        clock += e["step"]
        rows.append({"k": e["k"], "v": e["v"], "ok": e["ok"], "_ts": clock})
    flow = guarded_flow(kinds)
    _check_compiled(flow, executor, compiled)
    size = -(-len(rows) // pieces)
    parts = [rows[i : i + size] for i in range(0, len(rows), size)]
    batches = [make_batch(flow, b + 1, events=part) for b, part in enumerate(parts)]
    run = run_in_memory(flow, batches, executor=executor)
    got = [{name: r[name] for name in ("k", *kinds)} for r in run.sink.rows("out")]
    committed = [[r for r in part if r["ok"]] for part in parts]
    # a refused event still takes part in the lateness check of later events only if stored:
    # it is not, so the model sees the committed events alone
    want = [{name: r[name] for name in ("k", *kinds)} for r in model(committed)]
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.keys() == w.keys()
        assert all(_same(g[n], w[n]) for n in g), (g, w)
