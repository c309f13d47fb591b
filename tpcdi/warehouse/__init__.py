"""The TPC-DI data warehouse: its tables (clause 3.2), DDL for DuckDB and PostgreSQL, and
:class:`~tpcdi.warehouse.warehouse.Warehouse`, which opens the targets."""
