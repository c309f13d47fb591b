"""Dataflows for the query-service tests and benchmarks' tests.

``kv`` (the stack's own dataflow, :func:`runtime.stack.kv_dataflow`): events ``put``/``del`` of a
key with a value and a sequence number; the state table ``kv`` (one row per key: its value and
the sequence number that wrote it) and the sink ``log`` (one row per committed event). Ground
truth at any point is a replay of the events in order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from runtime import RunSpec, bind
from runtime.stack import kv_dataflow

__all__ = ["kv_dataflow", "kv_truth", "run"]


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
