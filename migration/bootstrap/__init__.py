"""Bootstrapping a warehouse target added after staging released batches.

:mod:`migration.bootstrap.copier` is the protocol (a consistent snapshot copied in bulk, then one
ledger row), :mod:`~migration.bootstrap.sources` where the rows come from (staging's snapshot; a
peer target for the sinks), :mod:`~migration.bootstrap.file_copy` its fast path for a DuckDB
target with a DuckDB peer (a copy of the peer's file, rewritten),
:mod:`~migration.bootstrap.record` what the target records about it,
:mod:`~migration.bootstrap.runner` how the migrator runs it (inline or in the background) and
when the query service may read the target, :mod:`~migration.bootstrap.pieces` the bounded,
read-ahead pieces, :mod:`~migration.bootstrap.progress` its progress.
"""

from migration.bootstrap.copier import Bootstrap, BootstrapMethod
from migration.bootstrap.progress import BootstrapProgress
from migration.bootstrap.record import BootstrapRecord, read_record
from migration.bootstrap.runner import BootstrapMode, Bootstrapper

__all__ = [
    "Bootstrap",
    "BootstrapMethod",
    "BootstrapMode",
    "BootstrapProgress",
    "BootstrapRecord",
    "Bootstrapper",
    "read_record",
]
