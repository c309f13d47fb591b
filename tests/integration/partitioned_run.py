"""The run spec of the several-partitions integration test: the ledger dataflow reading the
pipe-delimited file named by ``STREAMDI_TEST_LEDGER_FILE``, its topic ``ledger.txns`` created with
``STREAMDI_TEST_PARTITIONS`` partitions (default 4)."""

from __future__ import annotations

import os
from pathlib import Path

from etl_dataflows.testing import ledger_dataflow
from ingest.ledger import ledger_file_source
from runtime import RunSpec, StreamBinding, bind


def run() -> RunSpec:
    source = ledger_file_source(Path(os.environ["STREAMDI_TEST_LEDGER_FILE"]))
    partitions = int(os.environ.get("STREAMDI_TEST_PARTITIONS", "4"))
    return bind(ledger_dataflow(), txns=StreamBinding(input=source, partitions=partitions))
