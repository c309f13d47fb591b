"""An array table loaded from a state image grows by a quarter when a batch brings new keys, not
by double (memory at scale, issue 22: doubling TPC-DI's 18 M open watches at SF 100 added
1.35 GB the updates never filled), and keeps every row through the growth."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from etl_dataflows import Dataflow
from etl_dataflows.executors.local.arrays import GROWTH_DIVISOR, ArrayTable


def test_a_loaded_table_grows_by_a_quarter_and_keeps_its_rows() -> None:
    flow = Dataflow("t")
    table = flow.table(
        "watches", key={"customer": "int64", "symbol": "string"}, columns={"n": "int64"}
    )
    arrays = ArrayTable(table)
    n = 40_000
    symbols = [f"S{i % 97}" for i in range(n)]
    arrays.load(pa.table({"customer": range(n), "symbol": symbols, "n": range(n)}))
    loaded = arrays.capacity
    assert loaded == n  # an image loads without slack
    slots = arrays.slots([np.array([n], dtype=np.int64), pa.array(["NEW"])], np.ones(1, dtype=bool))
    arrays.exists[slots] = True
    arrays.values["n"][slots] = -1
    arrays.valid["n"][slots] = True
    assert arrays.capacity == loaded + loaded // GROWTH_DIVISOR == 50_000
    assert all(len(v) == arrays.capacity for v in (*arrays.values.values(), *arrays.valid.values()))
    image = arrays.image().sort_by("customer")
    assert image.num_rows == n + 1
    assert image.column("n").to_pylist() == [*range(n), -1]
    assert image.column("symbol").to_pylist() == [*symbols, "NEW"]
