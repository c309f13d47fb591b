"""The local executor: compiled where it can, interpreted elsewhere, always the oracle's result."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from etl_dataflows import (
    Dataflow,
    coalesce,
    col,
    cost,
    create_executor,
    greatest,
    if_else,
    least,
    lit,
    old,
    udf,
)
from etl_dataflows.exceptions import StepFailed
from etl_dataflows.executors import LocalExecutor
from etl_dataflows.testing import (
    WorkloadSpec,
    assert_same_results,
    ledger_workload,
    make_batch,
    run_in_memory,
)

from .test_tpcdi_patterns import broker_flow

INT64_MAX = 2**63 - 1


def risky(a: int | None) -> int | None:
    if a == 3:
        raise ValueError("three is not allowed")
    return None if a is None else a * 2


def calc_flow() -> Dataflow:
    """Every expression feature the compiler handles, on state that starts empty."""
    flow = Dataflow("calc")
    calc = flow.table(
        "calc",
        key={"id": "int64"},
        columns={"i": "int64", "f": "float64", "b": "bool", "t": "timestamp"},
        surrogate="sk",
        defaults={"i": 1, "f": 2.0},
    )
    names = flow.table(
        "names", key={"name": "string"}, columns={"hits": "int64"}, defaults={"hits": 0}
    )
    flow.source(
        "ev", schema={"id": "int64", "a": "int64", "x": "float64", "p": "bool", "k": "string"}
    )
    t = flow.transact("calc_step")
    first = t.update(
        calc,
        "id",
        set={
            "i": if_else(old("b"), old("i") + col("a"), old("i") * col("a")),
            "f": coalesce(old("f") / col("x"), col("x") // old("f"), 0.5),
            "b": ((old("i") > col("a")) & col("p")) | old("b").is_null(),
            "t": greatest(old("t"), col("a")),
        },
        if_missing="insert",
    )
    partner = t.read(calc, col("a") % 5)
    t.update(
        calc,
        "id",
        set={
            "i": old("i") - coalesce(partner["i"], 0),
            "f": least(old("f"), partner["f"], col("x")),
        },
        require=(partner.found | col("p"), "needs a partner"),
        when=col("k") == "x",
    )
    t.insert(
        calc,
        col("a"),
        {"i": (col("x") * 1e17).cast("int64"), "b": col("p")},
        if_exists="skip",
        when=col("k") == "ins",
    )
    t.delete(calc, col("a") + 1, if_missing="skip", when=col("k") == "del")
    t.update(
        names,
        "k",
        set={
            "hits": old("hits") + if_else(old("hits") > 1, udf(risky, col("a"), returns="int64"), 1)
        },
        if_missing="insert",
    )
    t.emit(
        i=first["i"],
        before_i=first.before("i"),
        f=first["f"],
        b=first["b"],
        t=first["t"],
        found=partner.found,
        sk=first["sk"],
        k=col("k"),
        neg=-first["i"],
        mag=abs(first["i"]) // 7,
        ratio=first["i"] / col("a"),
    )
    flow.sink("out")
    return flow


events = st.lists(
    st.fixed_dictionaries(
        {
            "id": st.integers(0, 6),
            "a": st.one_of(st.integers(-4, 4), st.sampled_from([0, INT64_MAX, -(2**62), None])),
            "x": st.one_of(st.floats(-5, 5, allow_nan=False), st.sampled_from([0.0, 1e300, None])),
            "p": st.one_of(st.booleans(), st.none()),
            "k": st.sampled_from(["x", "ins", "del", "other", None]),
            "_ts": st.integers(0, 50),
        }
    ),
    min_size=1,
    max_size=40,
)


@pytest.mark.parametrize("executor", ["local", "lock", "pat", "tstream"])
@settings(max_examples=40)
@given(st.lists(events, min_size=1, max_size=3))
def test_compiled_expressions_match_the_oracle(
    executor: str, batches: list[list[dict[str, Any]]]
) -> None:
    flow = calc_flow()
    made = [make_batch(flow, i + 1, ev=rows) for i, rows in enumerate(batches)]
    oracle = run_in_memory(flow, made)
    compiled = run_in_memory(flow, made, executor=executor)
    expected = "sequential" if executor == "local" else executor
    assert compiled.results[0].decisions[0].strategy == expected
    assert_same_results(oracle, compiled)


def test_compiled_and_interpreted_steps() -> None:
    executor = create_executor("local", calc_flow())
    assert isinstance(executor, LocalExecutor)
    assert executor.explain()["calc_step"].compiled
    broker = create_executor("local", broker_flow())
    assert isinstance(broker, LocalExecutor)
    analysis = broker.explain()
    # the steps over history tables stay interpreted; the 52-week window step compiles
    assert {name for name, a in analysis.items() if a.compiled} == {"market_step"}
    assert any("history" in r or "not compiled" in r for r in analysis["customers_step"].reasons)


def test_interpreted_steps_match_the_oracle() -> None:
    from .test_tpcdi_patterns import DAY, cust

    flow = broker_flow()
    batch = make_batch(
        flow,
        1,
        customer_updates=[cust("NEW", 1, DAY, name="Ann", tier=1), cust("UPD", 1, 3 * DAY, tier=2)],
    )
    oracle = run_in_memory(flow, [batch])
    local = run_in_memory(flow, [batch], executor="local")
    assert_same_results(oracle, local)
    assert local.results[0].decisions[0].strategy == "interpreted"


def costly_flow(nanoseconds: int) -> Dataflow:
    flow = Dataflow("costly")
    accounts = flow.table(
        "accounts", key={"id": "int64"}, columns={"balance": "int64"}, defaults={"balance": 100}
    )
    flow.source("t", schema={"src": "int64", "dst": "int64", "amount": "int64"})
    t = flow.transact("transfer")
    src = t.update(
        accounts,
        "src",
        set={"balance": cost(old("balance") - col("amount"), nanoseconds)},
        require=(old("balance") >= col("amount"), "insufficient funds"),
        if_missing="insert",
    )
    t.update(
        accounts,
        "dst",
        set={"balance": cost(old("balance") + col("amount"), nanoseconds)},
        if_missing="insert",
    )
    t.emit(left=src["balance"])
    flow.sink("out")
    return flow


def transfers(n: int, keys: int, seed: int) -> list[dict[str, Any]]:
    import random

    rng = random.Random(seed)
    return [
        {
            "src": rng.randrange(keys),
            "dst": rng.randrange(keys),
            "amount": rng.randrange(1, 60),
            "_ts": i,
        }
        for i in range(n)
    ]


def test_waves_match_the_oracle() -> None:
    flow = costly_flow(0)
    batches = [make_batch(flow, b, t=transfers(2_000, 50, b)) for b in range(1, 4)]
    oracle = run_in_memory(flow, batches)
    runner = LocalExecutor(flow, strategy="waves", workers=2)
    results = [runner.run_batch(b) for b in batches]
    assert {d.strategy for r in results for d in r.decisions} == {"waves"}
    assert all(d.figures["levels"] >= 1 for r in results for d in r.decisions)
    for expected, got in zip(oracle.results, results, strict=True):
        assert expected.aborts.equals(got.aborts)
        assert expected.outputs["out"].equals(got.outputs["out"])
        assert expected.deltas["accounts"].upserts.equals(got.deltas["accounts"].upserts)
    assert runner.state_image().equals(oracle.final_state)


def test_the_choice_follows_the_cost_of_transactions() -> None:
    cheap, dear = costly_flow(0), costly_flow(20_000)
    cheap_runner = LocalExecutor(cheap, workers=2)
    dear_runner = LocalExecutor(dear, workers=2)
    rows = transfers(3_000, 100_000, 7)  # few conflicts: wide waves
    chosen = []
    for b in range(1, 4):
        chosen.append(
            (
                cheap_runner.run_batch(make_batch(cheap, b, t=rows)).decisions[0],
                dear_runner.run_batch(make_batch(dear, b, t=rows)).decisions[0],
            )
        )
    assert all(c.strategy == "sequential" for c, _ in chosen)
    assert chosen[-1][1].strategy == "waves", chosen[-1][1]
    assert "levels" in chosen[-1][1].figures


def test_restart_from_a_state_image() -> None:
    workload = ledger_workload(
        WorkloadSpec(keys=30, batch_size=200, batches=4, insert_delete_ratio=0.2, seed=9)
    )
    straight = run_in_memory(
        workload.flow, workload.batches, executor="local", state=workload.state
    )
    first = run_in_memory(
        workload.flow, workload.batches[:2], executor="local", state=workload.state
    )
    resumed = run_in_memory(
        workload.flow, workload.batches[2:], executor="local", state=first.final_state
    )
    assert resumed.final_state.equals(straight.final_state)
    for a, b in zip(resumed.results, straight.results[2:], strict=True):
        assert a.deltas["accounts"].upserts.equals(b.deltas["accounts"].upserts)
        assert a.deltas["accounts"].deletes.equals(b.deltas["accounts"].deletes)


def test_a_failing_batch_leaves_compiled_state_untouched() -> None:
    broken = {"now": False}

    def sometimes_broken(table: pa.Table) -> pa.Table:
        return pa.table({"x": [1]}) if broken["now"] else table

    flow = costly_flow(0)
    flow.map("maybe_broken", sometimes_broken)
    runner = create_executor("local", flow)
    oracle = create_executor("serial", flow)
    first = make_batch(flow, 1, t=transfers(50, 5, 1))
    runner.run_batch(first)
    oracle.run_batch(first)
    before = runner.state_image()
    broken["now"] = True
    with pytest.raises(StepFailed, match="maybe_broken"):
        runner.run_batch(make_batch(flow, 2, t=transfers(50, 5, 2)))
    assert runner.state_image().equals(before)
    broken["now"] = False
    third = make_batch(flow, 3, t=transfers(50, 5, 3))
    got, expected = runner.run_batch(third), oracle.run_batch(third)
    assert got.deltas["accounts"].upserts.equals(expected.deltas["accounts"].upserts)
    assert runner.state_image().equals(oracle.state_image())


def test_string_keys_are_compiled() -> None:
    flow = Dataflow("words")
    counts = flow.table("counts", key={"word": "string"}, columns={"n": "int64"}, defaults={"n": 0})
    flow.source("words", schema={"word": "string"})
    t = flow.transact("count")
    c = t.update(counts, "word", set={"n": old("n") + 1}, if_missing="insert")
    t.emit(n=c["n"])
    flow.sink("out")
    rows = [{"word": w, "_ts": i} for i, w in enumerate(["b", "a", "b", None, "ä", "a", "b"])]
    oracle = run_in_memory(flow, [make_batch(flow, 1, words=rows)])
    local = run_in_memory(flow, [make_batch(flow, 1, words=rows)], executor="local")
    assert local.results[0].decisions[0].strategy == "sequential"
    assert_same_results(oracle, local)
    assert [r["n"] for r in local.sink.rows("out")] == [1, 1, 2, 1, 2, 3]


@settings(max_examples=25)
@given(
    st.builds(
        WorkloadSpec,
        keys=st.integers(2, 100),
        theta=st.floats(0.0, 0.99),
        abort_ratio=st.floats(0.0, 0.5),
        insert_delete_ratio=st.floats(0.0, 0.3),
        same_key_ratio=st.floats(0.0, 0.3),
        error_ratio=st.floats(0.0, 0.1),
        disorder=st.floats(0.0, 1.0),
        batch_size=st.integers(1, 400),
        batches=st.integers(1, 3),
        seed=st.integers(0, 2**31),
    )
)
def test_forced_parallel_strategies_match_the_oracle(spec: WorkloadSpec) -> None:
    """Waves and chains run conflict-free transactions side by side, surrogate keys drawn in
    timestamp order."""
    workload = ledger_workload(spec)
    oracle = run_in_memory(workload.flow, workload.batches, state=workload.state)
    for strategy in ("waves", "chains"):
        check_forced(workload, oracle, strategy)  # type: ignore[arg-type]


def check_forced(workload: Any, oracle: Any, strategy: Any) -> None:
    runner = LocalExecutor(workload.flow, workload.state, strategy=strategy, workers=2)
    for batch, expected in zip(workload.batches, oracle.results, strict=True):
        got = runner.run_batch(batch)
        assert got.aborts.equals(expected.aborts)
        assert got.outputs["balances"].equals(expected.outputs["balances"])
        assert got.sequences == expected.sequences
    assert runner.state_image().equals(oracle.final_state)


@pytest.mark.parametrize("executor", ["serial", "local"])
def test_streaming_with_prepare_ahead_equals_batch_by_batch(executor: str) -> None:
    workload = ledger_workload(
        WorkloadSpec(
            keys=40, batch_size=300, batches=5, error_ratio=0.05, insert_delete_ratio=0.1, seed=21
        )
    )
    flow = workload.flow
    flow.validate(
        "sane", {"amount is small": col("amount").is_null() | (col("amount") < 90)}, input="txns"
    )
    one = create_executor(executor, flow, workload.state)
    other = create_executor(executor, flow, workload.state)
    streamed = list(other.run_stream(workload.batches))
    assert len(streamed) == len(workload.batches)
    for batch, got in zip(workload.batches, streamed, strict=True):
        expected = one.run_batch(batch)
        assert got.aborts.equals(expected.aborts)
        assert got.dead_letters.equals(expected.dead_letters)
        assert got.outputs["balances"].equals(expected.outputs["balances"])
        assert got.deltas["accounts"].upserts.equals(expected.deltas["accounts"].upserts)
    assert other.state_image().equals(one.state_image())


def counter_flow(policy: str) -> Dataflow:
    """Commutative increments and reads: what the chain scan takes."""
    flow = Dataflow(f"counters_{policy}")
    hits = flow.table(
        "hits", key={"k": "int64"}, columns={"n": "int64", "m": "int64"}, defaults={"n": 0, "m": 5}
    )
    flow.source("ev", schema={"k": "int64", "k2": "int64", "d": "int64", "kind": "string"})
    t = flow.transact("count")
    first = t.update(
        hits,
        "k",
        set={"n": old("n") + col("d"), "m": old("m") - 1},
        if_missing=policy,
        when=col("kind") != "r",
    )  # type: ignore[arg-type]
    seen = t.read(hits, "k2")
    second = t.update(
        hits, "k2", set={"n": 3 + old("n")}, if_missing=policy, when=col("kind") == "both"
    )  # type: ignore[arg-type]
    t.emit(
        n=first["n"],
        before=first.before("n"),
        m=first["m"],
        seen=seen["n"],
        found=seen.found,
        second=second["n"],
        total=first["n"] + coalesce(seen["n"], 0),
    )
    flow.sink("out")
    return flow


counter_events = st.lists(
    st.fixed_dictionaries(
        {
            "k": st.one_of(st.integers(0, 5), st.none()),
            "k2": st.integers(0, 5),
            "d": st.one_of(st.integers(-3, 3), st.none()),
            "kind": st.sampled_from(["one", "both", "r"]),
            "_ts": st.integers(0, 9),
        }
    ),
    min_size=1,
    max_size=30,
)


@pytest.mark.parametrize("policy", ["insert", "abort", "skip"])
@settings(max_examples=30)
@given(st.lists(counter_events, min_size=1, max_size=3))
def test_chain_scan_matches_the_oracle(policy: str, batches: list[list[dict[str, Any]]]) -> None:
    flow = counter_flow(policy)
    start = [{"k": k, "n": 10 * k, "m": 1} for k in (1, 3)]
    from etl_dataflows.state import StateImage, rows_to_table

    table = flow.build().tables["hits"]
    state = StateImage({"hits": rows_to_table(table, start)}, {"hits": 1})
    made = [make_batch(flow, i + 1, ev=rows) for i, rows in enumerate(batches)]
    oracle = run_in_memory(flow, made, state=state)
    runner = LocalExecutor(flow, state, strategy="chain_scan")
    for batch, expected in zip(made, oracle.results, strict=True):
        got = runner.run_batch(batch)
        assert got.decisions[0].figure("fell_back") is None, got.decisions
        assert got.aborts.equals(expected.aborts), (
            got.aborts.to_pylist(),
            expected.aborts.to_pylist(),
        )
        assert got.dead_letters.equals(expected.dead_letters)
        assert got.outputs["out"].equals(expected.outputs["out"]), (
            got.outputs["out"].to_pylist(),
            expected.outputs["out"].to_pylist(),
        )
        assert got.deltas["hits"].upserts.equals(expected.deltas["hits"].upserts)
    assert runner.state_image().equals(oracle.final_state)


def test_chain_scan_falls_back_when_a_batch_is_not_commutative() -> None:
    workload = ledger_workload(WorkloadSpec(keys=30, batch_size=200, batches=2, seed=4))
    oracle = run_in_memory(workload.flow, workload.batches, state=workload.state)
    runner = LocalExecutor(workload.flow, workload.state, strategy="chain_scan")
    for batch, expected in zip(workload.batches, oracle.results, strict=True):
        got = runner.run_batch(batch)
        assert got.decisions[0].figures["fell_back"] == "sequential"
        assert got.outputs["balances"].equals(expected.outputs["balances"])
    assert runner.state_image().equals(oracle.final_state)


@pytest.mark.parametrize("strategy", ["waves", "chains", "lock", "pat"])
def test_aborts_beside_key_draws_leave_the_sequence_alone(strategy: str) -> None:
    """Transactions that draw surrogate keys run beside transactions that abort after costly work;
    an abort must not roll back a sequence another transaction advanced meanwhile."""
    flow = Dataflow("draws")
    items = flow.table(
        "items", key={"id": "int64"}, columns={"v": "int64"}, surrogate="sk", defaults={"v": 0}
    )
    flow.source("ev", schema={"kind": "string", "id": "int64"})
    t = flow.transact("apply")
    t.insert(items, "id", {"v": lit(1)}, when=col("kind") == "new")
    t.update(
        items,
        "id",
        set={"v": cost(old("v") + 1, 20_000)},
        if_missing="skip",
        when=col("kind") == "fail",
    )
    t.update(
        items, col("id") + 1_000_000, set={"v": old("v")}, when=col("kind") == "fail"
    )  # never exists: aborts
    flow.sink("out", input="apply")
    rows = []
    for i in range(400):
        rows.append({"kind": "new", "id": 10_000 + i, "_ts": 2 * i})
        rows.append({"kind": "fail", "id": i % 50, "_ts": 2 * i + 1})
    start = [{"id": k, "sk": k + 1, "v": 0} for k in range(50)]
    from etl_dataflows.state import StateImage, rows_to_table

    state = StateImage({"items": rows_to_table(flow.build().tables["items"], start)}, {"items": 51})
    batches = [make_batch(flow, b, ev=rows) for b in (1,)]
    oracle = run_in_memory(flow, batches, state=state)
    runner = LocalExecutor(flow, state, strategy=strategy, workers=2)
    got = runner.run_batch(batches[0])
    assert got.sequences == oracle.results[0].sequences
    assert runner.state_image().equals(oracle.final_state)
