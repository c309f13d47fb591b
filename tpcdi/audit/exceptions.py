"""Errors of the TPC-DI query side (batch validation, audit, metric, report).

Driver errors (duckdb, psycopg2) are mapped to these at the boundary with ``raise ... from exc``.
A warehouse that cannot be reached is transient; a statement the warehouse rejects, a missing
table or answer keys that cannot be read are terminal.
"""

from __future__ import annotations

from streamdi.errors import TerminalError, TransientError
from tpcdi.exceptions import TpcdiError


class WarehouseError(TpcdiError):
    """Root of the errors raised while talking to a TPC-DI warehouse."""


class WarehouseUnavailable(WarehouseError, TransientError):
    """The warehouse could not be opened or the connection dropped."""

    def __init__(self, dialect: str, detail: str) -> None:
        self.dialect = dialect
        super().__init__(f"{dialect} warehouse unavailable: {detail}")


class WarehouseQueryFailed(WarehouseError, TerminalError):
    """The warehouse rejected a statement; ``sql`` is its first line, ``detail`` the reason."""

    def __init__(self, dialect: str, sql: str, detail: str) -> None:
        self.dialect = dialect
        self.sql = sql
        self.detail = detail
        super().__init__(f"{dialect}: {detail} (in: {sql})")


class WarehouseTablesMissing(WarehouseError, TerminalError):
    """Tables the operation needs do not exist in the warehouse schema."""

    def __init__(self, schema: str | None, tables: list[str]) -> None:
        self.schema = schema
        self.tables = tables
        where = f"schema {schema}" if schema else "the default schema"
        super().__init__(f"missing warehouse tables in {where}: {', '.join(tables)}")


class AnswerKeysInvalid(WarehouseError, TerminalError):
    """An ``*_audit.csv`` file has lines that do not parse; the answer keys cannot be trusted."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("unreadable answer keys: " + "; ".join(problems[:10]))
