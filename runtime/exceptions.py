"""Errors of the composition root: what a run is told to wire cannot be wired."""

from __future__ import annotations

from streamdi.errors import StreamdiError, TerminalError


class RunError(StreamdiError):
    """Root of the composition root's errors."""


class RunSpecError(RunError, TerminalError):
    """``module:attribute`` does not name a dataflow or run spec, or its bindings are wrong."""
