"""Checks of the Audit table, of DImessages (phases, batch validation, alerts) and of the data
visibility rows.

B is the run's last batch: 3 for DIGen's two incremental updates, 1 + N for a daily feed of N days.

* Audit table batches / data sets / batch windows — clause 7.2.6.2, 2.2.2.20: answer keys for
  batches 1..B, from all 13 data sets DIGen writes, with each batch's FirstDay..LastDay, in order.
* DImessages batches — 4.4.2: messages of BatchIDs 0..B and no other.
* DImessages validation rows — 7.4, 7.2.3.5, 7.2.4.2, 7.2.5.3: each phase 0..B wrote the 24
  Validation rows, each (source, text) once.
* DImessages phase complete records — 7.2.3.5, 7.5.1: one PCR per phase 0..B.
* DImessages phase order — 7.2.2, 7.2.x: CT0 < CT1 < ... < CTB, and each phase's validation ran
  after the previous phase completed and before its own PCR.
* DImessages initial condition — 3.4.9.1, 7.2.3: the warehouse was empty at batch 0.
* DImessages alert messages — 4.5.3.3, 4.5.4.4-5, 4.5.8.3-4, 4.5.11.3, 4.6.x: each Alert text
  of the specification has its MessageSource and MessageData shape.
* Batch row counts non-decreasing — 3.4.7.2, 4.4.1.4: nothing is deleted between phases.
* Batch joined row counts — 3.2, 4.4.1: every fact row joins every dimension row it references.
* Validation matches the warehouse — 7.2.6.4: the last phase's counts are the warehouse's now.
* Data visibility row counts / joined row counts / schedule — 7.3.1-7.3.6, 7.2.6.5.
"""

from __future__ import annotations

import datetime
import itertools

from tpcdi.audit.checks.base import (
    AuditContext,
    Check,
    MissingInput,
    Outcome,
    batch_list,
)
from tpcdi.audit.schema import VALIDATION_TABLES
from tpcdi.audit.validation import (
    JOINED_FACTS,
    ROW_COUNT,
    ROW_COUNT_JOINED,
    VALIDATION_PAIRS,
    count_validation,
)

#: The data sets of DIGen's answer keys (every ``*_audit.csv`` names one of these).
AUDIT_DATASETS: tuple[str, ...] = (
    "Batch",
    "DimAccount",
    "DimBroker",
    "DimCompany",
    "DimCustomer",
    "DimSecurity",
    "DimTrade",
    "FactHoldings",
    "FactMarketHistory",
    "FactWatches",
    "Financial",
    "Generator",
    "Prospect",
)

#: Alert texts of the specification: (MessageText, MessageSource, MessageData pattern).
ALERTS: tuple[tuple[str, str, str], ...] = (
    ("Invalid SPRating", "DimCompany", "CO_ID = %, CO_SP_RATE = %"),
    ("Invalid customer tier", "DimCustomer", "C_ID = %, C_TIER = %"),
    ("DOB out of range", "DimCustomer", "C_ID = %, C_DOB = %"),
    ("Invalid trade commission", "DimTrade", "T_ID = %, T_COMM = %"),
    ("Invalid trade fee", "DimTrade", "T_ID = %, T_CHRG = %"),
    ("No earnings for company", "FactMarketHistory", "DM_S_SYMB = %"),
)

VISIBILITY_MAX_GAP_S = 300.0


def _audit_batches(ctx: AuditContext) -> Outcome:
    found = sorted(int(r[0]) for r in ctx.rows("SELECT DISTINCT batchid FROM {audit}") if r[0])
    wanted = list(ctx.batches)
    return found == wanted, f"BatchIDs {batch_list(found)} (expected {batch_list(wanted)})"


def _audit_datasets(ctx: AuditContext) -> Outcome:
    present = ctx.keys.datasets
    missing = [d for d in AUDIT_DATASETS if d not in present]
    found = len(AUDIT_DATASETS) - len(missing)
    detail = f"{found} of {len(AUDIT_DATASETS)} data sets"
    return not missing, detail + (f"; missing: {', '.join(missing)}" if missing else "")


def _audit_windows(ctx: AuditContext) -> Outcome:
    parts: list[str] = []
    ok = True
    previous: datetime.date | None = None
    for batch in ctx.batches:
        try:
            first, last = ctx.keys.window(batch)
        except MissingInput as exc:
            ok = False
            parts.append(str(exc))
            continue
        good = first <= last and (previous is None or previous < first)
        ok = ok and good
        if len(ctx.batches) <= 3 or not good:
            parts.append(f"batch {batch}: {first}..{last}" + ("" if good else " (out of order)"))
        previous = last
    if len(ctx.batches) > 3 and ok:
        first_day, _ = ctx.keys.window(1)
        parts.append(f"batches 1..{ctx.last} in order, {first_day}..{previous}")
    return ok, "; ".join(parts)


def _message_batches(ctx: AuditContext) -> Outcome:
    found = sorted(int(r[0]) for r in ctx.rows("SELECT DISTINCT batchid FROM {dimessages}"))
    wanted = list(ctx.phases)
    return found == wanted, f"BatchIDs {batch_list(found)} (expected {batch_list(wanted)})"


def _validation_rows(ctx: AuditContext) -> Outcome:
    data = ctx.validations.data
    parts: list[str] = []
    ok = True
    many = len(ctx.phases) > 4
    for batch in ctx.phases:
        pairs = {(s, t): len(v) for (b, s, t), v in data.items() if b == batch}
        rows = sum(pairs.values())
        missing = sorted(VALIDATION_PAIRS - set(pairs))
        repeated = sorted(p for p, n in pairs.items() if n > 1 and p in VALIDATION_PAIRS)
        extra = sorted(set(pairs) - VALIDATION_PAIRS)
        good = rows == len(VALIDATION_PAIRS) and not missing and not repeated and not extra
        ok = ok and good
        text = f"batch {batch}: {rows}"
        for label, items in (("missing", missing), ("repeated", repeated), ("unknown", extra)):
            if items:
                text += f" ({label} {', '.join(f'{s}/{t}' for s, t in items)})"
        if not many or not good:
            parts.append(text)
    if many and ok:
        parts.append(f"batches 0..{ctx.last}: {len(VALIDATION_PAIRS)} each")
    return ok, "; ".join(parts[:8]) + f" (expected {len(VALIDATION_PAIRS)} each)"


def _pcr_rows(ctx: AuditContext) -> Outcome:
    counts = {
        int(b): int(n)
        for b, n in ctx.rows(
            "SELECT batchid, count(*) FROM {dimessages} WHERE messagetype = 'PCR' GROUP BY batchid"
        )
    }
    phases = ctx.phases
    ok = all(counts.get(b, 0) == 1 for b in phases) and set(counts) <= set(phases)
    listed = sorted(set(phases) | set(counts))
    if len(listed) > 4:
        listed = [b for b in listed if counts.get(b, 0) != 1 or b not in phases]
    shown = ", ".join(f"batch {b}: {counts.get(b, 0)}" for b in listed) or "all 1"
    return ok, f"PCRs {shown} (expected 1 for each of batches 0..{ctx.last})"


def _phase_order(ctx: AuditContext) -> Outcome:
    pcr = {
        int(b): t
        for b, t in ctx.rows(
            "SELECT batchid, min(messagedateandtime) FROM {dimessages} "
            "WHERE messagetype = 'PCR' GROUP BY batchid"
        )
    }
    validation = {
        int(b): (lo, hi)
        for b, lo, hi in ctx.rows(
            "SELECT batchid, min(messagedateandtime), max(messagedateandtime) FROM {dimessages} "
            "WHERE messagetype = 'Validation' GROUP BY batchid"
        )
    }
    problems: list[str] = []
    known = [b for b in ctx.phases if b in pcr]
    for before, after in itertools.pairwise(known):
        if not pcr[before] < pcr[after]:
            problems.append(f"CT{after} {pcr[after]} not after CT{before} {pcr[before]}")
    for batch, (lo, hi) in sorted(validation.items()):
        if batch in pcr and hi > pcr[batch]:
            problems.append(f"batch {batch} validation at {hi} after its PCR {pcr[batch]}")
        if batch - 1 in pcr and lo < pcr[batch - 1]:
            problems.append(f"batch {batch} validation at {lo} before CT{batch - 1}")
    shown = known if len(known) <= 4 else [*known[:2], known[-1]]
    stamps = ", ".join(f"CT{b} {pcr[b]}" for b in shown)
    if problems:
        return False, "; ".join(problems[:8])
    return True, f"{stamps}; every validation between the previous PCR and its own"


def _initial_condition(ctx: AuditContext) -> Outcome:
    nonzero = [
        f"{s}/{t}={v[0]}"
        for (b, s, t), v in sorted(ctx.validations.data.items())
        if b == 0 and any(str(x).strip() != "0" for x in v)
    ]
    detail = f"{len(nonzero)} non-zero Validation rows at batch 0 (expected 0)"
    return not nonzero, detail + (f": {', '.join(nonzero[:6])}" if nonzero else "")


def _alert_messages(ctx: AuditContext) -> Outcome:
    parts: list[str] = []
    bad_total = 0
    total = 0
    for text, source, pattern in ALERTS:
        n, bad = ctx.rows(
            "SELECT count(*), count(*) FILTER (WHERE messagesource IS DISTINCT FROM ? "
            "OR messagedata IS NULL OR messagedata NOT LIKE ?) "
            "FROM {dimessages} WHERE messagetype = 'Alert' AND messagetext = ?",
            [source, pattern, text],
        )[0]
        total += int(n)
        bad_total += int(bad or 0)
        if bad:
            parts.append(f"{bad} of {n} {text!r} alerts not from {source} as '{pattern}'")
    if bad_total:
        return False, "; ".join(parts)
    return True, f"{total} alerts, all with the specified source and data (0 malformed)"


def _non_decreasing(ctx: AuditContext) -> Outcome:
    drops: list[str] = []
    compared = 0
    for source in VALIDATION_TABLES:
        for batch in ctx.batches:
            try:
                now = ctx.validations.count(batch, source)
                before = ctx.validations.count(batch - 1, source)
            except MissingInput:
                continue
            compared += 1
            if now < before:
                drops.append(f"{source} batch {batch} {now} < batch {batch - 1} {before}")
    if drops:
        return False, "; ".join(drops[:8])
    return True, f"{compared} successive row counts compared, none decreased"


def _joined_counts(ctx: AuditContext) -> Outcome:
    problems: list[str] = []
    compared = 0
    for source in JOINED_FACTS:
        for batch in ctx.phases:
            try:
                rows = ctx.validations.count(batch, source, ROW_COUNT)
                joined = ctx.validations.count(batch, source, ROW_COUNT_JOINED)
            except MissingInput:
                continue
            compared += 1
            if rows != joined:
                problems.append(f"{source} batch {batch}: {joined} joined != {rows} rows")
    if problems:
        return False, "; ".join(problems[:8])
    return True, f"{compared} fact counts equal to their joined counts"


def _matches_warehouse(ctx: AuditContext) -> Outcome:
    batches = ctx.validations.batches()
    if not batches:
        return False, "no Validation rows"
    last = batches[-1]
    problems: list[str] = []
    for row in count_validation(ctx.conn):
        try:
            recorded = ctx.validations.count(last, row.source, row.text)
        except MissingInput as exc:
            problems.append(str(exc))
            continue
        if recorded != row.count:
            problems.append(f"{row.source}/{row.text}: recorded {recorded}, now {row.count}")
    if problems:
        return False, f"batch {last}: " + "; ".join(problems)
    return True, f"batch {last}: all 24 recorded counts equal the warehouse's now"


def _visibility_counts(ctx: AuditContext) -> Outcome:
    rows = ctx.rows(
        "SELECT messagesource, count(*), count(*) FILTER (WHERE prev > cur) FROM ("
        " SELECT messagesource, CAST(messagedata AS BIGINT) AS cur,"
        "  lag(CAST(messagedata AS BIGINT)) OVER (PARTITION BY messagesource"
        "   ORDER BY messagedateandtime) AS prev"
        " FROM {dimessages} WHERE messagetype IN ('Visibility_1', 'Visibility_2')"
        "  AND messagetext = 'Row count') v GROUP BY messagesource"
    )
    if not rows:
        return False, "no Visibility_1/Visibility_2 row counts in DImessages"
    drops = [f"{s}: {int(d)} decreases" for s, _, d in sorted(rows) if d]
    if drops:
        return False, "; ".join(drops)
    samples = sum(int(n) for _, n, _ in rows)
    return True, f"{samples} row counts of {len(rows)} tables, none decreased over time"


def _visibility_joined(ctx: AuditContext) -> Outcome:
    rows = ctx.rows(
        "SELECT r.messagesource, count(*), count(*) FILTER (WHERE j.messagedata IS NULL "
        "OR CAST(j.messagedata AS BIGINT) <> CAST(r.messagedata AS BIGINT)) "
        "FROM {dimessages} r LEFT JOIN {dimessages} j ON j.messagetype = 'Visibility_1' "
        "AND j.messagetext = 'Row count joined' AND j.messagesource = r.messagesource "
        "AND j.messagedateandtime = r.messagedateandtime "
        "WHERE r.messagetype = 'Visibility_1' AND r.messagetext = 'Row count' "
        f"AND r.messagesource IN ({', '.join(repr(s) for s in JOINED_FACTS)}) "
        "GROUP BY r.messagesource"
    )
    if not rows:
        return False, "no Visibility_1 fact row counts in DImessages"
    bad = [f"{s}: {int(d)} of {n} differ" for s, n, d in sorted(rows) if d]
    if bad:
        return False, "; ".join(bad)
    return True, f"{sum(int(n) for _, n, _ in rows)} Visibility_1 fact counts equal their joins"


def _seconds(a: datetime.datetime, b: datetime.datetime) -> float:
    return (b - a).total_seconds()


def _visibility_schedule(ctx: AuditContext) -> Outcome:
    pcr = {
        int(b): t
        for b, t in ctx.rows(
            "SELECT batchid, min(messagedateandtime) FROM {dimessages} "
            "WHERE messagetype = 'PCR' GROUP BY batchid"
        )
    }
    last = ctx.last
    if 1 not in pcr or last not in pcr:
        return False, f"no PCR for batch 1 or {last}: the update phases cannot be located"
    ct1, ct3 = pcr[1], pcr[last]
    times: dict[str, list[datetime.datetime]] = {"Visibility_1": [], "Visibility_2": []}
    for kind, stamp in ctx.rows(
        "SELECT DISTINCT messagetype, messagedateandtime FROM {dimessages} "
        "WHERE messagetype IN ('Visibility_1', 'Visibility_2') ORDER BY 2"
    ):
        times[str(kind)].append(stamp)
    v1 = [t for t in times["Visibility_1"] if ct1 <= t]
    first_v1 = next((t for t in v1 if t <= ct3), None)
    problems: list[str] = []
    facts: list[str] = []
    if first_v1 is None:
        return False, "no Visibility_1 during the incremental updates (7.3.3)"
    start = _seconds(ct1, first_v1)
    facts.append(f"first Visibility_1 {start:.1f} s after CT1")
    if start > VISIBILITY_MAX_GAP_S:
        problems.append(f"first Visibility_1 {start:.1f} s after CT1 (> 300)")
    v2 = [t for t in times["Visibility_2"] if first_v1 <= t <= ct3]
    if not v2:
        problems.append(f"no Visibility_2 between the first Visibility_1 and CT{last} (7.3.4)")
    else:
        marks = [first_v1, *v2]
        gaps = [_seconds(a, b) for a, b in itertools.pairwise(marks)]
        tail = _seconds(v2[-1], ct3)
        facts.append(f"{len(v2)} Visibility_2, largest gap {max(gaps):.1f} s")
        facts.append(f"last one {tail:.1f} s before CT{last}")
        if max(gaps) > VISIBILITY_MAX_GAP_S:
            problems.append(f"Visibility gap {max(gaps):.1f} s (> 300, 7.3.4-7.3.5)")
        if tail > VISIBILITY_MAX_GAP_S:
            problems.append(f"last Visibility_2 {tail:.1f} s before CT{last} (> 300, 7.3.6)")
    if not any(t >= ct3 for t in times["Visibility_1"]):
        problems.append("no final Visibility_1 at the start of the audit (7.2.6.5)")
    else:
        facts.append(f"final Visibility_1 after CT{last}")
    if problems:
        return False, "; ".join(problems)
    return True, "; ".join(facts)


CHECKS: tuple[Check, ...] = (
    Check("Audit table batches", "7.2.6.2", _audit_batches),
    Check("Audit table data sets", "2.2.2.20", _audit_datasets),
    Check("Audit batch windows", "2.2.2.20", _audit_windows),
    Check("DImessages batches", "4.4.2", _message_batches),
    Check("DImessages validation rows", "7.4, 7.2.3.5, 7.2.4.2, 7.2.5.3", _validation_rows),
    Check("DImessages phase complete records", "7.2.3.5, 7.5.1", _pcr_rows),
    Check("DImessages phase order", "7.2.2", _phase_order),
    Check("DImessages initial condition", "3.4.9.1, 7.2.3", _initial_condition),
    Check("DImessages alert messages", "4.5.3.3, 4.5.4.4, 4.5.8.3, 4.5.11.3", _alert_messages),
    Check("Batch row counts non-decreasing", "3.4.7.2, 4.4.1.4", _non_decreasing),
    Check("Batch joined row counts", "3.2, 4.4.1", _joined_counts),
    Check("Validation matches the warehouse", "7.2.6.4", _matches_warehouse),
    Check("Data visibility row counts", "3.4.7.2, 7.3.1", _visibility_counts),
    Check("Data visibility joined row counts", "7.3.1", _visibility_joined),
    Check("Data visibility schedule", "7.3.3-7.3.6, 7.2.6.5", _visibility_schedule),
)
