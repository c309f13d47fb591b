"""Durable migration of staged deltas into PostgreSQL and DuckDB warehouses, exactly once.

See :mod:`migration.migrator` (the protocol), :mod:`migration.targets` (COPY and Arrow bulk paths,
loads and merges), :mod:`migration.schema` (the warehouse layout from the dataflow) and
:mod:`migration.worker` (push and pull inside the pipeline process).
"""

from migration.migrator import MigrationReport, Migrator, build_targets
from migration.schema import WarehouseLayout
from migration.worker import MigrationWorker, start_migration_worker

__all__ = [
    "MigrationReport",
    "MigrationWorker",
    "Migrator",
    "WarehouseLayout",
    "build_targets",
    "start_migration_worker",
]
