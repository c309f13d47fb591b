"""Errors of ``streamdi tpcdi run`` and ``streamdi tpcdi stream``."""

from __future__ import annotations

from streamdi.errors import TerminalError
from tpcdi.exceptions import TpcdiError


class RunFailed(TpcdiError, TerminalError):
    """A phase of the TPC-DI run failed; the message names the phase and why."""


class UpdateFailed(RunFailed):
    """An incremental update did not reach the warehouse (the pipeline stopped or timed out)."""
