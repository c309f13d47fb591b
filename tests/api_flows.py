"""Dataflows for the query-service tests and benchmarks' tests.

``kv``: events ``put``/``del`` of a key with a value and a sequence number; the state table
``kv`` (one row per key: its value and the sequence number that wrote it) and the sink ``log``
(one row per committed event). Ground truth at any point is a replay of the events in order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from etl_dataflows import Dataflow, col
from runtime import RunSpec, bind


def kv_dataflow() -> Dataflow:
    flow = Dataflow("kv")
    kv = flow.table("kv", key={"key": "int64"}, columns={"value": "int64", "seq": "int64"})
    flow.source("puts", schema={"op": "string", "key": "int64", "value": "int64", "seq": "int64"})
    t = flow.transact("apply", input="puts")
    t.write(kv, "key", {"value": col("value"), "seq": col("seq")}, when=col("op") == "put")
    t.delete(kv, "key", if_missing="skip", when=col("op") == "del")
    t.emit(op=col("op"), key=col("key"), seq=col("seq"))
    flow.sink("log", input="apply")
    return flow


def run() -> RunSpec:
    """The kv dataflow bound to nothing: ``streamdi serve`` feeds ``puts`` over HTTP."""
    return bind(kv_dataflow())


def kv_truth(events: Iterable[Mapping[str, Any]]) -> dict[int, tuple[int, int]]:
    """The ``kv`` table after ``events`` in order: key -> (value, seq)."""
    state: dict[int, tuple[int, int]] = {}
    for e in events:
        if e["op"] == "put":
            state[int(e["key"])] = (int(e["value"]), int(e["seq"]))
        else:
            state.pop(int(e["key"]), None)
    return state
