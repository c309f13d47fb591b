"""``streamdi streams repair``: give a stream whose event-time high mark is out of range a sane one.

Versions before event times were checked at the door stored any ``_ts`` as a stream's high mark
(``streamdi.streams.max_ts``), so one event with ``_ts = 2**62`` made every later event late, for
good. The repair, on the staging file of a stopped service (the running one holds the file):

1. Open the staging file for writing (:class:`~staging.exceptions.StagingInUse` while a service
   runs: stop it first).
2. Read the stream's high mark. In range (:mod:`ingest.eventtime` with the run's settings), it is
   left alone unless a value is asked for (``--to`` or ``--reset``).
3. The new high mark: ``--to`` (µs, must be in range), ``--reset`` (none: the next event starts
   it, as for a new stream), or by default the newest in-range event time of the stream's rows
   still staged (:func:`~staging.highmark.newest_staged_event_time`), none when there are none.
4. Unless ``--dry-run``: write it in one transaction, and say what changed.

The high mark decides only lateness; exactly-once rests on offsets and batch ids, which the repair
does not touch.
"""

from __future__ import annotations

from dataclasses import dataclass

from ingest.eventtime import EventTimeBounds, describe_us, now_us
from staging.highmark import newest_staged_event_time, set_high_mark
from staging.store import StagingStore
from streamdi.errors import ConfigurationError


@dataclass(frozen=True)
class RepairReport:
    """What the repair found and did; ``changed`` False when it wrote nothing."""

    stream: str
    before: int | None
    after: int | None
    why: str
    changed: bool
    dry_run: bool = False

    def text(self) -> str:
        before = "none" if self.before is None else describe_us(self.before)
        after = "none" if self.after is None else describe_us(self.after)
        if self.dry_run:
            return (
                f"stream {self.stream}: high mark {before} would become {after} ({self.why}); "
                "--dry-run: nothing written"
            )
        if not self.changed:
            return f"stream {self.stream}: high mark {before} left as it is: {self.why}"
        return f"stream {self.stream}: high mark {before} -> {after} ({self.why})"


def repair_high_mark(
    store: StagingStore,
    stream: str,
    bounds: EventTimeBounds,
    *,
    to_us: int | None = None,
    reset: bool = False,
    dry_run: bool = False,
) -> RepairReport:
    """Steps 2 to 4 of the module docstring on an open, writable ``store``."""
    if stream not in store.flow.sources:
        raise ConfigurationError(
            [
                (
                    "--stream",
                    f"{stream!r} is not a source of {store.flow.name!r}: "
                    f"{list(store.flow.sources)}",
                )
            ]
        )
    # 2.
    progress = store.streams().get(stream)
    if progress is None:
        return RepairReport(stream, None, None, "no batch of the stream was applied yet", False)
    before = progress.max_ts
    now = now_us()
    low, high = bounds.lower_us(), bounds.upper_us(now)
    in_range = before is None or low <= before <= high
    # 3.
    if to_us is not None:
        if not low <= to_us <= high:
            raise ConfigurationError(
                [
                    (
                        "--to",
                        f"{describe_us(to_us)} is out of range ({describe_us(low)} .. "
                        f"{describe_us(high)})",
                    )
                ]
            )
        after, why = to_us, "as asked (--to)"
    elif reset:
        after, why = None, "reset (--reset): the next event starts it"
    elif in_range:
        return RepairReport(stream, before, before, "it is in range", False)
    else:
        staged = newest_staged_event_time(store, stream, low, high)
        if staged.micros is None:
            after, why = None, "out of range; no staged row holds an event time: reset"
        else:
            after = staged.micros
            why = f"out of range; the newest in-range event time staged in {staged.relation}"
    if after == before:
        return RepairReport(stream, before, after, "it already has that value", False)
    # 4.
    if dry_run:
        return RepairReport(stream, before, after, why, False, dry_run=True)
    set_high_mark(store, stream, after)
    return RepairReport(stream, before, after, why, True)
