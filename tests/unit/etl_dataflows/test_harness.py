"""The harness that compares executors must catch an executor that is wrong."""

from __future__ import annotations

from typing import ClassVar

import pyarrow as pa
import pytest

from etl_dataflows.exceptions import UnknownExecutor
from etl_dataflows.executors import SerialExecutor, create_executor, register_executor
from etl_dataflows.executors.base import TransactionOutcome
from etl_dataflows.stateless import DeadLetters
from etl_dataflows.testing import WorkloadSpec, assert_same_results, ledger_workload, run_in_memory
from etl_dataflows.transaction import TransactionStep


class ArrivalOrderExecutor(SerialExecutor):
    """Deliberately wrong: runs transactions in arrival order, ignoring event time."""

    name: ClassVar[str] = "test-arrival-order"

    def run_transactions(
        self, step: TransactionStep, events: pa.Table, dead: DeadLetters, early: object = None
    ) -> TransactionOutcome:
        ts = pa.array(range(events.num_rows), type=pa.int64())
        return super().run_transactions(
            step, events.set_column(events.schema.get_field_index("_ts"), "_ts", ts), dead
        )


class ForgetfulExecutor(SerialExecutor):
    """Deliberately wrong: loses the sequence values across batches."""

    name: ClassVar[str] = "test-forgetful"

    def end_batch(self):  # type: ignore[no-untyped-def]
        deltas, sequences = super().end_batch()
        return deltas, {name: 1 for name in sequences}


register_executor(ArrivalOrderExecutor)
register_executor(ForgetfulExecutor)


@pytest.mark.parametrize("broken", ["test-arrival-order", "test-forgetful"])
def test_a_wrong_executor_is_detected(broken: str) -> None:
    workload = ledger_workload(
        WorkloadSpec(
            keys=20, batch_size=300, batches=2, disorder=0.5, insert_delete_ratio=0.2, seed=3
        )
    )
    oracle = run_in_memory(workload.flow, workload.batches, state=workload.state)
    wrong = run_in_memory(workload.flow, workload.batches, executor=broken, state=workload.state)
    with pytest.raises(AssertionError, match=f"{broken} vs serial"):
        assert_same_results(oracle, wrong)


def test_unknown_executor() -> None:
    workload = ledger_workload(WorkloadSpec(batch_size=1, batches=1))
    with pytest.raises(UnknownExecutor, match="no executor named 'warp'; available: serial"):
        create_executor("warp", workload.flow)
