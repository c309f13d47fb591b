"""The island: where a union query runs when the service unions staging and a warehouse itself.

One in-memory DuckDB instance per service, opened with ``enable_external_access = false`` and
``lock_configuration = true``: no file, no network, no extension, no setting can be reached from a
query here, and neither can be turned back on (DuckDB fixes both per instance). Nothing is read
from disk; each query gets its own cursor, into which the service registers Arrow tables:

* per logical table ``T``, the warehouse rows as of the warehouse watermark ``W_t``
  (``__wh_i``) and the staged changes of batches ``(W_t, W]`` (``__st_i``);
* a temporary view named ``T`` that unions them with the newest version winning: for a state
  table, the warehouse rows whose row id has no staged change, plus the staged upserts (a staged
  delete removes the row; an SCD type 2 closing replaces the closed version, keyed by its
  surrogate key); for a sink, all rows of both (append-only);

and then runs the user's checked query over those views. Views and registrations belong to the
cursor and disappear with it, so concurrent queries never see each other's tables.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import duckdb
import pyarrow as pa

from api.exceptions import QueryFailed, QueryTimeout
from staging.layout import q
from staging.store import arrow_of
from streamdi.watchdog import WATCHDOG


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

    def __init__(self, *, memory_limit: str = "1GB", threads: int = 2) -> None:
        self._db = duckdb.connect(
            ":memory:",
            config={
                "enable_external_access": False,
                "lock_configuration": True,
                "memory_limit": memory_limit,
                "threads": threads,
            },
        )
        self._lock = threading.Lock()

    def close(self) -> None:
        self._db.close()

    def run(self, inputs: Sequence[UnionInput], sql: str, *, timeout_s: float) -> pa.Table:
        """The result of ``sql`` (checked, DuckDB dialect) over the union views of ``inputs``.

        Raises :class:`~api.exceptions.QueryTimeout` past ``timeout_s`` and
        :class:`~api.exceptions.QueryFailed` when DuckDB refuses the query."""
        with self._lock:  # cursor() on the shared connection from many threads
            cursor = self._db.cursor()
        try:
            for i, item in enumerate(inputs):
                warehouse, staged = f"__wh_{i}", f"__st_{i}"
                cursor.register(warehouse, item.warehouse)
                cursor.register(staged, item.staged)
                cursor.execute(
                    f"CREATE TEMP VIEW {q(item.name)} AS "
                    f"{union_view_sql(item, q(warehouse), q(staged))}"
                )
            with WATCHDOG.armed(timeout_s, cursor.interrupt):
                return arrow_of(cursor.sql(sql))
        except duckdb.InterruptException as exc:
            raise QueryTimeout(
                f"the query ran past its limit of {timeout_s:g} s", seconds=timeout_s
            ) from exc
        except duckdb.Error as exc:
            text = str(exc).strip()
            raise QueryFailed(
                f"the query failed: {text.splitlines()[0] if text else type(exc).__name__}"
            ) from exc
        finally:
            cursor.close()
