"""Spark SQL of the historical load's facts (clause 4.5): DimTrade, FactCashBalances,
FactHoldings, FactWatches, FactMarketHistory, and the engine state seeded from them.

Dimension lookups are as of an event's day (``effectivedate <= day < enddate``) against the small
dimension versions, which Spark broadcasts. The 52-week high and low avoid Spark's sliding frames
(they recompute the whole frame for every row: O(rows x 365)): prices are densified to one row per
security and day (DIGen's already are), then maxima of 1, 4, 16, 64 and 256 days are built by
doubling with ``lag`` over rows and one last pass combines eight of them into the exact window
(add_months(day, -12), day] — 365 or 366 days — in O(rows) per pass.
"""

from __future__ import annotations

from tpcdi.historical.sql_dims import sk_date, sk_time


def _as_of(table: str, alias: str, key: str, value: str, day: str) -> str:
    return (
        f"LEFT JOIN {table} {alias} ON {alias}.{key} = {value} "
        f"AND {alias}.effectivedate <= {day} AND {day} < {alias}.enddate"
    )


def dimtrade() -> str:
    """DimTrade (4.5.8): Trade.txt joined with its TradeHistory; create and close times from the
    history, keys as of the trade's first appearance."""
    return f"""
    WITH h AS (
        SELECT TH_T_ID,
               min(TH_DTS) AS first_ts,
               min(CASE WHEN TH_ST_ID = 'PNDG' THEN TH_DTS END) AS pndg_ts,
               min(CASE WHEN TH_ST_ID = 'SBMT' THEN TH_DTS END) AS sbmt_ts,
               max(CASE WHEN TH_ST_ID IN ('CMPT', 'CNCL') THEN TH_DTS END) AS close_ts
        FROM tradehistory GROUP BY TH_T_ID
    ), t AS (
        SELECT trade.*, h.first_ts, h.close_ts,
               least(h.pndg_ts, CASE WHEN trade.T_TT_ID IN ('TMB', 'TMS') THEN h.sbmt_ts END)
                   AS create_ts,
               to_date(coalesce(h.first_ts, trade.T_DTS)) AS seen
        FROM trade LEFT JOIN h ON h.TH_T_ID = trade.T_ID
    )
    SELECT
        t.T_ID AS tradeid,
        a.sk_brokerid,
        {sk_date("t.create_ts")} AS sk_createdateid,
        {sk_time("t.create_ts")} AS sk_createtimeid,
        {sk_date("t.close_ts")} AS sk_closedateid,
        {sk_time("t.close_ts")} AS sk_closetimeid,
        st.st_name AS status,
        tt.tt_name AS type,
        t.T_IS_CASH AS cashflag,
        s.sk_securityid,
        s.sk_companyid,
        t.T_QTY AS quantity,
        t.T_BID_PRICE AS bidprice,
        a.sk_customerid,
        a.sk_accountid,
        t.T_EXEC_NAME AS executedby,
        t.T_TRADE_PRICE AS tradeprice,
        t.T_CHRG AS fee,
        t.T_COMM AS commission,
        t.T_TAX AS tax,
        CAST(1 AS BIGINT) AS batchid,
        t._line,
        t.T_CA_ID,
        t.T_S_SYMB
    FROM t
    {_as_of("dimaccount", "a", "accountid", "t.T_CA_ID", "t.seen")}
    {_as_of("dimsecurity", "s", "symbol", "t.T_S_SYMB", "t.seen")}
    LEFT JOIN statustype st ON st.st_id = t.T_ST_ID
    LEFT JOIN tradetype tt ON tt.tt_id = t.T_TT_ID
    """


def trade_alerts() -> str:
    """Invalid trade commission (4.5.8.3) and fee (4.5.8.4)."""
    return """
    SELECT 'DimTrade' AS messagesource, 'Invalid trade commission' AS messagetext,
           concat('T_ID = ', T_ID, ', T_COMM = ', T_COMM) AS messagedata
    FROM trade WHERE T_COMM IS NOT NULL AND T_COMM > T_TRADE_PRICE * T_QTY
    UNION ALL
    SELECT 'DimTrade', 'Invalid trade fee', concat('T_ID = ', T_ID, ', T_CHRG = ', T_CHRG)
    FROM trade WHERE T_CHRG IS NOT NULL AND T_CHRG > T_TRADE_PRICE * T_QTY
    """


def factcashbalances() -> str:
    """FactCashBalances (4.5.9): one row per account and day with the running balance."""
    return f"""
    WITH daily AS (
        SELECT CT_CA_ID AS accountid, to_date(CT_DTS) AS d, sum(CT_AMT) AS amount,
               min(_line) AS _line
        FROM cashtransaction GROUP BY CT_CA_ID, to_date(CT_DTS)
    ), running AS (
        SELECT *, sum(amount) OVER (PARTITION BY accountid ORDER BY d
                                    ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS cash
        FROM daily
    )
    SELECT
        r.accountid,
        {sk_date("r.d")} AS sk_dateid,
        a.sk_customerid,
        a.sk_accountid,
        r.cash,
        CAST(1 AS BIGINT) AS batchid,
        r._line
    FROM running r
    {_as_of("dimaccount", "a", "accountid", "r.accountid", "r.d")}
    """


def factholdings() -> str:
    """FactHoldings (4.5.10) from HoldingHistory and the current trade's DimTrade row."""
    return """
    SELECT
        hh.HH_H_T_ID AS tradeid,
        hh.HH_T_ID AS currenttradeid,
        t.sk_customerid,
        t.sk_accountid,
        t.sk_securityid,
        t.sk_companyid,
        t.sk_closedateid AS sk_dateid,
        t.sk_closetimeid AS sk_timeid,
        t.tradeprice AS currentprice,
        hh.HH_AFTER_QTY AS currentholding,
        CAST(1 AS BIGINT) AS batchid,
        hh._line
    FROM holdinghistory hh LEFT JOIN dimtrade t ON t.tradeid = hh.HH_T_ID
    """


def factwatches() -> str:
    """FactWatches (4.5.12): one row per (customer, security) watch; keys as of placement."""
    return f"""
    WITH w AS (
        SELECT W_C_ID AS customerid, W_S_SYMB AS symbol,
               min(CASE WHEN W_ACTION = 'ACTV' THEN W_DTS END) AS placed,
               max(CASE WHEN W_ACTION = 'CNCL' THEN W_DTS END) AS removed,
               min(_line) AS _line
        FROM watchhistory GROUP BY W_C_ID, W_S_SYMB
    )
    SELECT
        w.customerid,
        w.symbol,
        c.sk_customerid,
        s.sk_securityid,
        {sk_date("w.placed")} AS sk_dateid_dateplaced,
        {sk_date("w.removed")} AS sk_dateid_dateremoved,
        CAST(1 AS BIGINT) AS batchid,
        w._line,
        w.placed IS NULL AS never_placed
    FROM w
    {_as_of("dimcustomer", "c", "customerid", "w.customerid", "to_date(w.placed)")}
    {_as_of("dimsecurity", "s", "symbol", "w.symbol", "to_date(w.placed)")}
    """


def eps_quarters() -> str:
    """Per company (natural key) and quarter index q: the sum of basic EPS of quarters q-4..q-1."""
    return """
    WITH f AS (
        SELECT c.companyid, f.fi_year * 4 + f.fi_qtr - 1 AS qi, f.fi_basic_eps AS eps
        FROM financial f JOIN dimcompany c ON c.sk_companyid = f.sk_companyid
    )
    SELECT companyid, qi + k AS q, sum(eps) AS eps4
    FROM f LATERAL VIEW explode(array(1, 2, 3, 4)) ks AS k
    GROUP BY companyid, qi + k
    """


def market_days(dense: bool) -> str:
    """DailyMarket as one row per security and day (gaps filled with null prices when
    ``dense``), with a day number and a row marker."""
    base = """
        SELECT DM_S_SYMB AS symbol, DM_DATE AS d, unix_date(DM_DATE) AS dn, DM_CLOSE AS close,
               DM_HIGH AS high, DM_LOW AS low, DM_VOL AS vol, true AS real_row
        FROM dailymarket
    """
    if not dense:
        return base
    return f"""
    WITH r AS ({base}), spans AS (
        SELECT symbol, min(dn) AS lo, max(dn) AS hi FROM r GROUP BY symbol
    ), every_day AS (
        SELECT symbol, explode(sequence(lo, hi)) AS dn FROM spans
    )
    SELECT e.symbol, date_from_unix_date(e.dn) AS d, e.dn, r.close, r.high, r.low, r.vol,
           coalesce(r.real_row, false) AS real_row
    FROM every_day e LEFT JOIN r ON r.symbol = e.symbol AND r.dn = e.dn
    """


def _lagged(column: str, steps: tuple[int, ...], combine: str) -> str:
    terms = [column] + [f"lag({column}, {k}) OVER (PARTITION BY symbol ORDER BY dn)" for k in steps]
    return f"{combine}({', '.join(terms)})"


def market_levels() -> list[str]:
    """Doubling passes over ``market_days`` (view ``md0``): hi/lo maxima/minima over 4, 16, 64
    and 256 days; each pass reads the previous view (``md<i>``)."""
    passes = []
    previous = "md0"
    for i, (size, step) in enumerate(((4, 1), (16, 4), (64, 16), (256, 64)), start=1):
        small = size // 4
        hi = _lagged(f"hi{small}", (step, 2 * step, 3 * step), "greatest")
        lo = _lagged(f"lo{small}", (step, 2 * step, 3 * step), "least")
        passes.append(f"SELECT *, {hi} AS hi{size}, {lo} AS lo{size} FROM {previous}")
        previous = f"md{i}"
    return passes


def market_seed() -> str:
    """Prices the 52-week window needs after ``md0``'s last day: the last 366 days, pruned to
    entries that can still be a window's high or low (nothing later is strictly higher /
    lower), as the engine's window entries."""
    return """
    WITH last_days AS (
        SELECT * FROM md0
        WHERE real_row AND dn > (SELECT max(dn) FROM md0) - 366
    ), later AS (
        SELECT *,
            max(high) OVER (PARTITION BY symbol ORDER BY dn
                            ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING) AS later_high,
            min(low) OVER (PARTITION BY symbol ORDER BY dn
                           ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING) AS later_low
        FROM last_days
    )
    SELECT symbol, dn, high, low FROM later
    WHERE later_high IS NULL OR high >= later_high OR low <= later_low
    """


def factmarkethistory() -> str:
    """FactMarketHistory (4.5.11) over ``md4`` (the last doubling pass)."""
    hi = "hi1"
    lo = "lo1"
    combine_hi = (
        "greatest(hi256, lag(hi64, 256) OVER o, lag(hi16, 320) OVER o, lag(hi16, 336) OVER o, "
        "lag(hi4, 352) OVER o, lag(hi4, 356) OVER o, lag(hi4, 360) OVER o, "
        f"lag({hi}, 364) OVER o, CASE WHEN span = 366 THEN lag({hi}, 365) OVER o END)"
    )
    combine_lo = (
        "least(lo256, lag(lo64, 256) OVER o, lag(lo16, 320) OVER o, lag(lo16, 336) OVER o, "
        "lag(lo4, 352) OVER o, lag(lo4, 356) OVER o, lag(lo4, 360) OVER o, "
        f"lag({lo}, 364) OVER o, CASE WHEN span = 366 THEN lag({lo}, 365) OVER o END)"
    )
    return f"""
    WITH w AS (
        SELECT *, {combine_hi} AS high52, {combine_lo} AS low52
        FROM (SELECT *, datediff(d, add_months(d, -12)) AS span FROM md4)
        WINDOW o AS (PARTITION BY symbol ORDER BY dn)
    ), m AS (
        SELECT w.*, {_quarter("w.d")} AS q FROM w WHERE real_row
    )
    SELECT
        s.sk_securityid,
        s.sk_companyid,
        {sk_date("m.d")} AS sk_dateid,
        CASE WHEN e.eps4 <> 0 THEN m.close / e.eps4 END AS peratio,
        s.dividend / m.close * 100 AS yield,
        CAST(shiftright(m.high52, {DAY_BITS}) AS DOUBLE) / 100 AS fiftytwoweekhigh,
        {sk_date(f"date_from_unix_date({_DAY_MASK} - (m.high52 & {_DAY_MASK}))")}
            AS sk_fiftytwoweekhighdate,
        CAST(shiftright(m.low52, {DAY_BITS}) AS DOUBLE) / 100 AS fiftytwoweeklow,
        {sk_date(f"date_from_unix_date(m.low52 & {_DAY_MASK})")} AS sk_fiftytwoweeklowdate,
        m.close AS closeprice,
        m.high AS dayhigh,
        m.low AS daylow,
        m.vol AS volume,
        CAST(1 AS BIGINT) AS batchid,
        m.symbol,
        e.eps4 IS NULL OR e.eps4 = 0 AS no_earnings
    FROM m
    {_as_of("dimsecurity", "s", "symbol", "m.symbol", "m.d")}
    LEFT JOIN dimcompany c ON c.sk_companyid = s.sk_companyid
    LEFT JOIN eps4 e ON e.companyid = c.companyid AND e.q = m.q
    """


def _quarter(day: str) -> str:
    return f"(year({day}) * 4 + quarter({day}) - 1)"


#: Bits of a packed (price, day) key that hold the day (days since 1970, up to the year 7700).
DAY_BITS = 21
_DAY_MASK = (1 << DAY_BITS) - 1


def market_base() -> str:
    """``md0``: market days with the one-day keys the doubling passes combine, each a BIGINT
    packing the price in cents above the day: ``hi1`` orders by high, then by the earlier day
    (the day is stored inverted); ``lo1`` by low, then by the earlier day. Maxima and minima of
    plain integers are several times faster in Spark than of structs. Prices have at most two
    decimals (clause 2.2), so the cents, and the price decoded from them, are exact."""
    return f"""
    SELECT *,
        CAST(round(high * 100) AS BIGINT) * {1 << DAY_BITS} + ({_DAY_MASK} - dn) AS hi1,
        CAST(round(low * 100) AS BIGINT) * {1 << DAY_BITS} + dn AS lo1
    FROM market_days
    """
