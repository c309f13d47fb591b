"""The layout history of a staging file: which version of the dataflow produced which batches.

``streamdi.layouts`` holds one row per version: its number (1, 2, ...), the layout fingerprint and
the full digest of the dataflow (:class:`~etl_dataflows.evolution.shape.DataflowShape`), the shape
itself as JSON (so a later definition can be compared with it without the old code), when it took
over, and ``watermark``: the last batch committed before it took over. Batch ``b`` was produced by
the newest version whose watermark is below ``b`` (:func:`version_of`); each batch's ledger row
records it too (``streamdi.batches.version``).

A version is recorded when a new file is created, when a file written before the history existed
is opened by the dataflow that wrote it (as version 1), when only a step's logic or a default
changed (in place at open), and by an upgrade (:mod:`staging.upgrade`), in the transaction that
switches the layout.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import duckdb

from etl_dataflows.evolution.shape import DataflowShape
from staging.layout import SYSTEM, qualified

LAYOUTS = qualified(SYSTEM, "layouts")


@dataclass(frozen=True)
class LayoutVersion:
    """One row of the layout history (see the module docstring)."""

    version: int
    fingerprint: str
    digest: str
    shape: DataflowShape
    applied_at: datetime
    watermark: int

    def to_json(self) -> dict[str, object]:
        return {
            "version": self.version,
            "fingerprint": self.fingerprint,
            "digest": self.digest,
            "applied_at": self.applied_at.isoformat(),
            "watermark": self.watermark,
        }


def read_history(con: duckdb.DuckDBPyConnection) -> list[LayoutVersion]:
    """Every recorded version, oldest first (empty for a file without a history)."""
    try:
        rows = con.execute(
            f"SELECT version, fingerprint, digest, shape, applied_at, watermark FROM {LAYOUTS} "
            "ORDER BY version"
        ).fetchall()
    except duckdb.CatalogException:
        return []
    return [
        LayoutVersion(int(v), str(f), str(d), DataflowShape.loads(str(s)), a, int(w))
        for v, f, d, s, a, w in rows
    ]


def record_version(
    con: duckdb.DuckDBPyConnection, version: int, shape: DataflowShape, watermark: int
) -> LayoutVersion:
    """Insert version ``version`` in the caller's transaction."""
    now = datetime.now(UTC).replace(tzinfo=None)
    entry = LayoutVersion(version, shape.fingerprint(), shape.digest(), shape, now, watermark)
    con.execute(
        f"INSERT INTO {LAYOUTS} VALUES (?, ?, ?, ?, ?, ?)",
        [version, entry.fingerprint, entry.digest, shape.dumps(), now, watermark],
    )
    return entry


def version_of(history: Sequence[LayoutVersion], batch_id: int) -> int | None:
    """The version that produced batch ``batch_id`` (None before the first version)."""
    found: int | None = None
    for entry in history:
        if entry.watermark < batch_id:
            found = entry.version
    return found
