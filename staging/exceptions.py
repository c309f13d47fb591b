"""Errors of the staging store.

Driver errors (duckdb) are mapped to these at the boundary (``raise ... from exc``); each carries
the kind: a file held by another process or a dataflow that does not match the file are terminal,
a failed commit is transient (the batch can be run and committed again).
"""

from __future__ import annotations

from pathlib import Path

from streamdi.errors import StreamdiError, TerminalError, TransientError


class StagingError(StreamdiError):
    """Root of the staging store's errors."""


class StagingInUse(StagingError, TerminalError):
    """Another process holds the staging file (DuckDB allows one writing process)."""

    def __init__(self, path: Path, detail: str) -> None:
        self.path = path
        super().__init__(
            f"staging file {path} is in use by another process ({detail}); stop that process "
            "or set STAGING__PATH to another file"
        )


class StagingMismatch(StagingError, TerminalError):
    """The staging file belongs to another dataflow, or to another shape of this one."""

    def __init__(self, path: Path, detail: str) -> None:
        self.path = path
        super().__init__(
            f"staging file {path} does not match the dataflow: {detail}; set STAGING__PATH to a "
            "new file (or remove this one) to start over"
        )


class StagingCommitFailed(StagingError, TransientError):
    """A commit was rolled back; nothing of it is visible. ``batch_ids`` are the batches."""

    def __init__(self, batch_ids: list[int], detail: str) -> None:
        self.batch_ids = batch_ids
        super().__init__(f"staging commit of batches {batch_ids} rolled back: {detail}")


class BatchAlreadyCommitted(StagingError, TerminalError):
    """A batch id at or below the staged watermark was offered again (it would apply twice)."""

    def __init__(self, batch_id: int, watermark: int) -> None:
        self.batch_id = batch_id
        self.watermark = watermark
        super().__init__(
            f"batch {batch_id} is at or below the staged watermark {watermark}; refusing to apply "
            "it twice"
        )


class StagingUnavailable(StagingError, TransientError):
    """A staging file cannot be read now (another process writes it) or is not a staging file."""
