"""Durable migration of staged deltas into PostgreSQL and DuckDB warehouses, exactly once.

See :mod:`migration.migrator` (the protocol), :mod:`migration.targets` (loads and merges over the
warehouse drivers of :mod:`warehouse`), :mod:`migration.schema` (the warehouse layout from the
dataflow), :mod:`migration.reader` (snapshots for the query service) and :mod:`migration.worker`
(push and pull inside the pipeline process).
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
