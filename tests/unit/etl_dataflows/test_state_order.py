"""An executor loads a state image in any row order and behaves the same (a resuming pipeline
reads staging's state unsorted: ``StagingStore.load_state(sorted_rows=False)``)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from etl_dataflows import EXECUTORS, Dataflow, col
from etl_dataflows.batch import EngineBatch
from etl_dataflows.state import StateImage
from etl_dataflows.testing import (
    WorkloadSpec,
    assert_same_results,
    ledger_workload,
    make_batch,
    run_in_memory,
)

from .test_tpcdi_patterns import DAY, HOUR, acct, broker_flow, cust, trade


def shuffled(image: StateImage, seed: int) -> StateImage:
    """``image`` with every table's rows in a seeded random order."""
    rng = np.random.default_rng(seed)
    tables = {
        name: table.take(pa.array(rng.permutation(table.num_rows)))
        for name, table in image.tables.items()
    }
    return StateImage(tables, dict(image.sequences))


def broker_batches(flow: Dataflow) -> list[EngineBatch]:
    """History tables (customers, accounts), a trade table and a 52-week window, over 4 batches."""
    market = [
        {"symbol": s, "high": 10.0 + d % 7, "low": 1.0 + d % 5, "_ts": d * DAY}
        for d in range(1, 30)
        for s in ("ABC", "XYZ", "QRS")
    ]
    return [
        make_batch(
            flow,
            1,
            customer_updates=[cust("NEW", c, DAY, name=f"c{c}", tier=c % 3) for c in range(1, 30)],
            account_updates=[
                acct("NEW", 100 + a, DAY + HOUR, customer_id=1 + a % 29) for a in range(60)
            ],
            market=market,
        ),
        make_batch(
            flow,
            2,
            customer_updates=[cust("UPD", c, 3 * DAY, tier=3) for c in range(5, 25, 2)],
            trade_events=[
                trade("NEW", 1000 + t, 4 * DAY, account=100 + t % 60, trade_time=4 * DAY)
                for t in range(40)
            ],
        ),
        make_batch(
            flow,
            3,
            customer_updates=[cust("UPD", c, 6 * DAY, status="INACTIVE") for c in range(1, 9)],
            trade_events=[trade("DONE", 1000 + t, 6 * DAY) for t in range(0, 40, 3)],
            market=[
                {"symbol": "ABC", "high": 99.0, "low": 0.5, "_ts": 40 * DAY},
                {
                    "symbol": "QRS",
                    "high": 98.0,
                    "low": 0.4,
                    "_ts": 20 * DAY,
                },  # older than its latest
            ],
        ),
        make_batch(
            flow,
            4,
            account_updates=[acct("UPD", 100 + a, 8 * DAY, customer_id=2) for a in range(0, 60, 4)],
            trade_events=[  # as of their trade time: some before the accounts' later versions
                trade("NEW", 2000 + t, 9 * DAY, account=100 + t % 60, trade_time=(2 + t % 8) * DAY)
                for t in range(30)
            ],
            market=[{"symbol": "XYZ", "high": 50.0, "low": 0.1, "_ts": 41 * DAY}],
        ),
    ]


def window_flow() -> Dataflow:
    """A window whose aggregates depend on its entries' order (first, last)."""
    flow = Dataflow("ordered_window")
    readings = flow.window_table(
        "readings",
        key={"sensor": "int64"},
        columns={"v": "int64"},
        span=50 * HOUR,
        aggregates={"first": ("first", "v"), "last": ("last", "v"), "n": ("count", "v")},
    )
    flow.source("ticks", schema={"sensor": "int64", "v": "int64"})
    step = flow.transact("tick", input="ticks")
    w = step.window(readings, "sensor", {"v": col("v")})
    step.emit(sensor=col("sensor"), first=w["first"], last=w["last"], n=w["n"])
    flow.sink("summaries")
    return flow


def window_batches(flow: Dataflow) -> list[EngineBatch]:
    """Four batches of readings of 5 sensors, an hour apart, values unrelated to time."""
    return [
        make_batch(
            flow,
            b + 1,
            ticks=[
                {"sensor": i % 5, "v": (i * 7919) % 101, "_ts": (b * 20 + i // 5) * HOUR}
                for i in range(100)
            ],
        )
        for b in range(4)
    ]


def check_any_order(
    flow: Dataflow, state: StateImage | None, batches: list[EngineBatch], executor: str
) -> None:
    """Run the first half of ``batches`` serially, then the rest on ``executor`` from that state,
    sorted and shuffled: the same results and final state."""
    half = len(batches) // 2
    start = run_in_memory(flow, batches[:half], state=state).final_state
    assert any(t.num_rows > 1 for t in start.tables.values())
    rest = batches[half:]
    expected = run_in_memory(flow, rest, executor=executor, state=start)
    for seed in (1, 2):
        actual = run_in_memory(flow, rest, executor=executor, state=shuffled(start, seed))
        assert_same_results(expected, actual)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_history_window_and_trade_state_in_any_row_order(executor: str) -> None:
    flow = broker_flow()
    check_any_order(flow, None, broker_batches(flow), executor)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_window_entries_in_any_row_order(executor: str) -> None:
    flow = window_flow()
    check_any_order(flow, None, window_batches(flow), executor)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_ledger_state_in_any_row_order(executor: str) -> None:
    workload = ledger_workload(
        WorkloadSpec(keys=300, insert_delete_ratio=0.1, batch_size=400, batches=4, seed=11)
    )
    check_any_order(workload.flow, workload.state, workload.batches, executor)
