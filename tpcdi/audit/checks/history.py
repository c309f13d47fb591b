"""The history-tracking rules, checked on each of the five history-tracking dimensions
(clause 4.4.1.1: DimAccount, DimBroker, DimCompany, DimCustomer, DimSecurity).

* <T> distinct surrogate keys — 4.4.1.2 step 1: each version has its own surrogate key.
* <T> EndDate alignment — 4.4.1.3 step 1: an expired version ends on the EffectiveDate of
  another version of its natural key.
* <T> end of time — 4.4.1.2 step 4: each natural key has exactly one version ending 9999-12-31.
* <T> IsCurrent — 4.4.1.2 step 2, 4.4.1.3 step 1: IsCurrent exactly on the versions ending
  9999-12-31.
* <T> one current version — 4.4.1.3: exactly one IsCurrent version per natural key.
* <T> no overlapping versions — 4.4.1.3: the date ranges of a key's versions do not overlap.
* <T> consolidation — 4.4.1.5: at most one version per key per day, so none starts and ends on
  the same day (nor ends before it starts).
* <T> BatchID values — 4.4.2, 4.6.2/4.6.3/4.6.6: DimAccount and DimCustomer change in every
  batch 1..B; DimBroker, DimCompany and DimSecurity only in the historical load.
* <T> EffectiveDate window — 4.4.1.2 step 3, 4.5.x, 4.6.x: a version inserted by batch b
  becomes effective within the batch's FirstDay..LastDay.

Together, alignment + no overlap + consolidation + end of time make each key's versions one
unbroken chain from its first EffectiveDate to 9999-12-31.
"""

from __future__ import annotations

from tpcdi.audit.checks.base import (
    EOT,
    AuditContext,
    Check,
    Outcome,
    batch_ids,
    per_batch,
    per_batch_rows,
    violations,
    windows_sql,
)
from tpcdi.audit.schema import HISTORY_TABLES, HistoryTable

#: BatchIDs each history-tracking dimension holds (None: every batch of the run).
EXPECTED_BATCHES: dict[str, tuple[int, ...] | None] = {
    "DimAccount": None,
    "DimBroker": (1,),
    "DimCompany": (1,),
    "DimCustomer": None,
    "DimSecurity": (1,),
}


def _effective_window(h: HistoryTable) -> Check:
    def run(ctx: AuditContext) -> Outcome:
        found = per_batch_rows(
            ctx,
            "SELECT t.batchid, count(*), count(*) FILTER (WHERE t.effectivedate < w.firstday "
            f"OR t.effectivedate > w.lastday) FROM {{{h.table}}} t JOIN {windows_sql(ctx)} "
            "ON w.batchid = t.batchid GROUP BY t.batchid",
        )

        def judge(batch: int) -> Outcome:
            first, last = ctx.keys.window(batch)
            rows, outside = found.get(batch, (0, 0))
            return int(outside or 0) == 0, f"{int(outside or 0)} of {rows} outside {first}..{last}"

        return per_batch(ctx.batches, judge)

    return Check(f"{h.spec_name} EffectiveDate window", "4.4.1.2", run)


def history_checks(h: HistoryTable) -> tuple[Check, ...]:
    t, sk, nk, name = "{" + h.table + "}", h.surrogate_key, h.natural_key, h.spec_name
    return (
        violations(
            f"{name} distinct surrogate keys",
            "4.4.1.2",
            f"SELECT count(*) - count(DISTINCT {sk}) FROM {t}",
            "repeated surrogate keys",
        ),
        violations(
            f"{name} EndDate alignment",
            "4.4.1.3",
            f"SELECT count(*) FROM {t} a WHERE a.enddate <> {EOT} AND NOT EXISTS ("
            f"SELECT 1 FROM {t} b WHERE b.{nk} = a.{nk} AND b.{sk} <> a.{sk} "
            "AND b.effectivedate = a.enddate)",
            "expired versions whose EndDate is no other version's EffectiveDate",
        ),
        violations(
            f"{name} end of time",
            "4.4.1.2",
            f"SELECT count(*) FROM (SELECT {nk} FROM {t} GROUP BY {nk} "
            f"HAVING count(*) FILTER (WHERE enddate = {EOT}) <> 1) k",
            "natural keys without exactly one version ending 9999-12-31",
        ),
        violations(
            f"{name} IsCurrent",
            "4.4.1.2, 4.4.1.3",
            f"SELECT count(*) FROM {t} WHERE (iscurrent AND enddate <> {EOT}) "
            f"OR (NOT iscurrent AND enddate = {EOT})",
            "versions whose IsCurrent disagrees with EndDate = 9999-12-31",
        ),
        violations(
            f"{name} one current version",
            "4.4.1.3",
            f"SELECT count(*) FROM (SELECT {nk} FROM {t} GROUP BY {nk} "
            "HAVING count(*) FILTER (WHERE iscurrent) <> 1) k",
            "natural keys without exactly one current version",
        ),
        violations(
            f"{name} no overlapping versions",
            "4.4.1.3",
            f"SELECT count(*) FROM (SELECT enddate, lead(effectivedate) OVER ("
            f"PARTITION BY {nk} ORDER BY effectivedate, {sk}) AS next_start FROM {t}) v "
            "WHERE next_start < enddate",
            "versions overlapping the next version of their key",
        ),
        violations(
            f"{name} consolidation",
            "4.4.1.5",
            f"SELECT count(*) FROM {t} WHERE effectivedate >= enddate",
            "versions effective and ended the same day (or ended before they start)",
        ),
        batch_ids(f"{name} BatchID values", "4.4.2", h.table, EXPECTED_BATCHES[name]),
        _effective_window(h),
    )


CHECKS: tuple[Check, ...] = tuple(c for h in HISTORY_TABLES for c in history_checks(h))
