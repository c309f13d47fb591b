"""Grep&Sum (GS): each operation of a transaction replaces a target record by the mean of several
records (the target and ``num_access - 1`` others, read as of the transaction's time).

State: ``micro`` (``id -> value``), values starting at 1,000. A transaction has ``txn_length``
operations (extra knob, default 1); a share ``multi_access_ratio`` (default 1.0) of transactions
read ``num_access`` records per operation (default 2), the others only increment their targets.
Aborting events are flagged by the generator and fail their condition (MorphStream's
``SUM(-1)``).
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
from etl_dataflows.expressions import Expr, coalesce, col, cost, if_else, old
from etl_dataflows.state import StateImage, rows_to_table


def _shape(knobs: AppKnobs) -> tuple[int, int]:
    return int(knobs.knob("txn_length", 1)), int(knobs.knob("num_access", 2))


def dataflow(knobs: AppKnobs) -> Dataflow:
    length, access = _shape(knobs)
    flow = Dataflow("grep_sum")
    micro = flow.table("micro", key={"id": "int64"}, columns={"value": "int64"})
    schema = {"multi": "bool", "ok": "bool"}
    schema.update({f"k{m}_{a}": "int64" for m in range(length) for a in range(access)})
    flow.source("events", schema=schema)
    t = flow.transact("grep_sum")
    targets = []
    for m in range(length):
        reads = [t.read(micro, f"k{m}_{a}", when=col("multi")) for a in range(1, access)]
        total: Expr = old("value")
        for r in reads:
            total = total + coalesce(r["value"], 0)
        value = if_else(col("multi"), total // access, old("value") + 1)
        if knobs.udf_cost_ns:
            value = cost(value, knobs.udf_cost_ns)
        targets.append(
            t.update(micro, f"k{m}_0", set={"value": value}, require=(col("ok"), "aborting event"))
        )
    t.emit(first=targets[0]["value"], last=targets[-1]["value"])
    flow.sink("sums")
    return flow


def initial_state(knobs: AppKnobs) -> StateImage:
    table = dataflow(knobs).build().tables["micro"]
    data = pa.table(
        {
            "id": key_values(knobs.keys, knobs.key_layout),
            "value": np.full(knobs.keys, 1_000, dtype=np.int64),
        }
    )
    return StateImage({"micro": data.cast(rows_to_table(table, []).schema)}, {"micro": 1})


def batches(knobs: AppKnobs) -> list[EngineBatch]:
    length, access = _shape(knobs)
    rng = np.random.default_rng(knobs.seed)
    keys = ZipfKeys(knobs.keys, knobs.theta, rng, knobs.key_layout)
    multi_ratio = knobs.knob("multi_access_ratio", 1.0)
    out = []
    for b in range(knobs.batches):
        n = knobs.batch_size
        columns: dict[str, np.ndarray] = {
            "multi": rng.random(n) < multi_ratio,
            "ok": rng.random(n) >= knobs.abort_ratio,
        }
        for m in range(length):
            for a in range(access):
                columns[f"k{m}_{a}"] = keys.draw(n)
        ts, pos = timestamps(b, n)
        out.append(EngineBatch(b + 1, {"events": event_table(columns, ts, pos)}))
    return out


def operations(batch: EngineBatch) -> int:
    events = batch.inputs["events"]
    access = sum(1 for name in events.column_names if name.startswith("k0_"))
    length = sum(1 for name in events.column_names if name.endswith("_0"))
    multi = int(np.count_nonzero(events.column("multi").to_numpy(zero_copy_only=False)))
    return int(length * (multi * access + (events.num_rows - multi)))


APP = App(
    name="gs",
    title="Grep&Sum",
    dataflow=dataflow,
    initial_state=initial_state,
    batches=batches,
    operations=operations,
    defaults={"txn_length": 1, "num_access": 2, "multi_access_ratio": 1.0},
)
