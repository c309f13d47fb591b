"""The fact steps of the incremental TPC-DI dataflow, after the dimensions: DimTrade,
FactCashBalances, FactHoldings, FactMarketHistory, FactWatches."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

from etl_dataflows import coalesce, col, if_else, lit, old
from tpcdi.incremental import rules
from tpcdi.incremental.builder import (
    ALERT_COLUMNS,
    DAY_US,
    NULL,
    FlowBuilder,
    alert_rows,
    problem_text,
    sk_of_micros,
    text_of,
    trade_alert,
)
from tpcdi.warehouse import tables as dw


def add_trades(b: FlowBuilder) -> None:
    """Trade.txt (4.6.7): inserts with the keys current at the trade's first appearance, updates in
    place, close date and time on CMPT/CNCL, commission and fee alerts."""
    flow = b.flow
    ref = b.ref
    alerts = b.alerts
    kind_rows = b.kind_rows
    problems = b.problems
    batchid = b.batchid
    dimaccount = b.tables.dimaccount
    dimsecurity = b.tables.dimsecurity
    dimtrade = b.tables.dimtrade
    trade_in = {
        "T_ID": "int64",
        "CDC_FLAG": "string",
        "T_CA_ID": "int64",
        "T_S_SYMB": "string",
        "T_IS_CASH": "bool",
        "T_QTY": "int64",
        "T_BID_PRICE": "float64",
        "T_EXEC_NAME": "string",
        "T_TRADE_PRICE": "float64",
        "T_CHRG": "float64",
        "T_COMM": "float64",
        "T_TAX": "float64",
        "status_name": "string",
        "type_name": "string",
        "closing": "bool",
        "sk_dateid": "int64",
        "sk_timeid": "int64",
        "batchid": "int64",
        "line": "int64",
    }

    def prepare_trade(t: pa.Table) -> pa.Table:
        out = {name: t.column(name) for name in trade_in if name in t.column_names}
        out["status_name"] = rules.lookup(t.column("T_ST_ID"), ref.status_names, pa.string())
        out["type_name"] = rules.lookup(t.column("T_TT_ID"), ref.trade_types, pa.string())
        out["closing"] = rules.known(t.column("T_ST_ID"), ["CMPT", "CNCL"])
        out["sk_dateid"] = rules.sk_dateid(t.column("T_DTS"))
        out["sk_timeid"] = rules.sk_timeid(t.column("T_DTS"))
        return pa.table(out)

    kind_rows("Trade")
    flow.map("trade_prepared", prepare_trade, schema=trade_in)

    def too_high(column: str) -> Callable[[pa.Table], pa.Array]:
        def check(t: pa.Table) -> pa.Array:
            value = pc.multiply(pc.cast(t.column("T_QTY"), pa.float64()), t.column("T_TRADE_PRICE"))
            return pc.fill_null(pc.greater(t.column(column), value), False)

        return check

    for column, step, text in (
        ("T_COMM", "trade_bad_commission", "Invalid trade commission"),
        ("T_CHRG", "trade_bad_fee", "Invalid trade fee"),
    ):
        flow.filter(step, too_high(column), input="trade_prepared")
        alerts.append(
            flow.map(
                f"{step}alert_rows",
                trade_alert(column, text),
                schema=ALERT_COLUMNS,
            )
        )
    tr = flow.transact("apply_trade", input="trade_prepared")
    is_new = col("CDC_FLAG") == "I"
    account = tr.read(dimaccount, "T_CA_ID", when=is_new)
    security = tr.read(dimsecurity, "T_S_SYMB", when=is_new)
    resolved = is_new & coalesce(account.found, False) & coalesce(security.found, False)
    closing = col("closing")
    copied = {
        "status": col("status_name"),
        "type": col("type_name"),
        "cashflag": col("T_IS_CASH"),
        "quantity": col("T_QTY"),
        "bidprice": col("T_BID_PRICE"),
        "executedby": col("T_EXEC_NAME"),
        "tradeprice": col("T_TRADE_PRICE"),
        "fee": col("T_CHRG"),
        "commission": col("T_COMM"),
        "tax": col("T_TAX"),
    }
    created = tr.insert(
        dimtrade,
        "T_ID",
        {
            **copied,
            "sk_brokerid": account["sk_brokerid"],
            "sk_createdateid": col("sk_dateid"),
            "sk_createtimeid": col("sk_timeid"),
            "sk_closedateid": if_else(closing, col("sk_dateid"), NULL),
            "sk_closetimeid": if_else(closing, col("sk_timeid"), NULL),
            "sk_securityid": security["sk_securityid"],
            "sk_companyid": security["sk_companyid"],
            "sk_customerid": account["sk_customerid"],
            "sk_accountid": account["sk_accountid"],
            "batchid": batchid,
        },
        if_exists="skip",
        when=resolved,
    )
    updated = tr.update(
        dimtrade,
        "T_ID",
        set={
            **copied,
            "sk_closedateid": if_else(closing, col("sk_dateid"), old("sk_closedateid")),
            "sk_closetimeid": if_else(closing, col("sk_timeid"), old("sk_closetimeid")),
            # the batch of the row's latest change (what the audit's date window expects)
            "batchid": batchid,
        },
        if_missing="skip",
        when=~is_new,
    )
    about = problem_text(
        ("T_ID = ", "T_ID"), (", T_CA_ID = ", "T_CA_ID"), (", T_S_SYMB = ", "T_S_SYMB")
    )
    tr.emit(
        about.columns(),
        batchid=batchid,
        line=col("line"),
        problem=if_else(
            is_new & ~resolved,
            "Unknown account or security",
            if_else(
                is_new & coalesce(created.found, False),
                "Trade inserted twice",
                if_else(
                    ~is_new & ~coalesce(updated.found, False),
                    "Update of an unknown trade",
                    lit(None),
                ),
            ),
        ),
    )
    problems("apply_trade", "Trade", about)


def add_cash(b: FlowBuilder) -> None:
    """CashTransaction.txt (4.6.8): one FactCashBalances row per account and batch date holding the
    running balance."""
    flow = b.flow
    kind_rows = b.kind_rows
    problems = b.problems
    batchid = b.batchid
    dimaccount = b.tables.dimaccount
    factcashbalances = b.tables.factcashbalances
    aux_cash = b.tables.aux_cash
    cash_in = {
        "CT_CA_ID": "int64",
        "CT_AMT": "float64",
        "sk_batchdate": "int64",
        "batchid": "int64",
        "line": "int64",
    }

    def prepare_cash(t: pa.Table) -> pa.Table:
        out = {name: t.column(name) for name in cash_in if name in t.column_names}
        out["sk_batchdate"] = rules.sk_dateid(t.column("batchdate"))
        return pa.table(out)

    kind_rows("CashTransaction")
    flow.map("cash_prepared", prepare_cash, schema=cash_in)
    ca = flow.transact("apply_cash", input="cash_prepared")
    holder = ca.read(dimaccount, "CT_CA_ID")
    running = ca.update(
        aux_cash,
        "CT_CA_ID",
        set={"cash": old("cash") + col("CT_AMT")},
        if_missing="insert",
        when=holder.found,
    )
    ca.write(
        factcashbalances,
        ["CT_CA_ID", "sk_batchdate"],
        {
            "sk_customerid": holder["sk_customerid"],
            "sk_accountid": holder["sk_accountid"],
            "cash": running["cash"],
            "batchid": batchid,
        },
        when=holder.found,
    )
    about = problem_text(("CT_CA_ID = ", "CT_CA_ID"))
    ca.emit(
        about.columns(),
        batchid=batchid,
        line=col("line"),
        problem=if_else(holder.found, lit(None), "Unknown account"),
    )
    problems("apply_cash", "CashTransaction", about)


def add_holdings(b: FlowBuilder) -> None:
    """HoldingHistory.txt (4.6.9): FactHoldings from the current trade."""
    flow = b.flow
    kind_rows = b.kind_rows
    problems = b.problems
    batchid = b.batchid
    dimtrade = b.tables.dimtrade
    holding_in = {
        "HH_H_T_ID": "int64",
        "HH_T_ID": "int64",
        "HH_AFTER_QTY": "int64",
        "batchid": "int64",
        "line": "int64",
    }
    kind_rows("HoldingHistory")
    flow.map(
        "holding_prepared",
        lambda t: t.select([n for n in holding_in]),
        schema=holding_in,
    )
    ho = flow.transact("apply_holding", input="holding_prepared")
    trade = ho.read(dimtrade, "HH_T_ID")
    about = problem_text(("HH_H_T_ID = ", "HH_H_T_ID"), (", HH_T_ID = ", "HH_T_ID"))
    ho.emit(
        about.columns(),
        tradeid=col("HH_H_T_ID"),
        currenttradeid=col("HH_T_ID"),
        sk_customerid=trade["sk_customerid"],
        sk_accountid=trade["sk_accountid"],
        sk_securityid=trade["sk_securityid"],
        sk_companyid=trade["sk_companyid"],
        sk_dateid=trade["sk_closedateid"],
        sk_timeid=trade["sk_closetimeid"],
        currentprice=trade["tradeprice"],
        currentholding=col("HH_AFTER_QTY"),
        batchid=batchid,
        line=col("line"),
        problem=if_else(trade.found, lit(None), "Holding of an unknown trade"),
    )
    flow.filter("holding_found", col("problem").is_null(), input="apply_holding")
    holdings_schema = dict(dw.FACTHOLDINGS.columns)
    flow.map(
        "factholdings_rows",
        lambda t: t.select(list(holdings_schema)),
        schema=holdings_schema,
    )
    flow.sink("factholdings", input="factholdings_rows")
    problems("apply_holding", "HoldingHistory", about)


def add_market(b: FlowBuilder) -> None:
    """DailyMarket.txt (4.6.10): 52-week high/low from the price window, PE ratio from the four
    previous quarters' EPS, yield from the current dividend; no-earnings alerts."""
    flow = b.flow
    ref = b.ref
    alerts = b.alerts
    kind_rows = b.kind_rows
    problems = b.problems
    batchid = b.batchid
    dimsecurity = b.tables.dimsecurity
    aux_market_window = b.tables.aux_market_window
    market_in = {
        "DM_S_SYMB": "string",
        "DM_CLOSE": "float64",
        "DM_HIGH": "float64",
        "DM_LOW": "float64",
        "DM_VOL": "int64",
        "dm_at": "int64",
        "sk_dateid": "int64",
        "eps4": "float64",
        "batchid": "int64",
        "line": "int64",
    }

    def prepare_market(t: pa.Table) -> pa.Table:
        out = {name: t.column(name) for name in market_in if name in t.column_names}
        days = pc.cast(pc.cast(t.column("DM_DATE"), pa.date32()), pa.int32())
        out["dm_at"] = pc.multiply(pc.cast(days, pa.int64()), DAY_US)
        out["sk_dateid"] = rules.sk_dateid(t.column("DM_DATE"))
        out["eps4"] = ref.eps4(t.column("DM_S_SYMB"), t.column("DM_DATE"))
        return pa.table(out)

    kind_rows("DailyMarket")
    flow.map("market_prepared", prepare_market, schema=market_in)
    mk = flow.transact("apply_market", input="market_prepared")
    listed = mk.read(dimsecurity, "DM_S_SYMB")
    window = mk.window(
        aux_market_window,
        "DM_S_SYMB",
        {"high": col("DM_HIGH"), "low": col("DM_LOW")},
        at=col("dm_at"),
        when=listed.found,
    )
    about = problem_text(("DM_S_SYMB = ", "DM_S_SYMB"))
    mk.emit(
        about.columns(),
        sk_securityid=listed["sk_securityid"],
        sk_companyid=listed["sk_companyid"],
        sk_dateid=col("sk_dateid"),
        dividend=listed["dividend"],
        eps4=col("eps4"),
        high52=window["high52"],
        high52_at=window["high52_at"],
        low52=window["low52"],
        low52_at=window["low52_at"],
        closeprice=col("DM_CLOSE"),
        dayhigh=col("DM_HIGH"),
        daylow=col("DM_LOW"),
        volume=col("DM_VOL"),
        symbol=col("DM_S_SYMB"),
        batchid=batchid,
        line=col("line"),
        problem=if_else(listed.found, lit(None), "Unknown security"),
    )
    flow.filter("market_found", col("problem").is_null(), input="apply_market")
    market_schema = dict(dw.FACTMARKETHISTORY.columns)

    def market_rows(t: pa.Table) -> pa.Table:
        close = t.column("closeprice")
        eps = t.column("eps4")
        usable = pc.fill_null(pc.not_equal(eps, 0.0), False)
        pe = pc.if_else(usable, pc.divide(close, eps), pa.scalar(None, pa.float64()))
        out = {
            "sk_securityid": t.column("sk_securityid"),
            "sk_companyid": t.column("sk_companyid"),
            "sk_dateid": t.column("sk_dateid"),
            "peratio": pe,
            "yield": pc.multiply(pc.divide(t.column("dividend"), close), 100.0),
            "fiftytwoweekhigh": t.column("high52"),
            "sk_fiftytwoweekhighdate": sk_of_micros(t.column("high52_at")),
            "fiftytwoweeklow": t.column("low52"),
            "sk_fiftytwoweeklowdate": sk_of_micros(t.column("low52_at")),
            "closeprice": close,
            "dayhigh": t.column("dayhigh"),
            "daylow": t.column("daylow"),
            "volume": t.column("volume"),
            "batchid": t.column("batchid"),
        }
        return pa.table(out)

    flow.map("factmarkethistory_rows", market_rows, schema=market_schema)
    flow.sink("factmarkethistory", input="factmarkethistory_rows")
    flow.filter("no_earnings", col("eps4").is_null() | (col("eps4") == 0.0), input="market_found")
    alerts.append(
        flow.map(
            "no_earnings_alerts",
            lambda t: alert_rows(
                t,
                "FactMarketHistory",
                "No earnings for company",
                pc.binary_join_element_wise("DM_S_SYMB = ", text_of(t.column("symbol")), ""),
            ),
            schema=ALERT_COLUMNS,
        )
    )
    problems("apply_market", "DailyMarket", about)


def add_watches(b: FlowBuilder) -> None:
    """WatchHistory.txt (4.6.11): ACTV inserts, CNCL sets the removal date."""
    flow = b.flow
    kind_rows = b.kind_rows
    problems = b.problems
    batchid = b.batchid
    dimcustomer = b.tables.dimcustomer
    dimsecurity = b.tables.dimsecurity
    factwatches = b.tables.factwatches
    watch_in = {
        "W_C_ID": "int64",
        "W_S_SYMB": "string",
        "W_ACTION": "string",
        "sk_dateid": "int64",
        "batchid": "int64",
        "line": "int64",
    }

    def prepare_watch(t: pa.Table) -> pa.Table:
        out = {name: t.column(name) for name in watch_in if name in t.column_names}
        out["sk_dateid"] = rules.sk_dateid(t.column("W_DTS"))
        return pa.table(out)

    kind_rows("WatchHistory")
    flow.map("watch_prepared", prepare_watch, schema=watch_in)
    wa = flow.transact("apply_watch", input="watch_prepared")
    placing = col("W_ACTION") == "ACTV"
    removing = col("W_ACTION") == "CNCL"
    watcher = wa.read(dimcustomer, "W_C_ID", when=placing)
    watched = wa.read(dimsecurity, "W_S_SYMB", when=placing)
    place = placing & coalesce(watcher.found, False) & coalesce(watched.found, False)
    placed = wa.insert(
        factwatches,
        ["W_C_ID", "W_S_SYMB"],
        {
            "sk_customerid": watcher["sk_customerid"],
            "sk_securityid": watched["sk_securityid"],
            "sk_dateid_dateplaced": col("sk_dateid"),
            "sk_dateid_dateremoved": NULL,
            "batchid": batchid,
        },
        if_exists="skip",
        when=place,
    )
    removed = wa.update(
        factwatches,
        ["W_C_ID", "W_S_SYMB"],
        set={"sk_dateid_dateremoved": col("sk_dateid"), "batchid": batchid},
        if_missing="skip",
        when=removing,
    )
    about = problem_text(("W_C_ID = ", "W_C_ID"), (", W_S_SYMB = ", "W_S_SYMB"))
    wa.emit(
        about.columns(),
        batchid=batchid,
        line=col("line"),
        problem=if_else(
            placing & ~place,
            "Unknown customer or security",
            if_else(
                place & coalesce(placed.found, False),
                "Watch placed twice",
                if_else(
                    removing & ~coalesce(removed.found, False),
                    "Removal of an unknown watch",
                    if_else(~placing & ~removing, "Unknown watch action", lit(None)),
                ),
            ),
        ),
    )
    problems("apply_watch", "WatchHistory", about)
