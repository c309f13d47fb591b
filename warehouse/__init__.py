"""The warehouse layer: one driver per dialect (PostgreSQL, DuckDB) and one set of errors.

:class:`~warehouse.base.BaseWarehouseDriver` is the contract;
:class:`~warehouse.postgres.PostgresDriver` and :class:`~warehouse.duckdb.DuckDBDriver` implement
it (connecting, quoting, transactions, bulk loads). :mod:`warehouse.postgres_reads` and
:meth:`~warehouse.duckdb.DuckDBDriver.read_connection` are the fenced, bounded reads user SQL
runs through; :mod:`warehouse.postgres_login` sets up and verifies the PostgreSQL login they run
as; :mod:`warehouse.embedded` starts the embedded PostgreSQL server;
:mod:`warehouse.exceptions` holds the errors. Migration, the query service, the TPC-DI warehouse
and its audit all use it; it imports none of them, and it alone imports ``psycopg2``.
"""

from warehouse.base import BaseWarehouseDriver, Dialect
from warehouse.exceptions import (
    WarehouseError,
    WarehouseQueryFailed,
    WarehouseQueryTimeout,
    WarehouseUnavailable,
)

__all__ = [
    "BaseWarehouseDriver",
    "Dialect",
    "WarehouseError",
    "WarehouseQueryFailed",
    "WarehouseQueryTimeout",
    "WarehouseUnavailable",
]
