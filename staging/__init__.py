"""The local staging store: a DuckDB file with the dataflow's state tables, the per-batch delta log,
outputs, dead letters, Kafka offsets and the batch ledger, written one transaction per commit."""

from staging.snapshot import StagingSnapshot, open_snapshot
from staging.store import BatchCommit, PartitionProgress, StagingStore, StreamProgress

__all__ = [
    "BatchCommit",
    "PartitionProgress",
    "StagingSnapshot",
    "StagingStore",
    "StreamProgress",
    "open_snapshot",
]
