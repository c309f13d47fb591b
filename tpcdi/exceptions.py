"""Errors of the TPC-DI workload package.

Malformed *records* in a source file are not errors: the readers put them in a rejects table with
the file, the line and the reason. Errors are for what no record-level handling can fix: a source
file or data set that does not exist, a file streamdi does not know, a bad generator parameter.
"""

from __future__ import annotations

from streamdi.errors import StreamdiError, TerminalError


class TpcdiError(StreamdiError):
    """Root of the TPC-DI package's errors."""


class SourceNotFound(TpcdiError, TerminalError):
    """A source file or a data set directory is missing."""

    def __init__(self, message: str, *, path: str | None = None) -> None:
        self.path = path
        super().__init__(message)


class UnknownSourceFile(TpcdiError, TerminalError):
    """A file name is not one of the files DIGen writes."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"{name!r} is not a TPC-DI source file")


class GeneratorError(TpcdiError, TerminalError):
    """The generator cannot run with the given parameters (e.g. a scale factor <= 0)."""
