"""Errors of the Spark executor (terminal: a session that cannot start is a failure, not a
reason to fall back silently)."""

from __future__ import annotations

from etl_dataflows.exceptions import DataflowError
from streamdi.errors import TerminalError


class SparkUnavailable(DataflowError, TerminalError):
    """The Spark session cannot start or cannot be used as configured."""


class SparkTaskFailed(DataflowError, TerminalError):
    """A Spark job of a batch failed; the batch is rolled back (nothing of it is applied)."""

    def __init__(self, message: str, *, step: str) -> None:
        self.step = step
        super().__init__(f"step {step!r}: {message}")
