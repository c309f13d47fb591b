"""Online Bidding (OB): bids buy goods, alerts reprice them, top-ups restock them.

State: ``goods`` (item -> price, quantity), every item starting at price 100 and 10,000 in stock.
A *buy* takes ``quantity`` if the bid is at least the price and enough is left (else the bid
aborts); an *alert* sets a new price; a *top-up* adds stock. Mix (extra knobs): ``buy_ratio`` 0.6,
``alert_ratio`` 0.2, the rest top-ups. Aborting bids ask for more than any stock.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from etl_dataflows.apps.common import (
    App,
    AppKnobs,
    ZipfKeys,
    event_table,
    key_values,
    timestamps,
)
from etl_dataflows.batch import EngineBatch
from etl_dataflows.dataflow import Dataflow
from etl_dataflows.expressions import Expr, col, cost, old
from etl_dataflows.state import StateImage, rows_to_table


def dataflow(knobs: AppKnobs) -> Dataflow:
    flow = Dataflow("online_bidding")
    goods = flow.table(
        "goods", key={"item": "int64"}, columns={"price": "int64", "quantity": "int64"}
    )
    flow.source(
        "events", schema={"kind": "string", "item": "int64", "price": "int64", "quantity": "int64"}
    )

    def paid(expr: Expr) -> Expr:
        return cost(expr, knobs.udf_cost_ns) if knobs.udf_cost_ns else expr

    kind = col("kind")
    t = flow.transact("bidding")
    buy = t.update(
        goods,
        "item",
        set={"quantity": paid(old("quantity") - col("quantity"))},
        require=[
            (col("price") >= old("price"), "bid below the asking price"),
            (old("quantity") >= col("quantity"), "not enough left"),
        ],
        when=kind == "buy",
    )
    t.update(
        goods, "item", set={"price": paid(col("price") + 0 * old("price"))}, when=kind == "alert"
    )
    top = t.update(
        goods, "item", set={"quantity": paid(old("quantity") + col("quantity"))}, when=kind == "top"
    )
    from etl_dataflows.expressions import coalesce

    t.emit(kind=kind, quantity_left=coalesce(buy["quantity"], top["quantity"]))
    flow.sink("bids")
    return flow


def initial_state(knobs: AppKnobs) -> StateImage:
    table = dataflow(knobs).build().tables["goods"]
    data = pa.table(
        {
            "item": key_values(knobs.keys, knobs.key_layout),
            "price": np.full(knobs.keys, 100, dtype=np.int64),
            "quantity": np.full(knobs.keys, 10_000, dtype=np.int64),
        }
    )
    return StateImage({"goods": data.cast(rows_to_table(table, []).schema)}, {"goods": 1})


def batches(knobs: AppKnobs) -> list[EngineBatch]:
    rng = np.random.default_rng(knobs.seed)
    items = ZipfKeys(knobs.keys, knobs.theta, rng, knobs.key_layout)
    buy, alert = knobs.knob("buy_ratio", 0.6), knobs.knob("alert_ratio", 0.2)
    out = []
    for b in range(knobs.batches):
        n = knobs.batch_size
        r = rng.random(n)
        kind = np.where(r < buy, "buy", np.where(r < buy + alert, "alert", "top")).astype(object)
        price = rng.integers(90, 130, n)
        quantity = rng.integers(1, 20, n)
        quantity = np.where((kind == "buy") & (rng.random(n) < knobs.abort_ratio), 10**9, quantity)
        ts, pos = timestamps(b, n)
        columns = {
            "kind": pa.array(kind, type=pa.string()),
            "item": items.draw(n),
            "price": price.astype(np.int64),
            "quantity": quantity.astype(np.int64),
        }
        out.append(EngineBatch(b + 1, {"events": event_table(columns, ts, pos)}))
    return out


def operations(batch: EngineBatch) -> int:
    return batch.num_events


APP = App(
    name="ob",
    title="Online Bidding",
    dataflow=dataflow,
    initial_state=initial_state,
    batches=batches,
    operations=operations,
    defaults={"buy_ratio": 0.6, "alert_ratio": 0.2},
)
