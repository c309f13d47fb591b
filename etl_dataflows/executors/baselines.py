"""Baselines, in the same harness and with the same compiled transactions, so that comparisons
measure scheduling alone:

* ``lock`` — ordered two-phase locking with lock-ahead (LAL, TStream's LOCK): worker threads claim
  transactions in timestamp order, insert their lock requests one transaction after the other,
  wait for their turn on every key, run, and release;
* ``pat`` — partition-serial (S-Store's PAT): the same, with one lock per partition of the keys
  instead of one per key, turns assigned in timestamp order when the batch is planned;
* ``tstream`` — TStream's operation chains: each operation is a task on its key's chain, run in
  parallel with busy waits on the operations it depends on; aborts are lazy and re-checked until
  the result is exact (:mod:`etl_dataflows.executors.local.op_level`).

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
    variants: ClassVar[tuple[str, ...]] = ()

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
    variants: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        flow: Dataflow | CompiledDataflow,
        state: StateImage | None = None,
        *,
        workers: int | None = None,
    ) -> None:
        super().__init__(flow, state, strategy="pat", workers=workers)


class TStreamExecutor(LocalExecutor):
    """TStream: operation chains run in parallel, lazy aborts re-checked until exact."""

    name: ClassVar[str] = "tstream"
    variants: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        flow: Dataflow | CompiledDataflow,
        state: StateImage | None = None,
        *,
        workers: int | None = None,
    ) -> None:
        super().__init__(flow, state, strategy="tstream", workers=workers)
