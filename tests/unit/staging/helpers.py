"""What several staging tests build: a batch's commit with made-up progress, a dataflow with a
history table, and the ledger workload run by the serial oracle."""

from __future__ import annotations

import time

from etl_dataflows import Dataflow, col, create_executor
from etl_dataflows.batch import BatchResult
from etl_dataflows.dataflow import CompiledDataflow
from etl_dataflows.state import StateImage
from etl_dataflows.testing import WorkloadSpec, ledger_workload
from staging import BatchCommit, StreamProgress
from staging.layout import DEAD_LETTER_INPUT_SCHEMA


def simple_commit(batch_id: int, result: BatchResult) -> BatchCommit:
    """``result`` as batch ``batch_id`` of stream ``txns`` (offset and positions = the id), no
    dead letters."""
    return BatchCommit(
        batch_id=batch_id,
        result=result,
        dead_letters=DEAD_LETTER_INPUT_SCHEMA.empty_table(),
        offsets={("t.txns", 0): batch_id},
        streams={"txns": StreamProgress(batch_id, batch_id * 100, batch_id, batch_id)},
        events=10,
        records=1,
        arrived_at=time.time(),
        executed_ms=1.0,
    )


def oracle_run(
    batches: int, seed: int
) -> tuple[CompiledDataflow, list[BatchResult], list[StateImage]]:
    """The ledger workload (opens, closes: inserts and deletes; 30 keys, 120 events a batch) run
    by the serial oracle: its dataflow, each batch's result and the engine's state after it."""
    work = ledger_workload(
        WorkloadSpec(keys=30, batch_size=120, batches=batches, insert_delete_ratio=0.2, seed=seed)
    )
    executor = create_executor("serial", work.flow)
    results, images = [], []
    for batch in work.batches:
        results.append(executor.run_batch(batch))
        images.append(executor.state_image())
    return work.flow, results, images


def customers_flow() -> Dataflow:
    """One history table ``customer`` (key ``id``, column ``tier``) written by every event of
    source ``changes``."""
    flow = Dataflow("customers")
    customers = flow.history_table("customer", key={"id": "int64"}, columns={"tier": "int64"})
    flow.source("changes", schema={"id": "int64", "tier": "int64"})
    t = flow.transact("apply")
    t.write(customers, "id", {"tier": col("tier")})
    flow.sink("out")
    return flow
