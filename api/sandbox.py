"""The island: where a union query runs when the service unions staging and a warehouse itself.

One in-memory DuckDB instance per service, opened with ``enable_external_access = false`` and
``lock_configuration = true``: no file, no network, no extension, no setting can be reached from a
query here, and neither can be turned back on (DuckDB fixes both per instance). Its
``memory_limit`` (``API__SANDBOX_MEMORY_LIMIT``) bounds what DuckDB's buffer manager holds for
every island query together, with no temporary directory (nothing spills: a query past the limit
fails with ``query_memory_exceeded``), ``threads`` (``API__SANDBOX_THREADS``), and
``max_execution_time`` set to the statement limit as a second deadline. Nothing is read from
disk; each query gets its own cursor, into which the service registers Arrow tables:

* per logical table ``T``, the warehouse rows as of the warehouse watermark ``W_t``
  (``__wh_i``) and the staged changes of batches ``(W_t, W]`` (``__st_i``);
* a temporary view named ``T`` that unions them with the newest version winning: for a state
  table, the warehouse rows whose row id has no staged change, plus the staged upserts (a staged
  delete removes the row; an SCD type 2 closing replaces the closed version, keyed by its
  surrogate key); for a sink, all rows of both (append-only);

and then runs the user's checked query over those views, streaming its result in bounded pieces
(:mod:`warehouse.bounded`: past ``max_bytes`` the query stops with ``answer_too_large``). Views
and registrations belong to the cursor and disappear with it, so concurrent queries never see
each other's tables. The statement runs inside the current query's scope
(:func:`streamdi.watchdog.statement`): its deadline, the memory backstop and shutdown interrupt it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import duckdb
import pyarrow as pa

from api.exceptions import AnswerTooLarge, QueryFailed, QueryMemoryExceeded, QueryTimeout
from staging.layout import q
from streamdi.watchdog import statement
from warehouse.bounded import read_bounded

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class UnionInput:
    """What one logical table contributes to an island query. ``columns`` are the columns its
    view exposes (row id included for a state table); ``staged`` has ``batch_id`` and ``op``
    besides them for a state table, ``batch_id`` for a sink."""

    name: str
    kind: Literal["state", "output"]
    row_id: tuple[str, ...]
    columns: tuple[str, ...]
    warehouse: pa.Table
    staged: pa.Table


def union_view_sql(item: UnionInput, warehouse: str, staged: str) -> str:
    """The SELECT that unions ``warehouse`` and ``staged`` (relation names) for ``item``."""
    cols = ", ".join(q(c) for c in item.columns)
    if item.kind == "output":
        return f"SELECT {cols} FROM {warehouse} UNION ALL SELECT {cols} FROM {staged}"
    ids = ", ".join(q(c) for c in item.row_id)
    kept = ", ".join(f"w.{q(c)}" for c in item.columns)
    return (
        f"SELECT {kept} FROM {warehouse} w ANTI JOIN {staged} s USING ({ids}) "
        f"UNION ALL SELECT {cols} FROM {staged} WHERE op = 'upsert'"
    )


class UnionSandbox:
    """See the module docstring."""

    def __init__(
        self, *, memory_limit: str = "1GB", threads: int = 2, timeout_s: float = 30.0
    ) -> None:
        self._db = duckdb.connect(
            ":memory:",
            config={
                "enable_external_access": False,
                "autoload_known_extensions": False,
                "autoinstall_known_extensions": False,
                "allow_community_extensions": False,
                "memory_limit": memory_limit,
                "threads": threads,
                "temp_directory": "",
                "max_execution_time": max(1, int(timeout_s * 1000)),
                "lock_configuration": True,
            },
        )
        self._lock = threading.Lock()

    def close(self) -> None:
        try:
            self._db.close()
        except duckdb.Error as exc:  # an abandoned island statement still runs on it
            logger.warning("closing the island failed: %s", exc)

    def run(
        self, inputs: Sequence[UnionInput], sql: str, *, timeout_s: float, max_bytes: int
    ) -> pa.Table:
        """The result of ``sql`` (checked, DuckDB dialect) over the union views of ``inputs``,
        at most ``max_bytes`` of it.

        Raises :class:`~api.exceptions.QueryTimeout` past ``timeout_s``,
        :class:`~api.exceptions.QueryMemoryExceeded` past the memory limit,
        :class:`~api.exceptions.AnswerTooLarge` past ``max_bytes`` and
        :class:`~api.exceptions.QueryFailed` when DuckDB refuses the query."""
        with self._lock:  # cursor() on the shared connection from many threads
            cursor = self._db.cursor()
        try:
            with statement(timeout_s, cursor.interrupt):
                for i, item in enumerate(inputs):
                    warehouse, staged = f"__wh_{i}", f"__st_{i}"
                    cursor.register(warehouse, item.warehouse)
                    cursor.register(staged, item.staged)
                    cursor.execute(
                        f"CREATE TEMP VIEW {q(item.name)} AS "
                        f"{union_view_sql(item, q(warehouse), q(staged))}"
                    )
                return read_bounded(cursor.sql(sql), max_bytes, _too_large)
        except duckdb.InterruptException as exc:
            raise QueryTimeout(
                f"the query ran past its limit of {timeout_s:g} s", seconds=timeout_s
            ) from exc
        except duckdb.OutOfMemoryException as exc:
            raise QueryMemoryExceeded(
                f"the query passed the island's memory limit: {_first_line(exc)}"
            ) from exc
        except duckdb.Error as exc:
            raise QueryFailed(f"the query failed: {_first_line(exc)}") from exc
        finally:
            with contextlib.suppress(duckdb.Error):
                cursor.close()


def _too_large(limit: int) -> AnswerTooLarge:
    return AnswerTooLarge(
        f"the answer passed {limit:,} bytes (API__MAX_ANSWER_MB); ask for fewer or narrower rows",
        limit_bytes=limit,
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
