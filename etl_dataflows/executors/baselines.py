"""Baselines, in the same harness and with the same compiled transactions, so that comparisons
measure scheduling alone:

* ``lock`` — ordered two-phase locking with lock-ahead (LAL, TStream's LOCK): worker threads claim
  transactions in timestamp order, insert their lock requests one transaction after the other,
  wait for their turn on every key, run, and release;
* ``pat`` — partition-serial (S-Store's PAT): the same, with one lock per partition of the keys
  instead of one per key, turns assigned in timestamp order when the batch is planned.

Both run every transaction atomically in a conflict-equivalent order, so their results are the
serial executor's. Steps the compiler does not take run interpreted, as in ``local``.
"""

from __future__ import annotations

from typing import ClassVar

from etl_dataflows.dataflow import CompiledDataflow, Dataflow
from etl_dataflows.executors.local import LocalExecutor
from etl_dataflows.state import StateImage


class LockExecutor(LocalExecutor):
    """Ordered lock-ahead two-phase locking per key (see the module docstring)."""

    name: ClassVar[str] = "lock"

    def __init__(
        self,
        flow: Dataflow | CompiledDataflow,
        state: StateImage | None = None,
        *,
        workers: int | None = None,
    ) -> None:
        super().__init__(flow, state, strategy="lock", workers=workers)


class PatExecutor(LocalExecutor):
    """Partition locks in timestamp order, S-Store style (see the module docstring)."""

    name: ClassVar[str] = "pat"

    def __init__(
        self,
        flow: Dataflow | CompiledDataflow,
        state: StateImage | None = None,
        *,
        workers: int | None = None,
    ) -> None:
        super().__init__(flow, state, strategy="pat", workers=workers)
