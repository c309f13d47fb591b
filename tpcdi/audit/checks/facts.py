"""The fact tables: FactCashBalances, FactHoldings, FactMarketHistory, FactWatches.

Common to all: BatchID values 1..B, every batch of the run (4.4.2); each surrogate key references
a dimension version valid on the row's date (EffectiveDate <= date <= EndDate; for FactHoldings
only EffectiveDate <= date, since a holding keeps the keys of its trade, fixed when the trade was
first seen); rows of batch b carry dates within the batch's FirstDay..LastDay.

FactCashBalances (4.5.9, 4.6.8)
* row count — one row per account and day with transactions, so 1 <= rows of batch b <=
  CT_Records of batch b; one row per account and day; SK_CustomerID is the account version's.

FactHoldings (4.5.10, 4.6.9)
* row count — the Validation count grows by HH_RECORDS each batch, and batch b inserted
  HH_RECORDS rows (one per HoldingHistory record);
* CurrentTradeID — the current trade exists in DimTrade and gives the holding its customer,
  account, security and company keys, its close date and time and its price (4.5.10.2);
* CurrentPrice > 0 (3.2.10).

FactMarketHistory (4.5.11, 4.6.10)
* row count — the Validation count grows by DM_RECORDS each batch; batch b inserted DM_RECORDS;
* security keys — SK_CompanyID is the referenced security version's;
* dates — DailyMarket of batch b holds the closing day before each batch date, so the rows lie
  in FirstDay-1..LastDay-1;
* 52-week range — FiftyTwoWeekLow <= DayLow <= ClosePrice <= DayHigh <= FiftyTwoWeekHigh;
* 52-week dates — the high and low dates lie in the year before the row's date (after the same
  date one year earlier, up to the row's date);
* 52-week values — on its high (low) date the security's DayHigh (DayLow) is the 52-week high
  (low), the security matched by Symbol since its surrogate key may change;
* Yield = Dividend / ClosePrice * 100 of the referenced security version (to 0.01);
* no-earnings alerts — a security with a NULL PERatio has a 'No earnings for company' alert, and
  every such alert names a security with a NULL PERatio (4.5.11.3, 4.6.10.2).

FactWatches (4.5.12, 4.6.11)
* row count — the Validation count grows by WH_ACTIVE (each ACTV record inserts a watch);
* watch records — rows + removed watches after batch b = WH_RECORDS of batches 1..b (each CNCL
  record removes one);
* dates — a row of batch b was placed (or, if removed, removed) within the batch's window, never
  removed before placed; one open watch per customer and security.
"""

from __future__ import annotations

import datetime

from tpcdi.audit.checks.base import (
    AuditContext,
    Check,
    Outcome,
    batch_ids,
    batch_set,
    compare,
    per_batch,
    per_batch_rows,
    violations,
    windows_sql,
)

KEY_NAMES = {
    "sk_customerid": "SK_CustomerID",
    "sk_accountid": "SK_AccountID",
    "sk_securityid": "SK_SecurityID",
    "sk_companyid": "SK_CompanyID",
    "sk_brokerid": "SK_BrokerID",
}


def at_date(
    label: str, fact: str, column: str, date_column: str, dimension: str, key: str,
    *, until_end: bool = True,
) -> Check:  # fmt: skip
    """Each row's ``column`` references a ``dimension`` version effective on the row's date."""
    upper = " AND d.datevalue <= x.enddate" if until_end else ""
    return violations(
        f"{label} {KEY_NAMES[column]}",
        "4.5.9-4.5.12, 4.6.8-4.6.11",
        f"SELECT count(*) FROM {{{fact}}} f LEFT JOIN {{dimdate}} d "
        f"ON d.sk_dateid = f.{date_column} WHERE NOT EXISTS (SELECT 1 FROM {{{dimension}}} x "
        f"WHERE x.{key} = f.{column} AND x.effectivedate <= d.datevalue{upper})",
        f"rows whose {column} is no {dimension} version valid on their date",
    )


def date_window(label: str, fact: str, date_column: str, *, shift_days: int = 0) -> Check:
    """Rows of batch b have their date within FirstDay..LastDay (moved by ``shift_days``)."""
    shift = datetime.timedelta(days=shift_days)

    def run(ctx: AuditContext) -> Outcome:
        found = per_batch_rows(
            ctx,
            "SELECT f.batchid, count(*), count(*) FILTER (WHERE d.datevalue IS NULL "
            "OR d.datevalue < w.firstday OR d.datevalue > w.lastday) "
            f"FROM {{{fact}}} f JOIN {windows_sql(ctx, shift_days)} ON w.batchid = f.batchid "
            f"LEFT JOIN {{dimdate}} d ON d.sk_dateid = f.{date_column} GROUP BY f.batchid",
        )

        def judge(batch: int) -> Outcome:
            first, last = ctx.keys.window(batch)
            lo, hi = first + shift, last + shift
            rows, bad = found.get(batch, (0, 0))
            bad = int(bad or 0)
            return bad == 0, f"{bad} of {rows} dated outside {lo}..{hi}"

        return per_batch(ctx.batches, judge)

    return Check(f"{label} date window", "4.5.9-4.5.12, 4.6.8-4.6.11", run)


def validation_delta(label: str, dataset: str, attribute: str) -> Check:
    """The batch's Validation row count minus the previous batch's = the answer key."""

    def run(ctx: AuditContext) -> Outcome:
        def judge(batch: int) -> Outcome:
            grown = ctx.validations.count(batch, label) - ctx.validations.count(batch - 1, label)
            return compare(grown, "=", ctx.keys.value(dataset, attribute, batch), f"({attribute})")

        return per_batch(ctx.batches, judge)

    return Check(f"{label} row count", "7.4, 4.5, 4.6", run)


def rows_per_batch(label: str, table: str, dataset: str, attribute: str) -> Check:
    """The rows inserted by batch b (BatchID = b) = the answer key."""

    def run(ctx: AuditContext) -> Outcome:
        counts = batch_set(ctx, table)

        def judge(batch: int) -> Outcome:
            expected = ctx.keys.value(dataset, attribute, batch)
            return compare(counts.get(batch, 0), "=", expected, f"({attribute})")

        return per_batch(ctx.batches, judge)

    return Check(f"{label} rows per batch", "4.5, 4.6", run)


def _cash_rows(ctx: AuditContext) -> Outcome:
    counts = batch_set(ctx, "factcashbalances")

    def judge(batch: int) -> Outcome:
        records = ctx.keys.value("DimTradeHistory", "CT_Records", batch)
        rows = counts.get(batch, 0)
        ok = rows <= records and (rows >= 1 or records == 0)
        return ok, f"{rows} rows for {records} transactions (CT_Records; expected 1..{records})"

    return per_batch(ctx.batches, judge)


def _watch_records(ctx: AuditContext) -> Outcome:
    def judge(batch: int) -> Outcome:
        rows = ctx.validations.count(batch, "FactWatches")
        removed = ctx.validations.count(batch, "FactWatches", "Inactive watches")
        expected = ctx.keys.upto("FactWatches", "WH_RECORDS", batch)
        label = f"({rows} rows + {removed} removed; WH_RECORDS)"
        return compare(rows + removed, "=", expected, label)

    return per_batch(ctx.batches, judge)


_WATCH_WINDOW = (
    "SELECT f.batchid, count(*), count(*) FILTER (WHERE (f.sk_dateid_dateremoved IS NULL AND "
    "(p.datevalue IS NULL OR p.datevalue < w.firstday OR p.datevalue > w.lastday)) "
    "OR (f.sk_dateid_dateremoved IS NOT NULL AND (r.datevalue IS NULL OR r.datevalue < w.firstday "
    "OR r.datevalue > w.lastday OR r.datevalue < p.datevalue))) "
    "FROM {{factwatches}} f JOIN {windows} ON w.batchid = f.batchid "
    "LEFT JOIN {{dimdate}} p ON p.sk_dateid = f.sk_dateid_dateplaced "
    "LEFT JOIN {{dimdate}} r ON r.sk_dateid = f.sk_dateid_dateremoved GROUP BY f.batchid"
)


def _watch_window(ctx: AuditContext) -> Outcome:
    found = per_batch_rows(ctx, _WATCH_WINDOW.format(windows=windows_sql(ctx)))

    def judge(batch: int) -> Outcome:
        first, last = ctx.keys.window(batch)
        rows, bad = found.get(batch, (0, 0))
        bad = int(bad or 0)
        return bad == 0, f"{bad} of {rows} placed/removed outside {first}..{last}"

    return per_batch(ctx.batches, judge)


#: FactMarketHistory rows one part of the 52-week values check joins at a time: the check joins
#: the table with itself twice, and at SF 30 (12 M rows) in one piece it ran out of the run's
#: DuckDB memory limit (2 GB).
SECURITY_DAYS_PART_ROWS = 4_000_000

_SECURITY_DAYS_PART = (
    "WITH numbered AS (SELECT sk_securityid, dense_rank() OVER (ORDER BY symbol) AS sid "
    "FROM {dimsecurity}), "
    "part AS (SELECT sk_securityid, sid FROM numbered WHERE mod(sid, {parts}) = {part}), "
    "days AS (SELECT p.sid, g.sk_dateid, g.dayhigh, g.daylow, g.fiftytwoweekhigh, "
    "g.sk_fiftytwoweekhighdate, g.fiftytwoweeklow, g.sk_fiftytwoweeklowdate "
    "FROM {factmarkethistory} g JOIN part p ON p.sk_securityid = g.sk_securityid) "
    "SELECT count(*) FROM days f "
    "LEFT JOIN days hi ON hi.sid = f.sid AND hi.sk_dateid = f.sk_fiftytwoweekhighdate "
    "LEFT JOIN days lo ON lo.sid = f.sid AND lo.sk_dateid = f.sk_fiftytwoweeklowdate "
    "WHERE hi.dayhigh IS NULL OR lo.daylow IS NULL "
    "OR abs(hi.dayhigh - f.fiftytwoweekhigh) > 0.005 OR abs(lo.daylow - f.fiftytwoweeklow) > 0.005"
)


def _security_days(ctx: AuditContext) -> Outcome:
    """Rows whose 52-week high (low) is not their security's DayHigh (DayLow) on the named date,
    the security matched by Symbol. Securities are numbered by symbol and judged in parts of
    about :data:`SECURITY_DAYS_PART_ROWS` rows (a symbol's rows all in one part), so the memory
    the joins take does not grow with the scale factor."""
    rows = ctx.number("SELECT count(*) FROM {factmarkethistory}")
    parts = max(1, -(-rows // SECURITY_DAYS_PART_ROWS))
    found = sum(
        ctx.number(_SECURITY_DAYS_PART.replace("{parts}", str(parts)).replace("{part}", str(part)))
        for part in range(parts)
    )
    detail = (
        f"{found} rows whose 52-week high/low is not the security's day high/low on the named "
        f"date (expected 0; {parts} part{'s' if parts > 1 else ''})"
    )
    return found == 0, detail


_NO_EARNINGS_SYMBOL = "trim(replace(m.messagedata, 'DM_S_SYMB =', ''))"


def _no_earnings(ctx: AuditContext) -> Outcome:
    silent, unfounded = ctx.rows(
        "SELECT (SELECT count(*) FROM (SELECT DISTINCT s.symbol FROM {factmarkethistory} f "
        "JOIN {dimsecurity} s ON s.sk_securityid = f.sk_securityid WHERE f.peratio IS NULL) n "
        "WHERE NOT EXISTS (SELECT 1 FROM {dimessages} m WHERE m.messagetype = 'Alert' "
        f"AND m.messagetext = 'No earnings for company' AND {_NO_EARNINGS_SYMBOL} = n.symbol)), "
        "(SELECT count(*) FROM {dimessages} m WHERE m.messagetype = 'Alert' "
        "AND m.messagetext = 'No earnings for company' AND NOT EXISTS (SELECT 1 FROM "
        "{factmarkethistory} f JOIN {dimsecurity} s ON s.sk_securityid = f.sk_securityid "
        f"WHERE f.peratio IS NULL AND s.symbol = {_NO_EARNINGS_SYMBOL}))"
    )[0]
    silent, unfounded = int(silent), int(unfounded)
    detail = (
        f"{silent} securities with a NULL PERatio and no alert, {unfounded} alerts for "
        "securities without a NULL PERatio (expected 0, 0)"
    )
    return silent == 0 and unfounded == 0, detail


def _in_year_before(column: str) -> str:
    return (
        f"{column}.datevalue IS NULL OR {column}.datevalue > d.datevalue "
        f"OR {column}.datevalue <= d.datevalue - INTERVAL '1 year'"
    )


CHECKS: tuple[Check, ...] = (
    # FactCashBalances
    Check("FactCashBalances row count", "4.5.9.1, 4.6.8.1", _cash_rows),
    batch_ids("FactCashBalances BatchID values", "4.4.2", "factcashbalances"),
    at_date(
        "FactCashBalances",
        "factcashbalances",
        "sk_customerid",
        "sk_dateid",
        "dimcustomer",
        "sk_customerid",
    ),
    at_date(
        "FactCashBalances",
        "factcashbalances",
        "sk_accountid",
        "sk_dateid",
        "dimaccount",
        "sk_accountid",
    ),
    violations(
        "FactCashBalances account keys",
        "4.5.9.2, 4.6.8.2",
        "SELECT count(*) FROM {factcashbalances} f JOIN {dimaccount} a "
        "ON a.sk_accountid = f.sk_accountid WHERE a.sk_customerid <> f.sk_customerid",
        "rows whose SK_CustomerID is not their account version's",
    ),
    violations(
        "FactCashBalances one row per account and day",
        "4.5.9.1, 4.6.8.1",
        "SELECT count(*) FROM (SELECT a.accountid, f.sk_dateid FROM {factcashbalances} f "
        "JOIN {dimaccount} a ON a.sk_accountid = f.sk_accountid "
        "GROUP BY a.accountid, f.sk_dateid HAVING count(*) > 1) x",
        "(account, day) pairs with more than one row",
    ),
    date_window("FactCashBalances", "factcashbalances", "sk_dateid"),
    # FactHoldings
    validation_delta("FactHoldings", "FactHoldings", "HH_RECORDS"),
    rows_per_batch("FactHoldings", "factholdings", "FactHoldings", "HH_RECORDS"),
    batch_ids("FactHoldings BatchID values", "4.4.2", "factholdings"),
    *(
        at_date(
            "FactHoldings",
            "factholdings",
            f"sk_{d}id",
            "sk_dateid",
            f"dim{d}",
            f"sk_{d}id",
            until_end=False,
        )
        for d in ("customer", "account", "security", "company")
    ),
    violations(
        "FactHoldings CurrentTradeID",
        "4.5.10.2, 4.6.9.2",
        "SELECT count(*) FROM {factholdings} h WHERE NOT EXISTS (SELECT 1 FROM {dimtrade} t "
        "WHERE t.tradeid = h.currenttradeid AND t.sk_closedateid = h.sk_dateid "
        "AND t.sk_closetimeid = h.sk_timeid AND t.sk_customerid = h.sk_customerid "
        "AND t.sk_accountid = h.sk_accountid AND t.sk_securityid = h.sk_securityid "
        "AND t.sk_companyid = h.sk_companyid AND abs(t.tradeprice - h.currentprice) < 0.005)",
        "holdings whose keys, date, time or price are not their current trade's",
    ),
    violations(
        "FactHoldings CurrentPrice",
        "3.2.10",
        "SELECT count(*) FROM {factholdings} WHERE NOT currentprice > 0",
        "holdings with CurrentPrice <= 0",
    ),
    date_window("FactHoldings", "factholdings", "sk_dateid"),
    # FactMarketHistory
    validation_delta("FactMarketHistory", "FactMarketHistory", "DM_RECORDS"),
    rows_per_batch("FactMarketHistory", "factmarkethistory", "FactMarketHistory", "DM_RECORDS"),
    batch_ids("FactMarketHistory BatchID values", "4.4.2", "factmarkethistory"),
    at_date(
        "FactMarketHistory",
        "factmarkethistory",
        "sk_securityid",
        "sk_dateid",
        "dimsecurity",
        "sk_securityid",
    ),
    at_date(
        "FactMarketHistory",
        "factmarkethistory",
        "sk_companyid",
        "sk_dateid",
        "dimcompany",
        "sk_companyid",
    ),
    violations(
        "FactMarketHistory security keys",
        "4.5.11.2, 4.6.10.1",
        "SELECT count(*) FROM {factmarkethistory} f JOIN {dimsecurity} s "
        "ON s.sk_securityid = f.sk_securityid WHERE s.sk_companyid <> f.sk_companyid",
        "rows whose SK_CompanyID is not their security version's",
    ),
    date_window("FactMarketHistory", "factmarkethistory", "sk_dateid", shift_days=-1),
    violations(
        "FactMarketHistory 52-week range",
        "4.5.11.2, 4.6.10.1",
        "SELECT count(*) FROM {factmarkethistory} WHERE NOT (fiftytwoweeklow <= daylow "
        "AND daylow <= closeprice AND closeprice <= dayhigh AND dayhigh <= fiftytwoweekhigh)",
        "rows not ordered 52-week low <= day low <= close <= day high <= 52-week high",
    ),
    violations(
        "FactMarketHistory 52-week dates",
        "4.5.11.2, 4.6.10.1",
        "SELECT count(*) FROM {factmarkethistory} f JOIN {dimdate} d ON d.sk_dateid = f.sk_dateid "
        "LEFT JOIN {dimdate} h ON h.sk_dateid = f.sk_fiftytwoweekhighdate "
        "LEFT JOIN {dimdate} l ON l.sk_dateid = f.sk_fiftytwoweeklowdate "
        f"WHERE {_in_year_before('h')} OR {_in_year_before('l')}",
        "rows whose 52-week high or low date is not within the year up to their date",
    ),
    Check("FactMarketHistory 52-week values", "4.5.11.2, 4.6.10.1", _security_days),
    violations(
        "FactMarketHistory Yield",
        "4.5.11.2, 4.6.10.1",
        "SELECT count(*) FROM {factmarkethistory} f JOIN {dimsecurity} s "
        "ON s.sk_securityid = f.sk_securityid "
        "WHERE abs(f.yield - s.dividend / nullif(f.closeprice, 0) * 100) > 0.01",
        "rows whose Yield is not Dividend / ClosePrice * 100",
    ),
    Check("FactMarketHistory no-earnings alerts", "4.5.11.3, 4.6.10.2", _no_earnings),
    # FactWatches
    validation_delta("FactWatches", "FactWatches", "WH_ACTIVE"),
    Check("FactWatches watch records", "4.5.12, 4.6.11, 7.4", _watch_records),
    batch_ids("FactWatches BatchID values", "4.4.2", "factwatches"),
    at_date(
        "FactWatches",
        "factwatches",
        "sk_customerid",
        "sk_dateid_dateplaced",
        "dimcustomer",
        "sk_customerid",
    ),
    at_date(
        "FactWatches",
        "factwatches",
        "sk_securityid",
        "sk_dateid_dateplaced",
        "dimsecurity",
        "sk_securityid",
    ),
    Check("FactWatches date window", "4.5.12, 4.6.11", _watch_window),
    violations(
        "FactWatches one open watch",
        "4.5.12.2, 4.6.11.2",
        "SELECT count(*) FROM (SELECT c.customerid, s.symbol FROM {factwatches} w "
        "JOIN {dimcustomer} c ON c.sk_customerid = w.sk_customerid "
        "JOIN {dimsecurity} s ON s.sk_securityid = w.sk_securityid "
        "WHERE w.sk_dateid_dateremoved IS NULL GROUP BY c.customerid, s.symbol "
        "HAVING count(*) > 1) x",
        "(customer, security) pairs with more than one open watch",
    ),
)
