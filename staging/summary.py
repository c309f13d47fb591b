"""What a staging file holds, read without its dataflow: the summary ``streamdi status`` prints
when no service runs (a running service holds the file open for writing and answers ``GET
/status`` instead).

The file is opened read-only for the duration of one call; a file that another process is
writing cannot be opened: :class:`~staging.exceptions.StagingUnavailable`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from staging.exceptions import StagingUnavailable
from staging.segments import staging_disk_bytes


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.replace(tzinfo=UTC).isoformat()


def staging_summary(path: Path) -> dict[str, Any] | None:
    """The dataflow, the batch ledger's totals, per stream its last collector batch, per
    migration target its acknowledged batch, and the file's size; None when ``path`` does not
    exist."""
    import duckdb

    if not path.exists():
        return None
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error as exc:
        raise StagingUnavailable(f"cannot read {path}: {exc}") from exc
    try:
        meta = dict(con.execute("SELECT key, value FROM streamdi.meta").fetchall())
        batches, events, dead, last_commit = con.execute(
            "SELECT count(*), coalesce(sum(events), 0), coalesce(sum(dead_letters), 0), "
            "max(committed_at) FROM streamdi.batches"
        ).fetchall()[0]
        watermark = con.execute(
            "SELECT coalesce(max(batch_id), 0) FROM streamdi.batches"
        ).fetchall()[0][0]
        streams = {
            str(s): {"last_batch": int(b), "events": int(e)}
            for s, b, e in con.execute(
                "SELECT stream, last_batch, events FROM streamdi.streams ORDER BY stream"
            ).fetchall()
        }
        acks = {
            str(t): {"acknowledged": int(b), "lag_batches": max(0, int(watermark) - int(b))}
            for t, b in con.execute(
                "SELECT target, batch_id FROM streamdi.migration_acks ORDER BY target"
            ).fetchall()
        }
    except duckdb.Error as exc:
        raise StagingUnavailable(f"{path} is not a streamdi staging file: {exc}") from exc
    finally:
        con.close()
    size = staging_disk_bytes(Path(path))
    return {
        "path": str(path),
        "dataflow": meta.get("dataflow"),
        "watermark": int(watermark),
        "released_through": int(meta.get("released_through", 0) or 0),
        "batches": int(batches),
        "events": int(events),
        "dead_letters": int(dead),
        "last_commit": _iso(last_commit),
        "bytes": size,
        "streams": streams,
        "migration": acks,
    }
