"""What TPC-DI needs, on a small customer/account/trade/market flow with hand-computed answers:
SCD type 2 versions, a customer change re-versioning its accounts, surrogate keys looked up as of a
trade's time, same-day changes consolidated, and a 52-week high/low window."""

from __future__ import annotations

from typing import Any

import pytest

from etl_dataflows import Dataflow, coalesce, col, if_else, lit, old
from etl_dataflows.tables import END_OF_TIME_DATE
from etl_dataflows.testing import make_batch, run_in_memory

DAY = 86_400_000_000
HOUR = 3_600_000_000


def broker_flow() -> Dataflow:
    flow = Dataflow("broker")
    customers = flow.history_table(
        "customers",
        key={"customer_id": "int64"},
        columns={"name": "string", "tier": "int64", "status": "string"},
        surrogate="sk_customer_id",
    )
    accounts = flow.history_table(
        "accounts",
        key={"account_id": "int64"},
        columns={"customer_id": "int64", "sk_customer_id": "int64", "status": "string"},
        surrogate="sk_account_id",
        indexes=("customer_id",),
    )
    trades = flow.table(
        "trades",
        key={"trade_id": "int64"},
        columns={
            "account_id": "int64",
            "sk_account_id": "int64",
            "sk_customer_id": "int64",
            "symbol": "string",
            "qty": "int64",
            "status": "string",
        },
    )
    highs = flow.window_table(
        "highs",
        key={"symbol": "string"},
        columns={"high": "float64", "low": "float64"},
        span=364 * DAY,
        aggregates={
            "high52": ("max", "high"),
            "high52_at": ("argmax", "high"),
            "low52": ("min", "low"),
            "low52_at": ("argmin", "low"),
        },
    )
    flow.source(
        "customer_updates",
        schema={
            "action": "string",
            "customer_id": "int64",
            "name": "string",
            "tier": "int64",
            "status": "string",
        },
    )
    flow.source(
        "account_updates",
        schema={
            "action": "string",
            "account_id": "int64",
            "customer_id": "int64",
            "status": "string",
        },
    )
    flow.source(
        "trade_events",
        schema={
            "action": "string",
            "trade_id": "int64",
            "account_id": "int64",
            "symbol": "string",
            "qty": "int64",
            "trade_time": "timestamp",
        },
    )
    flow.source("market", schema={"symbol": "string", "high": "float64", "low": "float64"})

    # Dimensions first (declaration order), then facts: S-Store's CreateAccount -> CreateTrades.
    c = flow.transact("customers_step", input="customer_updates")
    action = col("action")
    new = c.insert(
        customers,
        "customer_id",
        {"name": col("name"), "tier": col("tier"), "status": lit("ACTIVE")},
        when=action == "NEW",
    )
    upd = c.update(
        customers,
        "customer_id",
        set={
            "name": coalesce(col("name"), old("name")),
            "tier": coalesce(col("tier"), old("tier")),
            "status": coalesce(col("status"), old("status")),
        },
        when=action == "UPD",
    )
    cascade = c.update_where(
        accounts,
        "customer_id",
        col("customer_id"),
        set={
            "sk_customer_id": upd["sk_customer_id"],
            "status": if_else(upd["status"] == "INACTIVE", "INACTIVE", old("status")),
        },
        when=action == "UPD",
    )
    c.emit(
        action=action,
        customer_id=col("customer_id"),
        sk=coalesce(new["sk_customer_id"], upd["sk_customer_id"]),
        accounts_reversioned=cascade.count,
    )
    flow.sink("customer_changes", input="customers_step")

    a = flow.transact("accounts_step", input="account_updates")
    owner = a.read(customers, "customer_id", if_missing="abort", when=col("action") == "NEW")
    a.insert(
        accounts,
        "account_id",
        {
            "customer_id": col("customer_id"),
            "sk_customer_id": owner["sk_customer_id"],
            "status": lit("ACTIVE"),
        },
        when=col("action") == "NEW",
    )
    a.update(
        accounts,
        "account_id",
        set={"status": coalesce(col("status"), old("status"))},
        when=col("action") == "UPD",
    )

    t = flow.transact("trades_step", input="trade_events")
    acct = t.read(
        accounts,
        "account_id",
        as_of=col("trade_time"),
        if_missing="abort",
        when=col("action") == "NEW",
    )
    t.insert(
        trades,
        "trade_id",
        {
            "account_id": col("account_id"),
            "sk_account_id": acct["sk_account_id"],
            "sk_customer_id": acct["sk_customer_id"],
            "symbol": col("symbol"),
            "qty": col("qty"),
            "status": lit("PENDING"),
        },
        when=col("action") == "NEW",
    )
    t.update(trades, "trade_id", set={"status": lit("DONE")}, when=col("action") == "DONE")
    t.emit(
        trade_id=col("trade_id"),
        sk_account_id=acct["sk_account_id"],
        sk_customer_id=acct["sk_customer_id"],
    )
    flow.sink("trade_facts")

    m = flow.transact("market_step", input="market")
    w = m.window(highs, "symbol", {"high": col("high"), "low": col("low")})
    m.emit(
        symbol=col("symbol"),
        high52=w["high52"],
        high52_day=w["high52_at"] // DAY,
        low52=w["low52"],
        low52_day=w["low52_at"] // DAY,
    )
    flow.sink("market_history")
    return flow


def cust(action: str, cid: int, ts: int, **values: Any) -> dict[str, Any]:
    return {"action": action, "customer_id": cid, "_ts": ts, **values}


def acct(action: str, aid: int, ts: int, **values: Any) -> dict[str, Any]:
    return {"action": action, "account_id": aid, "_ts": ts, **values}


def trade(
    action: str, tid: int, ts: int, account: int | None = None, trade_time: int | None = None
) -> dict[str, Any]:
    return {
        "action": action,
        "trade_id": tid,
        "account_id": account,
        "symbol": "ABC",
        "qty": 10,
        "trade_time": trade_time,
        "_ts": ts,
    }


@pytest.fixture(scope="module")
def run() -> Any:
    flow = broker_flow()
    batches = [
        make_batch(
            flow,
            1,
            customer_updates=[
                cust("NEW", 1, DAY, name="Ann", tier=1),
                cust("NEW", 2, DAY, name="Bob", tier=2),
            ],
            account_updates=[
                acct("NEW", 10, DAY + HOUR, customer_id=1),
                acct("NEW", 11, DAY + HOUR, customer_id=1),
                acct("NEW", 20, DAY + HOUR, customer_id=2),
            ],
            trade_events=[trade("NEW", 100, 2 * DAY, account=10, trade_time=2 * DAY)],
        ),
        make_batch(
            flow,
            2,
            customer_updates=[cust("UPD", 1, 3 * DAY, tier=3)],
            trade_events=[
                trade("NEW", 101, 4 * DAY, account=10, trade_time=4 * DAY),
                trade("NEW", 102, 5 * DAY, account=11, trade_time=2 * DAY),  # arrives late
                trade("DONE", 100, 5 * DAY),
            ],
        ),
        make_batch(
            flow,
            3,
            customer_updates=[
                cust("UPD", 2, 6 * DAY + 10 * HOUR, status="INACTIVE"),
                cust("UPD", 2, 6 * DAY + 15 * HOUR, name="Robert"),  # same day: consolidated
            ],
            trade_events=[
                trade("NEW", 103, 7 * DAY, account=99, trade_time=7 * DAY),  # unknown account
                trade("NEW", 104, 7 * DAY, account=10, trade_time=8 * DAY),  # from the future
            ],
        ),
    ]
    return run_in_memory(flow, batches)


def versions(run: Any, table: str) -> list[dict[str, Any]]:
    return [
        {k: v for k, v in r.items() if not k.startswith("_")}
        for r in run.final_state.tables[table].to_pylist()
    ]


def days(value: Any) -> int:
    return (value - value.__class__(1970, 1, 1)).days


def test_customer_versions(run: Any) -> None:
    rows = [
        (
            r["sk_customer_id"],
            r["customer_id"],
            r["name"],
            r["tier"],
            r["status"],
            days(r["effective_date"]),
            days(r["end_date"]),
            r["is_current"],
        )
        for r in versions(run, "customers")
    ]
    assert rows == [
        (1, 1, "Ann", 1, "ACTIVE", 1, 3, False),
        (2, 2, "Bob", 2, "ACTIVE", 1, 6, False),
        (3, 1, "Ann", 3, "ACTIVE", 3, END_OF_TIME_DATE, True),
        (4, 2, "Robert", 2, "INACTIVE", 6, END_OF_TIME_DATE, True),
    ]


def test_a_customer_change_reversions_its_accounts(run: Any) -> None:
    rows = [
        (
            r["sk_account_id"],
            r["account_id"],
            r["sk_customer_id"],
            r["status"],
            days(r["effective_date"]),
            r["is_current"],
        )
        for r in versions(run, "accounts")
    ]
    assert rows == [
        (1, 10, 1, "ACTIVE", 1, False),
        (2, 11, 1, "ACTIVE", 1, False),
        (3, 20, 2, "ACTIVE", 1, False),
        (4, 10, 3, "ACTIVE", 3, True),
        (5, 11, 3, "ACTIVE", 3, True),
        (6, 20, 4, "INACTIVE", 6, True),  # the inactive customer's account is inactive too
    ]
    changes = [
        (r["action"], r["customer_id"], r["sk"], r["accounts_reversioned"])
        for r in run.sink.rows("customer_changes")
    ]
    assert changes == [
        ("NEW", 1, 1, None),
        ("NEW", 2, 2, None),
        ("UPD", 1, 3, 2),
        ("UPD", 2, 4, 1),
        ("UPD", 2, 4, 1),
    ]


def test_surrogate_keys_as_of_the_trade_time(run: Any) -> None:
    trades = {
        r["trade_id"]: (r["sk_account_id"], r["sk_customer_id"], r["status"])
        for r in versions(run, "trades")
    }
    assert trades == {
        100: (1, 1, "DONE"),
        101: (4, 3, "PENDING"),  # after the customer change
        102: (2, 1, "PENDING"),  # late trade: the versions current on day 2
    }
    aborts = [(a["step"], a["kind"], a["reason"]) for a in run.sink.abort_rows()]
    assert aborts == [
        ("trades_step", "condition", "op0 read accounts: no row for key [99]"),
        ("trades_step", "condition", f"op0 read accounts: as_of {8 * DAY} is after the event time"),
    ]


def test_deltas_of_the_cascading_batch(run: Any) -> None:
    second = run.results[1]
    customers = [
        (r["sk_customer_id"], r["is_current"])
        for r in second.deltas["customers"].upserts.to_pylist()
    ]
    accounts = [
        (r["sk_account_id"], r["is_current"]) for r in second.deltas["accounts"].upserts.to_pylist()
    ]
    assert customers == [(1, False), (3, True)]
    assert accounts == [(1, False), (2, False), (4, True), (5, True)]
    assert second.sequences["accounts"] == 6


def test_fifty_two_week_window() -> None:
    flow = broker_flow()
    market = [
        {"symbol": "ABC", "high": 10.0, "low": 8.0, "_ts": 1 * DAY},
        {"symbol": "XYZ", "high": 5.0, "low": 1.0, "_ts": 1 * DAY},
        {"symbol": "XYZ", "high": 5.0, "low": 2.0, "_ts": 2 * DAY},  # tie: the earliest day counts
        {"symbol": "ABC", "high": 12.0, "low": 9.0, "_ts": 100 * DAY},
        {"symbol": "ABC", "high": 11.0, "low": 10.5, "_ts": 400 * DAY},  # day 1 has left the window
        {"symbol": "ABC", "high": 9.0, "low": 7.0, "_ts": 500 * DAY},  # day 100 has left too
    ]
    late = [{"symbol": "ABC", "high": 99.0, "low": 0.0, "_ts": 450 * DAY}]
    run = run_in_memory(
        flow, [make_batch(flow, 1, market=market), make_batch(flow, 2, market=late)]
    )
    history = [
        (r["symbol"], r["high52"], r["high52_day"], r["low52"], r["low52_day"])
        for r in run.sink.rows("market_history")
    ]
    assert history == [
        ("ABC", 10.0, 1, 8.0, 1),
        ("XYZ", 5.0, 1, 1.0, 1),
        ("XYZ", 5.0, 1, 1.0, 1),
        ("ABC", 12.0, 100, 8.0, 1),
        ("ABC", 12.0, 100, 9.0, 100),
        ("ABC", 11.0, 400, 7.0, 500),
    ]
    assert [a["reason"] for a in run.sink.abort_rows()] == [
        f"op0 window highs: window entry at {450 * DAY} is older than the key's latest ({500 * DAY})"
    ]
    entries = run.final_state.tables["highs"].to_pylist()
    assert sorted((e["symbol"], e["_at"] // DAY) for e in entries) == [
        ("ABC", 400),
        ("ABC", 500),
        ("XYZ", 1),
        ("XYZ", 2),
    ]
