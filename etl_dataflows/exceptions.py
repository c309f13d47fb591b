"""Errors of the dataflow engine (all terminal: retrying a bad definition or a bug cannot help).

Bad records are not errors: they become dead-letter rows or aborted transactions with a reason.
"""

from __future__ import annotations

from streamdi.errors import StreamdiError, TerminalError


class DataflowError(StreamdiError):
    """Root of the engine's errors."""


class DataflowDefinitionError(DataflowError, TerminalError):
    """The dataflow is malformed; raised before any data flows, naming the step at fault."""

    def __init__(self, message: str, *, step: str | None = None) -> None:
        self.step = step
        super().__init__(f"step {step!r}: {message}" if step else message)


class StepFailed(DataflowError, TerminalError):
    """A step could not run a batch for a reason that is not the data's (e.g. a map function
    returned a table without a declared column). The executor's state is left as before the
    batch."""

    def __init__(self, message: str, *, step: str, batch_id: int | None = None) -> None:
        self.step = step
        self.batch_id = batch_id
        super().__init__(f"step {step!r} failed on batch {batch_id}: {message}")


class BatchInputError(DataflowError, TerminalError):
    """A batch does not fit the dataflow (an unknown source, missing meta columns)."""


class UnknownExecutor(DataflowError, TerminalError):
    """No executor has the requested name, or the executor has no such fixed strategy or
    placement; the message names the valid ones. Raised before any state is loaded."""
