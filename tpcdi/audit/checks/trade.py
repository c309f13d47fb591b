"""DimTrade (clauses 4.5.8 and 4.6.7).

* row count — 4.5.8.1, 4.6.7.1: after batch b, the Validation count = T_NEW of batches 1..b
  (a T_ID not seen before inserts a row; a known one updates it);
* distinct keys: one row per TradeID; BatchID values 1..B (every batch of the run);
* canceled trades = T_CanceledTrades summed over the batches;
* commission / fee alerts per batch = T_InvalidCommision / T_InvalidCharge (4.5.8.3-4, 4.6.7.3-4);
* SK_BrokerID, SK_CompanyID, SK_SecurityID, SK_CustomerID, SK_AccountID — 4.5.8.2, 4.6.7.2:
  each references the dimension version current when the trade was first seen, i.e. one whose
  EffectiveDate..EndDate contains the trade's create date (its close date if it has none);
* account keys / security keys — 4.5.8.2: SK_CustomerID and SK_BrokerID are those of the
  referenced account version, SK_CompanyID that of the referenced security version;
* Status / Type are StatusType / TradeType names; date and time keys exist in DimDate / DimTime;
* closed trades — 4.5.8.2, 4.6.7.2: a trade has a close date and time exactly when it is
  Completed or Canceled (CMPT/CNCL set them);
* date window — a row of batch b was last changed by that batch: its close date lies in the
  batch's FirstDay..LastDay and not before its create date; an open trade was created by the
  batch (on or before LastDay, not before FirstDay), except a limit order, which may wait in the
  book since an earlier batch (not before Batch 1's FirstDay).

On BatchID: 4.5.8.2 says it is set "at the time the record is initially created", while the
official audit's date check expects the batch of the row's latest change (a batch-1 limit order
completed in batch 2 must carry BatchID 2). This audit follows the official reading, so a
warehouse that passes it passes the official query.
"""

from __future__ import annotations

from tpcdi.audit.checks.base import (
    AuditContext,
    Check,
    Outcome,
    batch_ids,
    compare,
    per_batch,
    per_batch_rows,
    violations,
    windows_sql,
)
from tpcdi.audit.checks.dimensions import alert_count

_TRADE_DATE = (
    "{dimtrade} f LEFT JOIN {dimdate} d "
    "ON d.sk_dateid = coalesce(f.sk_createdateid, f.sk_closedateid)"
)


def _at_trade_date(
    label: str, column: str, dimension: str, key: str, *, nullable: bool = False
) -> Check:
    guard = f"f.{column} IS NOT NULL AND " if nullable else ""
    return violations(
        f"DimTrade {label}",
        "4.5.8.2, 4.6.7.2",
        f"SELECT count(*) FROM {_TRADE_DATE} WHERE {guard}NOT EXISTS (SELECT 1 FROM "
        f"{{{dimension}}} x WHERE x.{key} = f.{column} AND x.effectivedate <= d.datevalue "
        "AND d.datevalue <= x.enddate)",
        f"trades whose {column} is no {dimension} version current at their create date",
    )


def _row_count(ctx: AuditContext) -> Outcome:
    def judge(batch: int) -> Outcome:
        recorded = ctx.validations.count(batch, "DimTrade")
        return compare(recorded, "=", ctx.keys.upto("DimTrade", "T_NEW", batch), "(T_NEW up to b)")

    return per_batch(ctx.batches, judge)


def _canceled(ctx: AuditContext) -> Outcome:
    found = ctx.number("SELECT count(*) FROM {dimtrade} WHERE status = 'Canceled'")
    return compare(found, "=", ctx.keys.total("DimTrade", "T_CanceledTrades"), "(T_CanceledTrades)")


_WINDOW_SQL = (
    "SELECT f.batchid, count(*), count(*) FILTER (WHERE "
    "(f.sk_closedateid IS NOT NULL AND (xd.datevalue IS NULL OR xd.datevalue < w.firstday "
    "OR xd.datevalue > w.lastday OR xd.datevalue < cd.datevalue)) "
    "OR (f.sk_closedateid IS NULL AND (cd.datevalue IS NULL OR cd.datevalue > w.lastday "
    "OR cd.datevalue < CASE WHEN f.type LIKE 'Limit%' THEN CAST(? AS DATE) "
    "ELSE w.firstday END))) "
    "FROM {{dimtrade}} f JOIN {windows} ON w.batchid = f.batchid "
    "LEFT JOIN {{dimdate}} cd ON cd.sk_dateid = f.sk_createdateid "
    "LEFT JOIN {{dimdate}} xd ON xd.sk_dateid = f.sk_closedateid GROUP BY f.batchid"
)


def _date_window(ctx: AuditContext) -> Outcome:
    very_first = ctx.keys.window(1)[0]
    found = per_batch_rows(ctx, _WINDOW_SQL.format(windows=windows_sql(ctx)), [very_first])

    def judge(batch: int) -> Outcome:
        first, last = ctx.keys.window(batch)
        rows, bad = found.get(batch, (0, 0))
        bad = int(bad or 0)
        return bad == 0, f"{bad} of {rows} with dates outside {first}..{last}"

    return per_batch(ctx.batches, judge)


CHECKS: tuple[Check, ...] = (
    Check("DimTrade row count", "4.5.8.1, 4.6.7.1", _row_count),
    violations(
        "DimTrade distinct keys",
        "4.5.8.1",
        "SELECT count(*) - count(DISTINCT tradeid) FROM {dimtrade}",
        "repeated TradeIDs",
    ),
    batch_ids("DimTrade BatchID values", "4.4.2", "dimtrade"),
    Check("DimTrade canceled trades", "4.5.8.2, 4.6.7.2", _canceled),
    alert_count(
        "DimTrade commission alerts",
        "4.5.8.3, 4.6.7.3",
        "Invalid trade commission",
        (("DimTrade", "T_InvalidCommision"),),
    ),
    alert_count(
        "DimTrade fee alerts",
        "4.5.8.4, 4.6.7.4",
        "Invalid trade fee",
        (("DimTrade", "T_InvalidCharge"),),
    ),
    _at_trade_date("SK_BrokerID", "sk_brokerid", "dimbroker", "sk_brokerid", nullable=True),
    _at_trade_date("SK_CompanyID", "sk_companyid", "dimcompany", "sk_companyid"),
    _at_trade_date("SK_SecurityID", "sk_securityid", "dimsecurity", "sk_securityid"),
    _at_trade_date("SK_CustomerID", "sk_customerid", "dimcustomer", "sk_customerid"),
    _at_trade_date("SK_AccountID", "sk_accountid", "dimaccount", "sk_accountid"),
    violations(
        "DimTrade account keys",
        "4.5.8.2, 4.6.7.2",
        "SELECT count(*) FROM {dimtrade} f JOIN {dimaccount} a ON a.sk_accountid = f.sk_accountid "
        "WHERE a.sk_customerid <> f.sk_customerid OR a.sk_brokerid IS DISTINCT FROM f.sk_brokerid",
        "trades whose SK_CustomerID or SK_BrokerID is not their account version's",
    ),
    violations(
        "DimTrade security keys",
        "4.5.8.2, 4.6.7.2",
        "SELECT count(*) FROM {dimtrade} f JOIN {dimsecurity} s "
        "ON s.sk_securityid = f.sk_securityid WHERE s.sk_companyid <> f.sk_companyid",
        "trades whose SK_CompanyID is not their security version's",
    ),
    violations(
        "DimTrade Status",
        "4.5.8.2, 4.6.7.2",
        "SELECT count(*) FROM {dimtrade} f WHERE NOT EXISTS "
        "(SELECT 1 FROM {statustype} s WHERE s.st_name = f.status)",
        "trades whose Status is no StatusType name",
    ),
    violations(
        "DimTrade Type",
        "4.5.8.2, 4.6.7.2",
        "SELECT count(*) FROM {dimtrade} f WHERE NOT EXISTS "
        "(SELECT 1 FROM {tradetype} t WHERE t.tt_name = f.type)",
        "trades whose Type is no TradeType name",
    ),
    violations(
        "DimTrade date and time keys",
        "4.5.8.2, 4.6.7.2",
        "SELECT count(*) FROM {dimtrade} f WHERE "
        + " OR ".join(
            f"(f.sk_{kind}{unit}id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM {{dim{unit}}} x "
            f"WHERE x.sk_{unit}id = f.sk_{kind}{unit}id))"
            for kind in ("create", "close")
            for unit in ("date", "time")
        ),
        "trades with a date or time key missing from DimDate/DimTime",
    ),
    violations(
        "DimTrade closed trades",
        "4.5.8.2, 4.6.7.2",
        "SELECT count(*) FROM {dimtrade} WHERE "
        "(status IN ('Completed', 'Canceled')) <> (sk_closedateid IS NOT NULL) "
        "OR (sk_closedateid IS NULL) <> (sk_closetimeid IS NULL)",
        "trades whose close date/time disagree with a Completed/Canceled status",
    ),
    Check("DimTrade date window", "4.5.8.2, 4.6.7.2, 4.4.2", _date_window),
)
