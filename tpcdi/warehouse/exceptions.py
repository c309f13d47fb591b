"""Errors of the TPC-DI warehouse (a warehouse that cannot be reached raises the warehouse layer's
:class:`~warehouse.exceptions.WarehouseUnavailable`)."""

from __future__ import annotations

from streamdi.errors import TerminalError
from tpcdi.exceptions import TpcdiError


class WarehouseMismatch(TpcdiError, TerminalError):
    """The warehouse holds something the run does not expect (e.g. SK_DateID not yyyymmdd)."""
