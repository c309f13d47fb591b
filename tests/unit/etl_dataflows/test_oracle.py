"""The serial executor against an independent model, and every executor against the serial one."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from etl_dataflows import EXECUTORS
from etl_dataflows.testing import (
    RunResult,
    WorkloadSpec,
    assert_same_results,
    ledger_workload,
    run_in_memory,
)
from etl_dataflows.testing.workload import LedgerWorkload

from .ledger_reference import run_reference

specs = st.builds(
    WorkloadSpec,
    keys=st.integers(2, 200),
    theta=st.floats(0.0, 0.99),
    cross_key_ratio=st.floats(0.0, 1.0),
    abort_ratio=st.floats(0.0, 0.9),
    cycle_ratio=st.floats(0.0, 1.0),
    same_key_ratio=st.floats(0.0, 0.3),
    insert_delete_ratio=st.floats(0.0, 0.2),
    read_ratio=st.floats(0.0, 0.1),
    error_ratio=st.floats(0.0, 0.1),
    disorder=st.floats(0.0, 1.0),
    ties=st.floats(0.0, 0.5),
    batch_size=st.integers(1, 300),
    batches=st.integers(1, 4),
    initial_balance=st.integers(0, 500),
    seed=st.integers(0, 2**31),
)


def check_against_reference(spec: WorkloadSpec) -> None:
    workload = ledger_workload(spec)
    check_run_against_reference(
        workload, run_in_memory(workload.flow, workload.batches, state=workload.state)
    )


def check_run_against_reference(workload: LedgerWorkload, run: RunResult) -> None:
    """``run``, the serial executor's run of ``workload``, equals the independent model's."""
    expected = run_reference(
        workload.state.tables["accounts"],
        workload.state.tables["book"],
        workload.state.sequences["accounts"],
        [b.inputs["txns"] for b in workload.batches],
    )
    assert run.sink.rows("balances") == expected.outputs
    assert [(r["pos"], r["kind"]) for r in run.sink.abort_rows()] == expected.aborts
    final = run.final_state
    accounts = {r["id"]: (r["sk"], r["balance"]) for r in final.tables["accounts"].to_pylist()}
    assert accounts == expected.accounts
    assert {r["id"]: r["balance"] for r in final.tables["book"].to_pylist()} == expected.book
    assert final.sequences["accounts"] == expected.next_sk
    errors = {pos for pos, kind in expected.aborts if kind == "error"}
    assert {r["pos"] for r in run.sink.dead_letter_rows()} == errors


@settings(max_examples=60)
@given(specs)
def test_serial_matches_the_independent_model(spec: WorkloadSpec) -> None:
    check_against_reference(spec)


@pytest.mark.parametrize(
    "spec",
    [
        WorkloadSpec(keys=10, theta=0.99, cross_key_ratio=1.0, batch_size=500, batches=2, seed=1),
        WorkloadSpec(keys=1_000, theta=0.0, abort_ratio=0.9, batch_size=400, batches=2, seed=2),
        WorkloadSpec(keys=50, cycle_ratio=1.0, cross_key_ratio=1.0, batch_size=300, seed=3),
        WorkloadSpec(keys=20, same_key_ratio=0.3, insert_delete_ratio=0.2, batch_size=300, seed=4),
        WorkloadSpec(keys=100, error_ratio=0.1, disorder=1.0, ties=0.5, batch_size=300, seed=5),
        WorkloadSpec(keys=100, batch_size=1, batches=40, seed=6),
    ],
    ids=["hot-keys", "mostly-aborts", "key-cycles", "same-key-ops", "errors-disorder", "batch-1"],
)
def test_serial_matches_the_model_on_edge_workloads(spec: WorkloadSpec) -> None:
    check_against_reference(spec)


def test_serial_is_deterministic() -> None:
    spec = WorkloadSpec(keys=100, batch_size=500, batches=3, error_ratio=0.05, ties=0.2, seed=11)
    first = ledger_workload(spec)
    second = ledger_workload(spec)
    a = run_in_memory(first.flow, first.batches, state=first.state)
    b = run_in_memory(second.flow, second.batches, state=second.state)
    assert_same_results(a, b)


FAST_EXECUTORS = [name for name in EXECUTORS if name != "serial"]


@pytest.mark.parametrize("executor", FAST_EXECUTORS)
@settings(max_examples=40)
@given(specs)
def test_executor_matches_the_serial_oracle(executor: str, spec: WorkloadSpec) -> None:
    workload = ledger_workload(spec)
    oracle = run_in_memory(workload.flow, workload.batches, state=workload.state)
    candidate = run_in_memory(
        workload.flow, workload.batches, executor=executor, state=workload.state
    )
    assert_same_results(oracle, candidate)


@pytest.fixture(scope="module")
def large_batch() -> tuple[LedgerWorkload, RunResult]:
    """One 100,000-transaction batch and the serial executor's run of it (made once: ~35 s)."""
    workload = ledger_workload(
        WorkloadSpec(
            keys=5_000,
            batch_size=100_000,
            batches=1,
            insert_delete_ratio=0.05,
            error_ratio=0.01,
            seed=17,
        )
    )
    return workload, run_in_memory(workload.flow, workload.batches, state=workload.state)


def test_serial_handles_a_100000_transaction_batch(
    large_batch: tuple[LedgerWorkload, RunResult],
) -> None:
    check_run_against_reference(*large_batch)


@pytest.mark.parametrize("executor", FAST_EXECUTORS)
def test_executor_matches_the_oracle_on_a_100000_transaction_batch(
    executor: str, large_batch: tuple[LedgerWorkload, RunResult]
) -> None:
    workload, oracle = large_batch
    candidate = run_in_memory(
        workload.flow, workload.batches, executor=executor, state=workload.state
    )
    assert_same_results(oracle, candidate)
