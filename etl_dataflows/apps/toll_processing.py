"""Toll Processing (TP, Linear-Road-like): position reports update a segment's average speed and
its count of distinct vehicles; the toll follows from both.

State: ``speeds`` (segment -> average speed), ``counts`` (segment -> distinct vehicles) and
``vehicles`` (segment * 2**32 + vehicle -> seen). A report is a transaction of three operations: the
running average ``(old + speed) / 2`` (a speed of 200 or more is impossible: the report aborts),
recording the vehicle, and counting it if it is new. Output: the toll, ``2 * (count - 50)**2`` when
the average is below 40 and more than 50 vehicles were seen, else 0.
"""

from __future__ import annotations

import numpy as np

from etl_dataflows.apps.common import App, AppKnobs, ZipfKeys, event_table, timestamps
from etl_dataflows.batch import EngineBatch
from etl_dataflows.dataflow import Dataflow
from etl_dataflows.expressions import Expr, col, cost, if_else, old
from etl_dataflows.state import StateImage


def dataflow(knobs: AppKnobs) -> Dataflow:
    flow = Dataflow("toll_processing")
    speeds = flow.table("speeds", key={"segment": "int64"}, columns={"average": "float64"})
    counts = flow.table(
        "counts", key={"segment": "int64"}, columns={"vehicles": "int64"}, defaults={"vehicles": 0}
    )
    seen = flow.table("vehicles", key={"id": "int64"}, columns={"first_seen": "int64"})
    flow.source("reports", schema={"segment": "int64", "vehicle": "int64", "speed": "float64"})

    def paid(expr: Expr) -> Expr:
        return cost(expr, knobs.udf_cost_ns) if knobs.udf_cost_ns else expr

    t = flow.transact("toll")
    speed = t.update(
        speeds,
        "segment",
        set={
            "average": paid(
                if_else(old("average").is_null(), col("speed"), (old("average") + col("speed")) / 2)
            )
        },
        require=(col("speed") < 200.0, "impossible speed"),
        if_missing="insert",
    )
    vehicle = t.insert(
        seen,
        col("segment") * 4_294_967_296 + col("vehicle"),
        {"first_seen": col("_ts")},
        if_exists="skip",
    )
    count = t.update(
        counts,
        "segment",
        set={"vehicles": paid(old("vehicles") + if_else(vehicle.found, 0, 1))},
        if_missing="insert",
    )
    crowded = (speed["average"] < 40.0) & (count["vehicles"] > 50)
    t.emit(
        average=speed["average"],
        vehicles=count["vehicles"],
        toll=if_else(crowded, 2 * (count["vehicles"] - 50) * (count["vehicles"] - 50), 0),
    )
    flow.sink("tolls")
    return flow


def initial_state(knobs: AppKnobs) -> StateImage:
    return StateImage.empty(dataflow(knobs).build().tables)


def batches(knobs: AppKnobs) -> list[EngineBatch]:
    if knobs.key_layout != "sequential":
        raise ValueError("tp keys vehicles by segment * 2**32 + vehicle: key_layout sequential")
    rng = np.random.default_rng(knobs.seed)
    segments = ZipfKeys(knobs.keys, knobs.theta, rng)
    vehicles = int(knobs.knob("vehicles", 0)) or 100 * knobs.keys
    out = []
    for b in range(knobs.batches):
        n = knobs.batch_size
        speed = rng.uniform(5.0, 120.0, n)
        speed = np.where(rng.random(n) < knobs.abort_ratio, 250.0, speed)
        columns = {
            "segment": segments.draw(n),
            "vehicle": rng.integers(0, vehicles, n).astype(np.int64),
            "speed": speed,
        }
        ts, pos = timestamps(b, n)
        out.append(EngineBatch(b + 1, {"reports": event_table(columns, ts, pos)}))
    return out


def operations(batch: EngineBatch) -> int:
    return 3 * batch.num_events


APP = App(
    name="tp",
    title="Toll Processing",
    dataflow=dataflow,
    initial_state=initial_state,
    batches=batches,
    operations=operations,
    defaults={"vehicles": 0},
)
