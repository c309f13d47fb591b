"""The warehouse driver tests share the migration tests' embedded PostgreSQL server."""

from tests.integration.migration.conftest import postgres

__all__ = ["postgres"]
