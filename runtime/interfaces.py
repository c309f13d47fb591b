"""What the pipeline loop needs of its consumer, its executor and its staging store.

The production pipeline fills them with :class:`ingest.consumer.RecordConsumer`, an executor of
:func:`etl_dataflows.executors.create_executor` and :class:`staging.store.StagingStore`; the unit
tests drive the same loop with an in-memory feed of records (no broker).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from etl_dataflows.batch import BatchResult, EngineBatch
from ingest.assembler import RawRecord, TopicPartition
from staging.batch_commit import BatchCommit
from staging.store import CommitHook


class RecordFeed(Protocol):
    """The Kafka side: records of the run's topics, in partition order."""

    def poll(self, timeout_ms: int) -> list[RawRecord]:
        """The next records (up to ``timeout_ms`` of waiting; [] when there are none)."""
        ...

    def end_offsets(self, timeout_ms: int | None = None) -> dict[TopicPartition, int]:
        """Each partition's end offset now ({} when the brokers do not answer within
        ``timeout_ms``; None: the client's own request timeout)."""
        ...

    def position(self, tp: TopicPartition) -> int:
        """The offset of the next record :meth:`poll` returns from ``tp``."""
        ...

    def pause(self, partitions: set[TopicPartition]) -> None:
        """Stop returning records of ``partitions`` (their position stays) until resumed."""
        ...

    def resume(self, partitions: set[TopicPartition]) -> None:
        """Return records of ``partitions`` again."""
        ...

    def commit_for_monitoring(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Tell the brokers the offsets staged so far (monitoring only: staging holds the
        truth)."""
        ...

    def close(self) -> None: ...


class BatchExecutor(Protocol):
    """The engine: runs one batch against the state it holds (:class:`~etl_dataflows.executors.
    base.BaseExecutor`)."""

    def warm_up(self) -> None: ...

    def run_batch(self, batch: EngineBatch) -> BatchResult: ...

    def close(self) -> None: ...


class BatchStage(Protocol):
    """Staging's commit: consecutive batches, in order, in one transaction, or none of them
    (:meth:`staging.store.StagingStore.commit`, whose protocol calls ``hook`` at each step)."""

    def commit(self, commits: list[BatchCommit], *, hook: CommitHook | None = None) -> None: ...
