"""Errors of the staging store.

Driver errors (duckdb) are mapped to these at the boundary (``raise ... from exc``); each carries
the kind: a file held by another process or a dataflow that does not match the file are terminal,
a failed commit is transient (the batch can be run and committed again).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from streamdi.errors import StreamdiError, TerminalError, TransientError

if TYPE_CHECKING:
    from etl_dataflows.evolution.plan import UpgradePlan


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


class StagingMissing(StagingError, TerminalError):
    """There is no staging file: nothing was staged yet (or ``STAGING__PATH`` names another)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        super().__init__(
            f"there is no staging file at {path}: nothing was staged there yet (run the "
            "pipeline first, or set STAGING__PATH / STREAMDI__STATE_DIR to the run's)"
        )


class StagingMismatch(StagingError, TerminalError):
    """The staging file belongs to another dataflow, or to another shape of this one."""

    def __init__(self, path: Path, detail: str) -> None:
        self.path = path
        super().__init__(
            f"staging file {path} does not match the dataflow: {detail}; set STAGING__PATH to a "
            "new file (or remove this one) to start over"
        )


class StagingUpgradeNeeded(StagingMismatch):
    """The dataflow changed since the file's recorded version in a way that changes its layout:
    ``plan`` lists the changes (:class:`~etl_dataflows.evolution.plan.UpgradePlan`) and the
    message says what to run."""

    def __init__(self, path: Path, plan: UpgradePlan) -> None:
        self.path = path
        self.plan = plan
        if plan.applicable:
            todo = (
                "apply it with `streamdi upgrade apply <module:attribute>` or "
                "`streamdi run --upgrade`"
            )
        else:
            todo = "see each way out above; `streamdi upgrade plan <module:attribute>` shows this"
        StagingError.__init__(
            self,
            f"staging file {path} holds an earlier version of dataflow {plan.flow!r}; the "
            f"upgrade plan:\n{plan.render()}\n{todo}",
        )


class StagingUpgradeRefused(StagingError, TerminalError):
    """An upgrade cannot apply in place: ``plan`` says which change and the way out (or
    ``detail`` says what failed converting the stored rows). The file is unchanged."""

    def __init__(self, path: Path, plan: UpgradePlan, detail: str | None = None) -> None:
        self.path = path
        self.plan = plan
        why = (
            detail
            if detail is not None
            else f"{len(plan.blocking)} change(s) cannot apply in place"
        )
        StagingError.__init__(
            self,
            f"upgrade of staging file {path} refused: {why}; nothing was changed\n{plan.render()}",
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
