"""A stream's event-time high mark in the staging file: where its newest staged events are, and
setting it (the repair of a high mark that an unchecked event time poisoned).

The high mark (``streamdi.streams.max_ts``) only decides which later events are late; it is not
part of what makes a batch apply exactly once (offsets and batch ids are), so changing it between
runs loses and duplicates nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from staging.layout import DELTA, OUTPUTS, SYSTEM, q, qualified
from staging.store import StagingStore


@dataclass(frozen=True)
class StagedEventTime:
    """The newest event time (µs) of a stream's events still staged in a sink's outputs or a
    delta log (``relation``), within a range; None when no staged row holds one."""

    micros: int | None
    relation: str | None


def newest_staged_event_time(
    store: StagingStore, stream: str, low_us: int, high_us: int
) -> StagedEventTime:
    """The newest ``_ts`` between ``low_us`` and ``high_us`` of the rows ``stream``'s events left
    in staging: every output or delta-log table with ``_ts`` and ``_src`` columns (``_src`` is
    the stream's index among the dataflow's sources). Released rows (migrated and dropped from
    staging) do not count."""
    sources = list(store.flow.sources)
    if stream not in sources:
        return StagedEventTime(None, None)
    src = sources.index(stream)
    relations = store.query(
        "SELECT table_schema, table_name FROM information_schema.columns "
        "WHERE table_schema IN (?, ?) AND column_name IN ('_ts', '_src') "
        "GROUP BY table_schema, table_name HAVING count(*) = 2 ORDER BY 1, 2",
        [OUTPUTS, DELTA],
    ).to_pylist()
    best = StagedEventTime(None, None)
    for r in relations:
        name = qualified(r["table_schema"], r["table_name"])
        value = (
            store.query(
                f"SELECT max({q('_ts')}) AS m FROM {name} WHERE {q('_src')} = ? "
                f"AND {q('_ts')} BETWEEN ? AND ?",
                [src, low_us, high_us],
            )
            .column("m")[0]
            .as_py()
        )
        if value is not None and (best.micros is None or value > best.micros):
            best = StagedEventTime(int(value), f"{r['table_schema']}.{r['table_name']}")
    return best


def set_high_mark(store: StagingStore, stream: str, micros: int | None) -> bool:
    """Set ``stream``'s high mark (None: no high mark; the next event starts it) in one
    transaction; False when the file has no progress row for the stream."""
    con = store.cursor()
    try:
        with store.write_lock:
            con.execute("BEGIN TRANSACTION")
            found = con.execute(
                f"SELECT count(*) FROM {qualified(SYSTEM, 'streams')} WHERE stream = ?", [stream]
            ).fetchall()[0][0]
            if found:
                con.execute(
                    f"UPDATE {qualified(SYSTEM, 'streams')} SET max_ts = ? WHERE stream = ?",
                    [micros, stream],
                )
            con.execute("COMMIT")
    finally:
        con.close()
    return bool(found)
