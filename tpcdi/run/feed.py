"""The incremental updates of a run, one batch directory (one day) at a time: DIGen's Batch2 and
Batch3, or a daily feed of any length (``streamdi tpcdi run --days N``).

Each day is an Incremental Update phase of clause 7.2.5 with its own BatchID ``b``; the pipeline
(:class:`~tpcdi.run.updates.UpdateStream`) runs through all of them. :meth:`DailyFeed.run_day`,
in order:

1. Wait for the day's slot: paced (``day_seconds``), day ``k`` is dropped ``(k - 1) *
   day_seconds`` after the first one (at once when the day before ran over: a late day); as fast
   as possible, at once.
2. A ``Phase started`` Status row in DImessages of every target.
3. Offer ``Batch<b>`` as the ``changes`` stream; wait until every event is committed to staging
   and every target has merged it, noting when each target got there (the day's freshness per
   warehouse) and where the pipeline's time went meanwhile.
4. The Prospect Status messages of clause 4.6.14.2; on the last day, the visibility writer's
   last Visibility_2 (before the last PCR); on a sampled day (6.), a Visibility_2 too, so the
   audit after it sees the visibility schedule of clause 7.3 kept up to this day's PCR.
5. Batch validation and the PCR (CT_b) in every target: the end of the phase.
6. On a sampled day (every ``audit_every`` days, never the last: the run's audit phase audits
   that one), a Visibility_1, the answer keys of batches 1..b and the audit through b in every
   target: the warehouse is correct after this day.
7. Note the staging file's size, the engine state's rows and the process tree's memory.

Clause 4.3.5.5 (a phase reads no later batch's directory) is why a day starts only after the
previous one's PCR: days never overlap, so each day's validation counts exactly its own data and
its time split is its own.
"""

from __future__ import annotations

import datetime
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tpcdi.incremental.changes import ChangesSource
from tpcdi.run import phases
from tpcdi.run.exceptions import UpdateFailed
from tpcdi.run.feed_record import DayRecord, FeedRecord
from tpcdi.run.memory import MemorySampler
from tpcdi.run.record import PhaseTimer, RunRecord
from tpcdi.run.updates import UpdateStream
from tpcdi.warehouse.warehouse import Target, Warehouse

logger = logging.getLogger(__name__)

JOB = "streamdi tpcdi run"


@dataclass(frozen=True)
class FeedOptions:
    """How the days are offered: ``day_seconds`` apart (None: as fast as possible), audited
    every ``audit_every`` days (0: only by the run's audit phase after the last day)."""

    day_seconds: float | None = None
    audit_every: int = 0


def phase_name(batch_id: int) -> str:
    """The run record's name of the phase of incremental batch ``batch_id``: ``incremental1``
    for Batch2, ``incremental2`` for Batch3, ... (clause 7.2.5's Update1, Update2, ...)."""
    return f"incremental{batch_id - 1}"


def audited_after(batch_id: int, last_batch: int, every: int) -> bool:
    """Whether a feed audited every ``every`` days audits after the day of ``batch_id``: days
    ``every``, ``2 * every``, ... (day = batch - 1), never the last (the run's audit phase follows
    it), never when ``every`` is 0."""
    return every > 0 and batch_id < last_batch and (batch_id - 1) % every == 0


def status_row(
    warehouse: Warehouse, batch_id: int, text: str, data: str, target: Target | None = None
) -> None:
    """A ``Status`` row of this job in DImessages of ``target`` (default every target), written
    once: a target that holds it already (a phase step run again after a crash) keeps the one it
    has. One statement per target, so the check and the insert cannot be split by a kill."""
    warehouse.execute(
        "INSERT INTO dimessages SELECT ?, ?, ?, ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM dimessages "
        "WHERE batchid = ? AND messagesource = ? AND messagetext = ? AND messagetype = 'Status')",
        [phases.now(), batch_id, JOB, text, "Status", data, batch_id, JOB, text],
        target,
    )


def prospects_before(warehouse: Warehouse, batch_id: int, target: Target | None = None) -> int:
    """Prospect's rows in ``target`` (default the first) when the phase of ``batch_id`` began:
    the count the previous phase's batch validation recorded (nothing changes Prospect between
    two phases), so a phase step run again after a crash finds the same number however far the
    update went."""
    rows = warehouse.query(
        "SELECT messagedata AS n FROM dimessages WHERE batchid = "
        f"{int(batch_id) - 1} AND messagetype = 'Validation' AND messagesource = 'Prospect' "
        "AND messagetext = 'Row count' LIMIT 1",
        target,
    ).to_pylist()
    value = rows[0]["n"] if rows else None
    if value is None:
        raise UpdateFailed(
            f"no batch validation of phase {batch_id - 1}: Prospect's rows before phase "
            f"{batch_id} are unknown"
        )
    return int(value)


def prospect_status(
    warehouse: Warehouse,
    batch_id: int,
    batch_date: datetime.date,
    before: int | None = None,
    target: Target | None = None,
) -> None:
    """The three Status messages of clause 4.6.14.2 in ``target`` (default every target),
    counted in that target's warehouse after the update (``before``: Prospect's rows before it;
    default :func:`prospects_before`), each written once per target (as :func:`status_row`)."""
    for chosen in [target] if target else warehouse.targets:
        _prospect_status(warehouse, batch_id, batch_date, before, chosen)


def _prospect_status(
    warehouse: Warehouse, batch_id: int, day: datetime.date, before: int | None, target: Target
) -> None:
    if before is None:
        before = prospects_before(warehouse, batch_id, target)
    sk = day.year * 10000 + day.month * 100 + day.day
    counts = warehouse.query(
        f"SELECT count(*) FILTER (WHERE sk_recorddateid = {sk}) AS source_rows, "
        f"count(*) FILTER (WHERE sk_updatedateid = {sk}) AS changed, count(*) AS total "
        "FROM prospect",
        target,
    ).to_pylist()[0]
    inserted = int(counts["total"]) - before
    updated = int(counts["changed"]) - inserted
    for text, value in (
        ("Source rows", counts["source_rows"]),
        ("Inserted rows", inserted),
        ("Updated rows", updated),
    ):
        warehouse.execute(
            "INSERT INTO dimessages SELECT ?, ?, ?, ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM "
            "dimessages WHERE batchid = ? AND messagesource = 'Prospect' AND messagetext = ? "
            "AND messagetype = 'Status')",
            [phases.now(), batch_id, "Prospect", text, "Status", str(value), batch_id, text],
            target,
        )


def _diff(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0) > 0}


class DailyFeed:
    """Runs the days of one run (see the module docstring) and records them in ``record``
    (a phase per day) and :attr:`feed` (the per-day measures)."""

    def __init__(
        self,
        data: Path,
        warehouse: Warehouse,
        record: RunRecord,
        visibility: phases.VisibilityWriter,
        *,
        last_batch: int,
        options: FeedOptions,
        memory: MemorySampler | None = None,
        bar: Any = None,
    ) -> None:
        self.data = Path(data)
        self.warehouse = warehouse
        self.record = record
        self.visibility = visibility
        self.last_batch = last_batch
        self.options = options
        self.memory = memory
        self.bar = bar
        self.feed = FeedRecord(list(warehouse.targets), options.day_seconds, options.audit_every)
        record.feed = self.feed
        self._start: float | None = None
        self._spent_mark: dict[str, float] | None = None
        self._spent_of: UpdateStream | None = None

    def sampled(self, batch_id: int) -> bool:
        """Whether step 6 audits the day of ``batch_id`` (:func:`audited_after`)."""
        return audited_after(batch_id, self.last_batch, self.options.audit_every)

    def _wait_for_slot(self, batch_id: int) -> float:
        # 1.
        now = time.perf_counter()
        if self._start is None:
            self._start = now
        pace = self.options.day_seconds
        if pace:
            due = self._start + (batch_id - 2) * pace
            if now < due:
                time.sleep(due - now)
            elif now - due > 0.05 and batch_id > 2:
                self.feed.late_days += 1
        return time.perf_counter()

    def run_day(self, batch_id: int, updates: UpdateStream) -> DayRecord:
        """Steps 1-7 of the module docstring for the day of ``batch_id``."""
        dropped = self._wait_for_slot(batch_id)
        assert self._start is not None
        name = phase_name(batch_id)
        timer = PhaseTimer(self.record, name, batch_id, self.bar, self.memory)
        # 2.
        status_row(self.warehouse, batch_id, "Phase started", name)
        timer.step("status")
        # 3.
        source = ChangesSource(self.data / f"Batch{batch_id}", batch_id)
        if self._spent_mark is None or self._spent_of is not updates:
            self._spent_mark, self._spent_of = updates.timings(), updates
        offered = updates.offer(source)
        timer.step("update")
        # 4.
        prospect_status(self.warehouse, batch_id, source.batch_date)
        if batch_id == self.last_batch:
            self.visibility.stop()  # the last Visibility_2 comes before the last PCR
        elif self.sampled(batch_id):
            self.visibility.write(2, batch_id)
        timer.step("prospect_status")
        # 5.
        phases.batch_complete(self.warehouse, batch_id)
        timer.step("validation")
        # the pipeline's time since the previous day's end: a target's merge is visible before
        # its thread has finished (a DuckDB checkpoint follows the commit), so what a day's
        # threads spend after its end counts in the next day, and nothing is lost
        mark = updates.timings()
        spent = _diff(mark, self._spent_mark)
        self._spent_mark = mark
        day = DayRecord(
            batch_id=batch_id,
            date=source.batch_date,
            dropped_at_s=dropped - self._start,
            events=offered.events,
            rejects=offered.rejects,
            collect_s=offered.collect_s,
            staged_s=offered.staged_s - offered.collect_s,
            freshness_s={t: v - offered.collect_s for t, v in offered.visible_s.items()},
            phase_s=time.perf_counter() - dropped,
            spent=spent,
        )
        # 6.
        if self.sampled(batch_id):
            day.audit = self._audit(batch_id)
            timer.step("audit")
        # 7.
        day.staging_bytes = updates.staging_bytes()
        day.state_rows = updates.state_rows()
        day.rss_bytes = self.memory.last if self.memory is not None else 0
        timer.step("sizes")
        phase = timer.phase
        phase.freshness_s = offered.freshness_s
        phase.steps.update(
            {
                "collect": offered.collect_s,
                "staged": offered.staged_s - offered.collect_s,
                "merged": offered.freshness_s - offered.staged_s,
            }
        )
        phase.rows = offered.events + offered.rejects
        phase.details = {
            "events": offered.events,
            "rejects": offered.rejects,
            "staged_through_batch": offered.staged_through,
            "freshness_s": {t: round(v, 4) for t, v in day.freshness_s.items()},
        }
        day.steps = {
            k: v for k, v in phase.steps.items() if k not in ("update", "staged", "merged")
        }
        self.record.batch_rows[batch_id] = phase.rows
        timer.done()
        self.feed.days.append(day)
        self.feed.seconds = time.perf_counter() - self._start
        logger.info(
            "day batch_id=%s events=%s freshness_s=%s phase_s=%.3f",
            batch_id,
            day.events,
            {t: round(v, 3) for t, v in day.freshness_s.items()},
            day.phase_s,
        )
        return day

    def _audit(self, batch_id: int) -> dict[str, dict[str, Any]]:
        """Step 6: the warehouse audited after the day of ``batch_id`` in every target."""
        started = time.perf_counter()
        phases.final_visibility(self.warehouse, batch_id)
        results = phases.audit_phase(self.warehouse, self.data, through=batch_id)
        seconds = time.perf_counter() - started
        out = {
            target: {
                "ok": result.ok,
                "fail": result.fail,
                "failed": [f"{c.name}: {c.detail}" for c in result.failed()],
                "seconds": round(result.seconds, 3),
            }
            for target, result in results.items()
        }
        logger.info(
            "audit after batch_id=%s %s in %.1f s",
            batch_id,
            {t: f"{a['ok']} OK {a['fail']} FAIL" for t, a in out.items()},
            seconds,
        )
        return out
