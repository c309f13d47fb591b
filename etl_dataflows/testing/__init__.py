"""The in-memory harness (a testing source and sink, an in-memory run) and the workload generator
used by the engine's tests and by every later executor's property tests."""

from etl_dataflows.testing.harness import (
    RunResult,
    TestingSink,
    assert_same_results,
    make_batch,
    run_in_memory,
)
from etl_dataflows.testing.workload import WorkloadSpec, ledger_dataflow, ledger_workload

__all__ = [
    "RunResult",
    "TestingSink",
    "WorkloadSpec",
    "assert_same_results",
    "ledger_dataflow",
    "ledger_workload",
    "make_batch",
    "run_in_memory",
]
