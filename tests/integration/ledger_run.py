"""Run specs for the ingest integration tests: the ledger dataflow reading the pipe-delimited file
named by ``STREAMDI_TEST_LEDGER_FILE`` (written by the test), and the same dataflow reading only its
topic (for outside producers)."""

from __future__ import annotations

import os
from pathlib import Path

from etl_dataflows.testing import ledger_dataflow
from ingest.ledger import ledger_file_source
from runtime import RunSpec, StreamBinding, bind


def run() -> RunSpec:
    return bind(
        ledger_dataflow(), txns=ledger_file_source(Path(os.environ["STREAMDI_TEST_LEDGER_FILE"]))
    )


def topic_only() -> RunSpec:
    return bind(ledger_dataflow())


def run_on_topic() -> RunSpec:
    """:func:`run` into the topic ``STREAMDI_TEST_TOPIC`` (tests that share a broker)."""
    return bind(
        ledger_dataflow(),
        txns=StreamBinding(
            topic=os.environ["STREAMDI_TEST_TOPIC"],
            input=ledger_file_source(Path(os.environ["STREAMDI_TEST_LEDGER_FILE"])),
        ),
    )
