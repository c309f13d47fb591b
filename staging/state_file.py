"""The folded state tables in a DuckDB file of their own, attached beside the staging file.

``<staging file>.state`` holds what a fold writes (:mod:`staging.folding`): schema
``state_base`` with one table per state table, and ``state_meta`` with
``state_folded_through``, the last batch those tables hold. The staging file's connection
attaches it as :data:`STATE_CATALOG`; the ``state.<table>`` views of the staging file read it.

Why a file of its own: a DuckDB checkpoint holds back every commit to the file it checkpoints
for as long as it writes, and the folds are most of what staging writes (at ~170 k events/s a
fold writes ~9 MB a second, and a checkpoint of 70-90 MB held a batch's commit for 0.35-0.5 s,
the stream's p99). A checkpoint of an *attached* database does not hold back commits to the
other one, so the folds and their checkpoints run in the housekeeping thread while batches
commit beside them.

The price is two files that must agree, and DuckDB writes only one attached database per
transaction:

* **Where each table is.** The staging file's ``streamdi.meta`` key :data:`STATE_TABLES` maps
  each state table to its table in the state file (a JSON object). A seed, or an upgrade that
  changes a table's rows, writes them into a new table of the state file first, then switches
  the map in the staging file's transaction; a table no map names is an orphan of a switch that
  did not commit, dropped at the next opening (:func:`drop_orphans`).
* **What a reader sees.** A reader's transaction takes each file's snapshot when it first
  touches that file. A fold (the state file) and a release of delta segments (the staging file)
  each change what the other file's rows mean, so a reader must not take one file's snapshot
  before such a commit and the other's after it: readers start with :func:`begin_read` under
  the store's ``snapshot_lock``, which the fold's and the release's COMMIT also hold (a batch's
  commit never takes it).
* **Files of earlier layouts** keep ``state_base`` (layout 5 to 7) or the state tables
  themselves (layout 4 and before) in the staging file; opening one for writing copies those
  rows into the state file in the state file's transaction, then drops them in the staging
  file's (:func:`adopt_rows`; a crash between leaves the old tables, and the copy runs again).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import duckdb

from staging.layout import STATE_BASE, literal, q, qualified

#: The name the staging file's connection attaches the state file under.
STATE_CATALOG = "streamdi_state"
#: The ``streamdi.meta`` key (staging file) of the map from state table to its table there.
STATE_TABLES = "state_tables"
#: The state file's own key-value table (``state_folded_through``).
STATE_META = f"{q(STATE_CATALOG)}.main.state_meta"
#: After a fold, the housekeeping thread checkpoints the state file once its WAL is this large
#: (the staging file's own checkpoints stay small and rare).
CHECKPOINT_WAL_BYTES = 32 * 2**20


def state_path(staging: Path | str) -> Path:
    """The state file beside the staging file at ``staging``."""
    return Path(f"{staging}.state")


def attach(con: duckdb.DuckDBPyConnection, staging: Path, *, read_only: bool = False) -> None:
    """Attach the state file of ``staging`` to ``con`` (created when missing unless
    ``read_only``), with its ``state_meta`` and ``state_base`` schema."""
    path = state_path(staging)
    mode = " (READ_ONLY)" if read_only else ""
    con.execute(f"ATTACH IF NOT EXISTS {literal(str(path))} AS {q(STATE_CATALOG)}{mode}")
    if not read_only:
        con.execute(f"CREATE SCHEMA IF NOT EXISTS {q(STATE_CATALOG)}.{q(STATE_BASE)}")
        con.execute(
            f"CREATE TABLE IF NOT EXISTS {STATE_META} "
            "(key VARCHAR PRIMARY KEY, value VARCHAR NOT NULL)"
        )


def connect(
    staging: Path | str, *, read_only: bool = True, config: dict[str, Any] | None = None
) -> duckdb.DuckDBPyConnection:
    """A connection to the staging file at ``staging`` with its state file attached, so that
    its ``state.<table>`` views read (a plain connection to the staging file alone fails on
    them with "schema streamdi_state.state_base does not exist"). For reading staging by hand
    while no pipeline has it open, or, with the store's ``config``
    (:func:`~staging.store.connection_config`), beside the pipeline in its own process."""
    con = duckdb.connect(str(staging), read_only=read_only, config=config or {})
    try:
        if read_only and not state_path(staging).exists():
            return con  # a file of a layout before 8, or one that never held a state table
        attach(con, Path(staging), read_only=read_only)
    except BaseException:
        con.close()
        raise
    return con


def table_ref(table: str) -> str:
    """The qualified name of table ``table`` (its name in the state file)."""
    return f"{q(STATE_CATALOG)}.{qualified(STATE_BASE, table)}"


def read_map(rows: Mapping[str, str]) -> dict[str, str]:
    """The state tables' map from a staging file's ``streamdi.meta`` rows (empty: a file of an
    earlier layout, or a new one)."""
    text = rows.get(STATE_TABLES)
    return {str(k): str(v) for k, v in json.loads(text).items()} if text else {}


def write_map(con: duckdb.DuckDBPyConnection, meta: str, tables: Mapping[str, str]) -> None:
    """In the caller's transaction on the staging file: record the map."""
    con.execute(
        f"INSERT OR REPLACE INTO {meta} VALUES (?, ?)",
        [STATE_TABLES, json.dumps(dict(sorted(tables.items())))],
    )


def existing_tables(con: duckdb.DuckDBPyConnection) -> set[str]:
    """The tables of the state file's ``state_base``."""
    rows = con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = ? AND schema_name = ?",
        [STATE_CATALOG, STATE_BASE],
    ).fetchall()
    return {str(r[0]) for r in rows}


def drop_orphans(con: duckdb.DuckDBPyConnection, keep: Iterable[str]) -> list[str]:
    """In the caller's transaction on the state file: drop every table no map names."""
    gone = sorted(existing_tables(con) - set(keep))
    for table in gone:
        con.execute(f"DROP TABLE {table_ref(table)}")
    return gone


def new_table_name(name: str, taken: Iterable[str], version: int) -> str:
    """A table name for state table ``name``'s rows as of layout ``version`` that no table of
    the state file has."""
    used = set(taken)
    candidate = f"{name}__v{version}"
    n = 1
    while candidate in used:
        n += 1
        candidate = f"{name}__v{version}_{n}"
    return candidate


def read_meta(con: duckdb.DuckDBPyConnection, key: str) -> str | None:
    rows = con.execute(f"SELECT value FROM {STATE_META} WHERE key = ?", [key]).fetchall()
    return None if not rows else str(rows[0][0])


def set_meta(con: duckdb.DuckDBPyConnection, key: str, value: str) -> None:
    """In the caller's transaction on the state file."""
    con.execute(f"INSERT OR REPLACE INTO {STATE_META} VALUES (?, ?)", [key, value])


def adopt_rows(
    con: duckdb.DuckDBPyConnection, tables: Mapping[str, str], sources: Mapping[str, str]
) -> None:
    """In the caller's transaction on the state file: replace the rows of each state table
    ``name`` in ``sources`` (a qualified table of the staging file, an earlier layout's) by that
    table's, into its table ``tables[name]``. Run again after a crash, it copies again."""
    for name, source in sources.items():
        target = table_ref(tables[name])
        con.execute(f"DELETE FROM {target}")
        con.execute(f"INSERT INTO {target} SELECT * FROM {source}")


def begin_read(
    con: duckdb.DuckDBPyConnection, lock: threading.Lock, *, attached: bool = True
) -> None:
    """BEGIN a read transaction on ``con`` whose snapshots of the staging file and the state
    file agree: both are taken under ``lock`` (the store's ``snapshot_lock``), which a fold's and
    a release's COMMIT hold too. ``attached``: False for a file read as an earlier layout (no
    state file)."""
    touch = "SELECT (SELECT count(*) FROM streamdi.meta)"
    if attached:
        touch += f", (SELECT count(*) FROM {STATE_META})"
    with lock:
        con.execute("BEGIN TRANSACTION")
        con.execute(touch).fetchall()


def staging_files(staging: Path) -> list[Path]:
    """The files of the staging file at ``staging`` beside its segment folder: the file, its
    WAL, the state file and its WAL (what a fresh start removes)."""
    state = state_path(staging)
    return [staging, Path(f"{staging}.wal"), state, Path(f"{state}.wal")]


def wal_bytes(staging: Path) -> int:
    """The size of the state file's write-ahead log (0 when there is none)."""
    try:
        return Path(f"{state_path(staging)}.wal").stat().st_size
    except FileNotFoundError:
        return 0
