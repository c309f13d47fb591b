"""Errors of the TPC-DI query side (batch validation, audit, metric, report).

Talking to the warehouse raises the warehouse layer's errors (:mod:`warehouse.exceptions`,
mapped by the drivers): :class:`~warehouse.exceptions.WarehouseUnavailable` (transient) when the
warehouse cannot be reached, :class:`~warehouse.exceptions.WarehouseQueryFailed` (terminal) for
a statement it rejects. The errors here are the audit's own, and count as warehouse errors too
(a check that meets one fails with the reason): a missing table, answer keys that cannot be read.
"""

from __future__ import annotations

from streamdi.errors import TerminalError
from tpcdi.exceptions import TpcdiError
from warehouse.exceptions import WarehouseError


class WarehouseTablesMissing(TpcdiError, WarehouseError, TerminalError):
    """Tables the operation needs do not exist in the warehouse schema."""

    def __init__(self, schema: str | None, tables: list[str]) -> None:
        self.schema = schema
        self.tables = tables
        where = f"schema {schema}" if schema else "the default schema"
        super().__init__(f"missing warehouse tables in {where}: {', '.join(tables)}")


class AnswerKeysInvalid(TpcdiError, WarehouseError, TerminalError):
    """An ``*_audit.csv`` file has lines that do not parse; the answer keys cannot be trusted."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("unreadable answer keys: " + "; ".join(problems[:10]))
