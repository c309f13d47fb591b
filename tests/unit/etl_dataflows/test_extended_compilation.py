"""The local executor's extended compilation (strings as pool codes, several key columns, whens over
earlier operations, pre-reads of tables the step does not write) against the serial oracle."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from etl_dataflows import Dataflow, coalesce, col, if_else, lit, old
from etl_dataflows.executors import LocalExecutor
from etl_dataflows.executors.local.strings import StringPool
from etl_dataflows.testing import assert_same_results, make_batch, run_in_memory

DAY = 86_400_000_000


def shop_flow() -> Dataflow:
    """Customers (a history table, written by an interpreted step) read by a compiled order step
    that keeps orders with string columns, daily totals keyed by (customer, day) and watches keyed
    by (customer, symbol)."""
    flow = Dataflow("shop")
    customers = flow.history_table(
        "customers",
        key={"customer_id": "int64"},
        columns={"name": "string", "tier": "int64"},
        surrogate="sk_customer",
    )
    orders = flow.table(
        "orders",
        key={"order_id": "int64"},
        columns={
            "customer_id": "int64",
            "sk_customer": "int64",
            "status": "string",
            "note": "string",
            "qty": "int64",
        },
        surrogate="sk_order",
    )
    daily = flow.table(
        "daily",
        key={"customer_id": "int64", "day": "int64"},
        columns={"total": "int64", "last_status": "string"},
        defaults={"total": 0},
    )
    watches = flow.table(
        "watches",
        key={"customer_id": "int64", "symbol": "string"},
        columns={"placed": "int64", "label": "string"},
        defaults={"label": "new"},
    )
    flow.source(
        "customer_updates",
        schema={"customer_id": "int64", "name": "string", "tier": "int64"},
    )
    flow.source(
        "order_events",
        schema={
            "action": "string",
            "order_id": "int64",
            "customer_id": "int64",
            "status": "string",
            "qty": "int64",
            "day": "int64",
            "symbol": "string",
        },
    )
    c = flow.transact("customers_step", input="customer_updates")
    c.update(
        customers,
        "customer_id",
        set={"name": coalesce(col("name"), old("name")), "tier": col("tier")},
        if_missing="insert",
    )

    t = flow.transact("orders_step", input="order_events")
    action = col("action")
    is_new = action == "NEW"
    who = t.read(
        customers,
        "customer_id",
        when=is_new,
        require=(coalesce(old("tier"), 0) != 9, "tier 9 may not order"),
    )
    ok = is_new & coalesce(who.found, False)
    made = t.insert(
        orders,
        "order_id",
        {
            "customer_id": col("customer_id"),
            "sk_customer": who["sk_customer"],
            "status": coalesce(col("status"), "OPEN"),
            "note": who["name"],
            "qty": col("qty"),
        },
        if_exists="skip",
        when=ok,
    )
    changed = t.update(
        orders,
        "order_id",
        set={
            "status": if_else(col("status").is_null(), old("status"), col("status")),
            "note": if_else(old("status") == col("status"), "same", old("note")),
            "qty": old("qty") + coalesce(col("qty"), 0),
        },
        if_missing="skip",
        when=action == "SET",
    )
    dropped = t.delete(orders, "order_id", if_missing="skip", when=action == "DROP")
    total = t.update(
        daily,
        ["customer_id", "day"],
        set={"total": old("total") + coalesce(col("qty"), 0), "last_status": made["status"]},
        if_missing="insert",
        when=ok & ~coalesce(made.found, False),
    )
    watch = t.insert(
        watches,
        ["customer_id", "symbol"],
        {"placed": col("day")},
        if_exists="skip",
        when=col("symbol").not_null() & (action != "DROP"),
    )
    t.emit(
        order_id=col("order_id"),
        status=coalesce(changed["status"], made["status"]),
        name=who["name"],
        same=changed["status"] == col("status"),
        closed=changed["status"].isin(["CLOSED", "X"]),
        day_total=total["total"],
        dropped=dropped.found,
        label=if_else(coalesce(watch.found, False), watch["label"], "placed"),
        problem=if_else(
            is_new & ~ok,
            "unknown customer",
            if_else(coalesce(made.found, False), "duplicate order", lit(None)),
        ),
    )
    flow.sink("order_facts")
    return flow


def test_the_extended_steps_compile() -> None:
    """Without this the comparisons below could pass on the interpreted path."""
    executor = LocalExecutor(shop_flow())
    analysis = executor.explain()
    assert analysis["orders_step"].compiled, analysis["orders_step"].reasons
    assert analysis["orders_step"].extended
    assert analysis["orders_step"].pre_reads == frozenset({0})
    assert not analysis["customers_step"].compiled  # a history table: the serial code
    assert {"orders", "daily", "watches"} <= executor.compiled_tables


NAMES = st.sampled_from(["ann", "bob", "cy", "dé", None])
STATUSES = st.sampled_from(["OPEN", "CLOSED", "X", "HOLD", None])
SYMBOLS = st.sampled_from(["AA", "BB", "ÇC", None])

customer_events = st.fixed_dictionaries(
    {
        "customer_id": st.integers(1, 4),
        "name": NAMES,
        "tier": st.sampled_from([1, 2, 9]),
        "_ts": st.integers(0, 50),
    }
)
order_events = st.fixed_dictionaries(
    {
        "action": st.sampled_from(["NEW", "NEW", "SET", "DROP", "OTHER", None]),
        "order_id": st.one_of(st.integers(1, 12), st.none()),
        "customer_id": st.one_of(st.integers(1, 5), st.none()),
        "status": STATUSES,
        "qty": st.one_of(st.integers(-5, 50), st.none()),
        "day": st.integers(0, 3),
        "symbol": SYMBOLS,
        "_ts": st.integers(0, 50),
    }
)
batches_of = st.lists(
    st.tuples(
        st.lists(customer_events, max_size=6),
        st.lists(order_events, min_size=1, max_size=30),
    ),
    min_size=1,
    max_size=3,
)


def _batches(flow: Dataflow, spec: list[tuple[list[Any], list[Any]]]) -> list[Any]:
    return [
        make_batch(flow, i + 1, customer_updates=customers, order_events=orders)
        for i, (customers, orders) in enumerate(spec)
    ]


@pytest.mark.parametrize("strategy", [None, "sequential", "waves", "tstream"])
@settings(max_examples=40, deadline=None)
@given(batches_of)
def test_extended_steps_match_the_oracle(
    strategy: Any, spec: list[tuple[list[Any], list[Any]]]
) -> None:
    """Any choice (None: the executor's own), a forced one, and one an extended step does not
    take (it runs sequentially) all give the oracle's results: outputs, aborts, dead letters,
    deltas, sequences and the final state."""
    flow = shop_flow()
    batches = _batches(flow, spec)
    oracle = run_in_memory(flow, batches)
    runner = LocalExecutor(flow, strategy=strategy, workers=2)
    for batch, expected in zip(batches, oracle.results, strict=True):
        got = runner.run_batch(batch)
        for name, table in expected.outputs.items():
            assert got.outputs[name].equals(table), name
        assert got.aborts.equals(expected.aborts)
        assert got.dead_letters.equals(expected.dead_letters)
        assert got.sequences == expected.sequences
        for name, delta in expected.deltas.items():
            assert got.deltas[name].upserts.equals(delta.upserts), name
            assert got.deltas[name].deletes.equals(delta.deletes), name
    assert runner.state_image().equals(oracle.final_state)


def test_a_whole_run_matches_the_oracle_and_restarts_from_its_image() -> None:
    flow = shop_flow()
    customers = [
        {"customer_id": k, "name": n, "tier": t, "_ts": 1}
        for k, n, t in [(1, "ann", 1), (2, "bob", 9), (3, None, 2)]
    ]
    orders = [
        {"action": "NEW", "order_id": 1, "customer_id": 1, "status": None, "qty": 3, "day": 0,
         "symbol": "AA", "_ts": 5},
        {"action": "NEW", "order_id": 2, "customer_id": 2, "status": "OPEN", "qty": 1, "day": 0,
         "symbol": None, "_ts": 6},
        {"action": "NEW", "order_id": 3, "customer_id": 7, "status": "OPEN", "qty": 1, "day": 1,
         "symbol": "AA", "_ts": 7},
        {"action": "SET", "order_id": 1, "customer_id": 1, "status": "CLOSED", "qty": None,
         "day": 1, "symbol": "AA", "_ts": 8},
        {"action": "NEW", "order_id": 1, "customer_id": 3, "status": "X", "qty": 2, "day": 1,
         "symbol": "BB", "_ts": 9},
        {"action": "DROP", "order_id": 1, "customer_id": 1, "status": None, "qty": None, "day": 2,
         "symbol": None, "_ts": 10},
    ]  # fmt: skip
    first = make_batch(flow, 1, customer_updates=customers, order_events=orders[:3])
    second = make_batch(flow, 2, order_events=orders[3:])
    oracle = run_in_memory(flow, [first, second])
    local = run_in_memory(flow, [first, second], executor="local")
    assert_same_results(oracle, local)
    facts = local.sink.rows("order_facts")
    assert [(r["order_id"], r["status"], r["name"], r["problem"]) for r in facts] == [
        (1, "OPEN", "ann", None),
        (3, None, None, "unknown customer"),
        (1, "CLOSED", None, None),
        (1, "CLOSED", None, "duplicate order"),  # customer 3 has no name
        (1, None, None, None),
    ]
    assert local.results[0].aborts.column("reason").to_pylist() == [
        "op0 read customers: tier 9 may not order"
    ]
    # a restart from the first batch's image continues exactly
    restarted = LocalExecutor(flow, run_in_memory(flow, [first]).final_state)
    again = restarted.run_batch(second)
    assert again.outputs["order_facts"].equals(local.results[1].outputs["order_facts"])
    assert restarted.state_image().equals(oracle.final_state)


def test_a_kernel_is_the_same_whatever_state_it_starts_from() -> None:
    """A kernel holds its string literals as pool codes; they are given before the state's
    strings, so a process that starts from another state (a restarted service after more
    batches) generates the same kernel source and finds it in the kernel cache. Found by the
    TPC-DI fault campaign: every restart of serve compiled the TPC-DI kernels again (40-70 s at
    load 9-14), as the literal codes moved with the strings staging held."""
    flow = shop_flow()
    step = next(s for s in flow.build().transactional_steps() if s.id == "orders_step")
    customers = [
        {"customer_id": k, "name": n, "tier": 1, "_ts": 1}
        for k, n in [(1, "zed"), (2, "yve"), (3, "CLOSED")]
    ]
    orders = [
        {"action": "NEW", "order_id": k, "customer_id": 1, "status": s, "qty": 1, "day": 0,
         "symbol": y, "_ts": 5}
        for k, s, y in [(1, "HOLD", "QQ"), (2, "PENDING", "RR"), (3, "OPEN", "SS")]
    ]  # fmt: skip
    state = run_in_memory(
        flow, [make_batch(flow, 1, customer_updates=customers, order_events=orders)]
    ).final_state
    fresh = LocalExecutor(flow)
    restarted = LocalExecutor(flow, state)
    assert len(restarted.strings) > len(fresh.strings)  # the state brought strings of its own
    assert restarted.compiled_step(step).kernel.source == fresh.compiled_step(step).kernel.source


def test_the_string_pool_round_trips_and_keeps_one_code_per_string() -> None:
    import pyarrow as pa

    pool = StringPool()
    codes, valid = pool.encode(pa.array(["b", None, "a", "b", "é"]))
    assert codes[0] == codes[3] and codes[0] != codes[2]
    assert valid.tolist() == [True, False, True, True, True]
    assert pool.decode(codes, valid).to_pylist() == ["b", None, "a", "b", "é"]
    assert pool.code("a") == codes[2]
    assert len(pool) == 3


def listing_flow() -> Dataflow:
    """Securities (a history table keyed by a string, written by an interpreted step) read by a
    compiled trade step: a pre-read whose key is a string column, as TPC-DI's trades read
    DimSecurity by symbol."""
    flow = Dataflow("listing")
    securities = flow.history_table(
        "securities",
        key={"symbol": "string"},
        columns={"sector": "string", "lot": "int64"},
        surrogate="sk_security",
    )
    trades = flow.table(
        "trades",
        key={"trade_id": "int64"},
        columns={"symbol": "string", "sk_security": "int64", "sector": "string", "qty": "int64"},
    )
    flow.source("security_updates", schema={"symbol": "string", "sector": "string", "lot": "int64"})
    flow.source("trade_events", schema={"trade_id": "int64", "symbol": "string", "qty": "int64"})
    s = flow.transact("securities_step", input="security_updates")
    s.update(
        securities,
        "symbol",
        set={"sector": coalesce(col("sector"), old("sector")), "lot": col("lot")},
        if_missing="insert",
    )
    t = flow.transact("trades_step", input="trade_events")
    listed = t.read(securities, "symbol", when=col("qty") > 0)
    made = t.insert(
        trades,
        "trade_id",
        {
            "symbol": col("symbol"),
            "sk_security": listed["sk_security"],
            "sector": listed["sector"],
            "qty": col("qty") * coalesce(listed["lot"], 1),
        },
        if_exists="skip",
        when=coalesce(listed.found, False),
    )
    t.emit(
        trade_id=col("trade_id"),
        sector=listed["sector"],
        lot=listed["lot"],
        made=made.found,
        problem=if_else(coalesce(listed.found, False), lit(None), "unlisted"),
    )
    flow.sink("trade_facts")
    return flow


security_events = st.fixed_dictionaries(
    {
        "symbol": st.sampled_from(["AA", "BB", "ÇC", "dd", "", None]),
        "sector": st.sampled_from(["tech", "énergie", None]),
        "lot": st.sampled_from([1, 10, 100]),
        "_ts": st.integers(0, 50),
    }
)
trade_events = st.fixed_dictionaries(
    {
        "trade_id": st.integers(1, 15),
        "symbol": st.sampled_from(["AA", "BB", "ÇC", "dd", "", "ZZ", None]),
        "qty": st.one_of(st.integers(-2, 9), st.none()),
        "_ts": st.integers(0, 50),
    }
)


def test_a_string_keyed_pre_read_compiles() -> None:
    """Without this the comparison below could pass on the interpreted path."""
    analysis = LocalExecutor(listing_flow()).explain()
    assert analysis["trades_step"].compiled, analysis["trades_step"].reasons
    assert analysis["trades_step"].pre_reads == frozenset({0})


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(security_events, max_size=6), st.lists(trade_events, min_size=1, max_size=40)
        ),
        min_size=1,
        max_size=3,
    )
)
def test_a_string_keyed_pre_read_matches_the_oracle(
    spec: list[tuple[list[Any], list[Any]]],
) -> None:
    """Symbols repeated within a batch, unknown, empty and non-ASCII read what the oracle reads;
    a null symbol or quantity is not read (no key, or the read's condition not true)."""
    flow = listing_flow()
    batches = [
        make_batch(flow, i + 1, security_updates=securities, trade_events=trades)
        for i, (securities, trades) in enumerate(spec)
    ]
    oracle = run_in_memory(flow, batches)
    local = run_in_memory(flow, batches, executor="local")
    assert_same_results(oracle, local)
