"""The local staging store: a DuckDB file with the dataflow's state tables, dead letters, Kafka
offsets and the batch ledger, and beside it the per-batch delta logs and outputs as Parquet segment
files it registers, written one transaction per commit."""

from staging.batch_commit import BatchCommit, PartitionProgress, StreamProgress
from staging.snapshot import StagingSnapshot, open_snapshot
from staging.state_file import connect
from staging.store import StagingStore

__all__ = [
    "BatchCommit",
    "PartitionProgress",
    "StagingSnapshot",
    "StagingStore",
    "StreamProgress",
    "connect",
    "open_snapshot",
]
