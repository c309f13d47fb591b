"""The batch protocol of :class:`~etl_dataflows.executors.base.BaseExecutor`, driven directly as
a composing executor drives an embedded one: ``begin_batch``, ``run_transactions`` per step, then
``end_batch`` (the same deltas as ``run_batch``) or ``rollback_batch`` (the state before)."""

from __future__ import annotations

from typing import Any

import pytest

from etl_dataflows.batch import TableDelta
from etl_dataflows.executors import create_executor
from etl_dataflows.executors.base import BaseExecutor, TransactionOutcome
from etl_dataflows.state import StateImage
from etl_dataflows.testing import WorkloadSpec, ledger_workload
from etl_dataflows.testing.workload import LedgerWorkload

EXECUTORS = ["serial", "local"]


def _workload() -> LedgerWorkload:
    return ledger_workload(
        WorkloadSpec(keys=25, batch_size=400, batches=2, insert_delete_ratio=0.2, seed=11)
    )


def _rows(image: StateImage) -> dict[str, list[str]]:
    return {
        name: sorted(repr(sorted(row.items())) for row in table.to_pylist())
        for name, table in image.tables.items()
    }


def _drive(runner: BaseExecutor, workload: LedgerWorkload, batch: int) -> list[TransactionOutcome]:
    """Steps 1 and 2 of the protocol for one batch (its transactional steps, in order)."""
    prepared = runner.prepare_batch(workload.batches[batch])
    runner.begin_batch()
    outcomes = []
    for step in runner.flow.transactional_steps():
        events = prepared.produced[step.input or ""]
        outcomes.append(runner.run_transactions(step, events, prepared.dead))
    return outcomes


def _deltas(deltas: dict[str, TableDelta]) -> dict[str, Any]:
    return {
        name: (delta.upserts.to_pylist(), delta.deletes.to_pylist())
        for name, delta in sorted(deltas.items())
    }


@pytest.mark.parametrize("executor", EXECUTORS)
def test_rollback_restores_the_state_before_the_batch(executor: str) -> None:
    workload = _workload()
    runner = create_executor(executor, workload.flow, workload.state)
    runner.run_batch(workload.batches[0])
    before = _rows(runner.state_image())
    outcomes = _drive(runner, workload, 1)
    assert sum(o.committed for o in outcomes) > 0  # the batch changed something
    assert _rows(runner.state_image()) != before
    runner.rollback_batch()
    assert _rows(runner.state_image()) == before
    runner.close()


@pytest.mark.parametrize("executor", EXECUTORS)
def test_end_batch_gives_what_run_batch_gives(executor: str) -> None:
    workload = _workload()
    driven = create_executor(executor, workload.flow, workload.state)
    whole = create_executor(executor, workload.flow, workload.state)
    for batch in range(len(workload.batches)):
        _drive(driven, workload, batch)
        deltas, sequences = driven.end_batch()
        result = whole.run_batch(workload.batches[batch])
        assert _deltas(deltas) == _deltas(result.deltas)
        assert sequences == result.sequences
    assert _rows(driven.state_image()) == _rows(whole.state_image())
    driven.close()
    whole.close()
