"""Run specs for the reprocess tests: the *tally* dataflow reading the CSV file named by
``STREAMDI_TEST_TALLY_FILE`` (``key,amount,ts``) through topic ``STREAMDI_TEST_TALLY_TOPIC``. Version 1 adds each event's amount to its key's
total; version 2 changes only the step's logic (it adds twice the amount), an in-place upgrade that
keeps the rows version 1 computed until they are reprocessed."""

from __future__ import annotations

import os

from etl_dataflows import Dataflow, col, old
from etl_dataflows.dataflow import CompiledDataflow
from ingest.sources import CsvFileSource
from runtime import RunSpec, StreamBinding, bind


def tally(version: int) -> CompiledDataflow:
    """Version 3 adds a table ``spread`` keyed by the parity of the key (a table under a new
    name: the way out of a key change), empty until it is reprocessed."""
    flow = Dataflow("tally")
    totals = flow.table(
        "totals",
        key={"key": "int64"},
        columns={"total": "int64", "n": "int64"},
        defaults={"total": 0, "n": 0},
    )
    flow.source("events", schema={"key": "int64", "amount": "int64", "ts": "int64"})
    step = flow.transact("tally")
    step.update(
        totals,
        "key",
        set={"total": old("total") + col("amount") * min(version, 2), "n": old("n") + 1},
        if_missing="insert",
    )
    if version >= 3:
        spread = flow.table(
            "spread", key={"parity": "int64"}, columns={"n": "int64"}, defaults={"n": 0}
        )
        step.update(spread, col("key") % 2, set={"n": old("n") + 1}, if_missing="insert")
    step.emit(key=col("key"), amount=col("amount") * min(version, 2))
    flow.sink("tallied")
    return flow.build()


def _spec(version: int) -> RunSpec:
    source = CsvFileSource(
        os.environ["STREAMDI_TEST_TALLY_FILE"],
        {"key": "int64", "amount": "int64", "ts": "int64"},
        timestamp="ts",
    )
    # each test its own topic (STREAMDI_TEST_TALLY_TOPIC): tests share the module's broker
    topic = os.environ.get("STREAMDI_TEST_TALLY_TOPIC", "tally.events")
    return bind(tally(version), events=StreamBinding(topic=topic, input=source))


def v1() -> RunSpec:
    return _spec(1)


def v2() -> RunSpec:
    return _spec(2)


def v3() -> RunSpec:
    return _spec(3)
