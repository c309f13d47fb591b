"""Errors of the TPC-DI warehouse."""

from __future__ import annotations

from streamdi.errors import TerminalError, TransientError
from tpcdi.exceptions import TpcdiError


class WarehouseUnavailable(TpcdiError, TransientError):
    """A warehouse target cannot be reached or refused a statement."""

    def __init__(self, target: str, detail: str) -> None:
        self.target = target
        self.detail = detail
        super().__init__(f"warehouse {target}: {detail}")


class WarehouseMismatch(TpcdiError, TerminalError):
    """The warehouse holds something the run does not expect (e.g. SK_DateID not yyyymmdd)."""
