"""Warehouse targets: PostgreSQL (COPY) and DuckDB files (Arrow), behind :class:`BaseTarget`."""

from migration.targets.base import BaseTarget, MergeResult
from migration.targets.duckdb_file import DuckDBTarget
from migration.targets.postgres import PostgresTarget

__all__ = ["BaseTarget", "DuckDBTarget", "MergeResult", "PostgresTarget"]
