"""Errors of the migration layer.

Driver errors are mapped by the warehouse drivers (:mod:`warehouse.exceptions`): a target that
cannot be reached raises :class:`~warehouse.exceptions.WarehouseUnavailable` (transient: staging
keeps buffering and the migration retries). The errors here are the migration's own: a target
whose contents contradict staging is terminal (someone must decide).
"""

from __future__ import annotations

from streamdi.errors import StreamdiError, TerminalError, TransientError


class MigrationError(StreamdiError):
    """Root of the migration layer's errors."""


class WarehouseLayoutError(MigrationError, TerminalError):
    """The dataflow cannot be laid out in a warehouse (e.g. a table and a sink named alike)."""


class TargetMismatch(MigrationError, TerminalError):
    """A target holds another layout of the dataflow, or batches staging does not account for."""

    def __init__(self, target: str, detail: str) -> None:
        self.target = target
        super().__init__(f"migration target {target}: {detail}")


class BootstrapStopped(MigrationError, TransientError):
    """A bootstrap was asked to stop (the migrator closes); the relation in hand rolled back and
    the next run resumes with it."""

    def __init__(self, target: str) -> None:
        self.target = target
        super().__init__(f"bootstrap of migration target {target} stopped")


class StagingBusy(MigrationError, TerminalError):
    """``streamdi migrate`` was asked to work while a running pipeline holds the staging file."""

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(
            f"staging file {path} is held by a running pipeline (DuckDB allows one writing "
            "process); that pipeline migrates by itself (MIGRATION__TARGETS, MIGRATION__PUSH*): "
            "stop it to migrate from the command line"
        )
