"""The dataflow the docker-compose stack serves unless told otherwise (``STREAMDI_SPEC``).

``kv``: events ``put``/``del`` of a key with a value and a sequence number, pushed over HTTP to
``POST /streams/puts/events``; the state table ``kv`` (one row per key: its latest value and the
sequence number that wrote it) and the sink ``log`` (one row per committed event). Small on
purpose: it shows the whole path (push, Kafka, engine, staging, migration, union queries) on a
fresh stack without any data set. The TPC-DI job is the compose ``tpcdi`` service.
"""

from __future__ import annotations

from etl_dataflows import Dataflow, col
from runtime import RunSpec, bind


def kv_dataflow() -> Dataflow:
    """The ``kv`` dataflow (see the module docstring)."""
    flow = Dataflow("kv")
    kv = flow.table("kv", key={"key": "int64"}, columns={"value": "int64", "seq": "int64"})
    flow.source("puts", schema={"op": "string", "key": "int64", "value": "int64", "seq": "int64"})
    apply = flow.transact("apply", input="puts")
    apply.write(kv, "key", {"value": col("value"), "seq": col("seq")}, when=col("op") == "put")
    apply.delete(kv, "key", if_missing="skip", when=col("op") == "del")
    apply.emit(op=col("op"), key=col("key"), seq=col("seq"))
    flow.sink("log", input="apply")
    return flow


def kv() -> RunSpec:
    """``kv`` with no input bound: ``streamdi serve`` feeds ``puts`` from HTTP pushes."""
    return bind(kv_dataflow())
