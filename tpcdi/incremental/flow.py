"""The incremental TPC-DI dataflow (clause 4.6): the ``changes`` stream into the warehouse tables.

Its state tables *are* the warehouse's engine tables (:mod:`tpcdi.warehouse.tables`): the
migration layer merges each batch's deltas into exactly the tables the historical load filled, so
queries see one table. History tables (SCD type 2, daily grain) are DimCustomer, DimAccount,
DimSecurity and DimBroker; plain tables are DimTrade, FactCashBalances, FactWatches and Prospect;
FactHoldings, FactMarketHistory and DImessages are append-only sinks whose warehouse tables hold
exactly the specification's columns (:data:`PLAIN_SINKS`). Auxiliary state (allowed by clause
3.4.8.1) is named ``aux_*``: running cash per account, the active customers and the latest
prospect per name-and-address key, and the 52-week price window.

Steps, dimensions before facts (declaration order is the order within an engine batch; the stream
order of :mod:`tpcdi.incremental.changes` keeps it across batches):

1. ``apply_prospect`` — Prospect rows (4.6.14): insert or update; SK_UpdateDateID moves only when
   a value changed; IsCustomer from the active customers with the same key; a demographic change
   re-versions the matching current customer and its accounts (4.4.1.6.2).
2. ``apply_customer`` — Customer.txt (4.6.4): SCD2 with the latest prospect demographics; keeps
   the key counts current, flips IsCustomer of the prospects concerned, and re-versions every
   current account of the customer (4.6.1.3; inactive customer => inactive accounts).
3. ``apply_account`` — Account.txt (4.6.1): SCD2 with the current broker and customer keys.
4. ``apply_trade`` — Trade.txt (4.6.7): I inserts with the keys current at the trade's first
   appearance, U updates in place; close date and time on CMPT/CNCL.
5. ``apply_cash`` — CashTransaction.txt (4.6.8): one FactCashBalances row per account and batch
   date holding the running balance.
6. ``apply_holding`` — HoldingHistory.txt (4.6.9): FactHoldings from the current trade.
7. ``apply_market`` — DailyMarket.txt (4.6.10): 52-week high/low from the price window, PE ratio
   from the four previous quarters' EPS, yield from the current dividend.
8. ``apply_watch`` — WatchHistory.txt (4.6.11): ACTV inserts, CNCL sets the removal date.

Alerts (DImessages, MessageType ``Alert``): invalid customer tier and DOB, invalid trade commission
and fee, no earnings for a company, and every record whose references cannot be resolved (with
the file and line it came from) — a record is never dropped silently.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from etl_dataflows import Dataflow, coalesce, col, if_else, lit, old, udf
from etl_dataflows.expressions import Expr
from etl_dataflows.tables import HistoryTable
from tpcdi.incremental import rules
from tpcdi.incremental.changes import CHANGE_COLUMNS, FILE_OF
from tpcdi.incremental.reference import Reference
from tpcdi.warehouse import tables as dw

FLOW_NAME = "tpcdi"
SOURCE = "changes"
DAY_US = 86_400_000_000
#: The 52-week window (clause 4.6.10.1: back to, not including, the same date one year earlier);
#: exact for dates whose previous year has 365 days, as both incremental batch dates of DIGen.
WINDOW_SPAN = 365 * DAY_US
#: The DW table an incremental file feeds (the ``messagesource`` of its alerts, as in Batch1's).
TABLE_OF_KIND: dict[str, str] = {
    "Account": "DimAccount",
    "Trade": "DimTrade",
    "CashTransaction": "FactCashBalances",
    "HoldingHistory": "FactHoldings",
    "DailyMarket": "FactMarketHistory",
    "WatchHistory": "FactWatches",
}
#: Sinks whose warehouse table has exactly the output columns (no engine columns).
PLAIN_SINKS = ("factholdings", "factmarkethistory", "dimessages")

_NULL_I = lit(None)

ALERT_COLUMNS: dict[str, str] = {
    "messagedateandtime": "timestamp",
    "batchid": "int64",
    "messagesource": "string",
    "messagetext": "string",
    "messagetype": "string",
    "messagedata": "string",
}
#: What a transactional step emits for its alerts besides its own columns.
PROBLEM_COLUMNS: dict[str, str] = {
    "batchid": "int64",
    "problem": "string",
    "problem_data": "string",
    "line": "int64",
}


def _history_columns(table: dw.WarehouseTable, key: str, surrogate: str) -> dict[str, str]:
    skip = {key, surrogate, "iscurrent", "effectivedate", "enddate"}
    return {n: t for n, t in table.columns if n not in skip}


def _plain_columns(table: dw.WarehouseTable, keys: Sequence[str]) -> dict[str, str]:
    return {n: t for n, t in table.columns if n not in keys}


def _history(
    flow: Dataflow,
    table: dw.WarehouseTable,
    key: tuple[str, str],
    surrogate: str,
    extra: dict[str, str] | None = None,
    indexes: Sequence[str] = (),
) -> HistoryTable:
    columns = {**_history_columns(table, key[0], surrogate), **(extra or {})}
    return flow.history_table(
        table.name,
        key={key[0]: key[1]},
        columns=columns,
        surrogate=surrogate,
        effective="effectivedate",
        end="enddate",
        current="iscurrent",
        period="date",
        indexes=indexes,
    )


def _differs(*values: Any) -> bool:
    half = len(values) // 2
    return tuple(values[:half]) != tuple(values[half:])


def _now_column(n: int) -> pa.Array:
    now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None, microsecond=0)
    return pa.array([now] * n, pa.timestamp("us"))


def _text(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    return pc.fill_null(pc.cast(values, pa.string()), "null")


def _alerts(
    table: pa.Table, source: str, text: str | pa.Array, data: pa.Array, kind: str = "Alert"
) -> pa.Table:
    n = table.num_rows
    texts = pa.array([text] * n, pa.string()) if isinstance(text, str) else text
    return pa.table(
        {
            "messagedateandtime": _now_column(n),
            "batchid": table.column("batchid"),
            "messagesource": pa.array([source] * n, pa.string()),
            "messagetext": texts,
            "messagetype": pa.array([kind] * n, pa.string()),
            "messagedata": data,
        }
    )


def _where(file: str, table: pa.Table) -> pa.Array:
    """`` (<file> line <n>)`` for each row, appended to a dangling reference's message data."""
    return pc.binary_join_element_wise(
        pa.array([f" ({file} line "] * table.num_rows), _text(table.column("line")), ")", ""
    )


def build_flow(reference: Reference | None = None) -> Dataflow:
    """The incremental dataflow; ``reference`` supplies the static lookups (see
    :class:`~tpcdi.incremental.reference.Reference`; empty when ``None``, for layout-only use)."""
    ref = reference or Reference()
    flow = Dataflow(FLOW_NAME)
    # -- state tables ---------------------------------------------------------------------------
    dimcustomer = _history(
        flow,
        dw.DIMCUSTOMER,
        ("customerid", "int64"),
        "sk_customerid",
        extra={"matchkey": "string"},
    )
    dimaccount = _history(
        flow,
        dw.DIMACCOUNT,
        ("accountid", "int64"),
        "sk_accountid",
        extra={"customerid": "int64"},
        indexes=("customerid",),
    )
    dimsecurity = _history(flow, dw.DIMSECURITY, ("symbol", "string"), "sk_securityid")
    dimbroker = _history(flow, dw.DIMBROKER, ("brokerid", "int64"), "sk_brokerid")
    dimtrade = flow.table(
        "dimtrade", key={"tradeid": "int64"}, columns=_plain_columns(dw.DIMTRADE, ["tradeid"])
    )
    factcashbalances = flow.table(
        "factcashbalances",
        key={"accountid": "int64", "sk_dateid": "int64"},
        columns=_plain_columns(dw.FACTCASHBALANCES, ["sk_dateid"]),
    )
    factwatches = flow.table(
        "factwatches",
        key={"customerid": "int64", "symbol": "string"},
        columns=_plain_columns(dw.FACTWATCHES, []),
    )
    prospect = flow.table(
        "prospect",
        key={"agencyid": "string"},
        columns={**_plain_columns(dw.PROSPECT, ["agencyid"]), "matchkey": "string"},
        indexes=("matchkey",),
    )
    aux_cash = flow.table(
        "aux_cash", key={"accountid": "int64"}, columns={"cash": "float64"}, defaults={"cash": 0.0}
    )
    aux_customer_match = flow.table(
        "aux_customer_match",
        key={"matchkey": "string"},
        columns={"customerid": "int64", "active": "int64"},
        defaults={"active": 0},
    )
    aux_prospect_match = flow.table(
        "aux_prospect_match",
        key={"matchkey": "string"},
        columns={
            "agencyid": "string",
            "creditrating": "int64",
            "networth": "int64",
            "marketingnameplate": "string",
        },
    )
    aux_market_window = flow.window_table(
        "aux_market_window",
        key={"symbol": "string"},
        columns={"high": "float64", "low": "float64"},
        span=WINDOW_SPAN,
        aggregates={
            "high52": ("max", "high"),
            "high52_at": ("argmax", "high"),
            "low52": ("min", "low"),
            "low52_at": ("argmin", "low"),
        },
    )
    flow.source(SOURCE, schema=CHANGE_COLUMNS)
    alerts: list[str] = []

    def kind_rows(kind: str) -> str:
        return flow.filter(f"{kind.lower()}_rows", col("kind") == kind, input=SOURCE)

    def problems(step: str, source: str) -> None:
        """Route the rows of ``step`` that carry a problem to the alerts."""
        flow.filter(f"{step}_problems", col("problem").not_null(), input=step)

        def to_alert(table: pa.Table) -> pa.Table:
            data = pc.binary_join_element_wise(
                _text(table.column("problem_data")), _where(FILE_OF[source], table), ""
            )
            return _alerts(table, TABLE_OF_KIND[source], table.column("problem"), data)

        alerts.append(flow.map(f"{step}_alerts", to_alert, schema=ALERT_COLUMNS))

    sk_batch = col("sk_batchdate")
    batchid = col("batchid")

    # -- 1. prospects ---------------------------------------------------------------------------
    prospect_fields = [
        ("lastname", "LastName"),
        ("firstname", "FirstName"),
        ("middleinitial", "MiddleInitial"),
        ("gender", "Gender"),
        ("addressline1", "AddressLine1"),
        ("addressline2", "AddressLine2"),
        ("postalcode", "PostalCode"),
        ("city", "City"),
        ("state", "State"),
        ("country", "Country"),
        ("phone", "Phone"),
        ("income", "Income"),
        ("numbercars", "NumberCars"),
        ("numberchildren", "NumberChildren"),
        ("maritalstatus", "MaritalStatus"),
        ("age", "Age"),
        ("creditrating", "CreditRating"),
        ("ownorrentflag", "OwnOrRentFlag"),
        ("employer", "Employer"),
        ("numbercreditcards", "NumberCreditCards"),
        ("networth", "NetWorth"),
    ]
    prospect_in = {
        "AgencyID": "string",
        "batchid": "int64",
        "line": "int64",
        **{src: CHANGE_COLUMNS[src] for _, src in prospect_fields},
        "sk_batchdate": "int64",
        "matchkey": "string",
        "marketingnameplate": "string",
    }

    def prepare_prospect(t: pa.Table) -> pa.Table:
        out = {name: t.column(name) for name in prospect_in if name in t.column_names}
        out["sk_batchdate"] = rules.sk_dateid(t.column("batchdate"))
        out["matchkey"] = rules.matchkey(
            t.column("FirstName"),
            t.column("LastName"),
            t.column("AddressLine1"),
            t.column("AddressLine2"),
            t.column("PostalCode"),
        )
        out["marketingnameplate"] = rules.nameplate(
            networth=t.column("NetWorth"),
            income=t.column("Income"),
            children=t.column("NumberChildren"),
            cards=t.column("NumberCreditCards"),
            age=t.column("Age"),
            credit=t.column("CreditRating"),
            cars=t.column("NumberCars"),
        )
        return pa.table(out)

    kind_rows("Prospect")
    flow.map("prospect_prepared", prepare_prospect, schema=prospect_in)
    p = flow.transact("apply_prospect", input="prospect_prepared")
    key = col("matchkey")
    has_key = key.not_null()
    changed = udf(
        _differs,
        *[old(dst) for dst, _ in prospect_fields],
        *[col(src) for _, src in prospect_fields],
        returns="bool",
    )
    row = p.update(
        prospect,
        "AgencyID",
        set={
            "sk_recorddateid": sk_batch,
            "sk_updatedateid": if_else(changed, sk_batch, old("sk_updatedateid")),
            "batchid": batchid,
            "iscustomer": has_key & coalesce(old("iscustomer"), False),
            **{dst: col(src) for dst, src in prospect_fields},
            "marketingnameplate": col("marketingnameplate"),
            "matchkey": key,
        },
        if_missing="insert",
    )
    # only a new key (a new prospect, or a changed name or address) needs IsCustomer looked up;
    # only changed demographics need the latest-prospect index and the matching customer updated
    rekeyed = has_key & coalesce(row.before("matchkey") != key, True)
    demographics = has_key & udf(
        _differs,
        row.before("agencyid"),
        row.before("creditrating"),
        row.before("networth"),
        row.before("marketingnameplate"),
        row.before("matchkey"),
        col("AgencyID"),
        col("CreditRating"),
        col("NetWorth"),
        col("marketingnameplate"),
        key,
        returns="bool",
    )
    matched = p.read(aux_customer_match, key, when=rekeyed | demographics)
    p.update(
        prospect,
        "AgencyID",
        set={"iscustomer": coalesce(matched["active"], 0) > 0},
        when=rekeyed,
    )
    p.update(
        aux_prospect_match,
        key,
        set={
            "agencyid": col("AgencyID"),
            "creditrating": col("CreditRating"),
            "networth": col("NetWorth"),
            "marketingnameplate": col("marketingnameplate"),
        },
        if_missing="insert",
        when=demographics,
    )
    owner = matched["customerid"]
    current = p.read(dimcustomer, owner, when=demographics & owner.not_null())
    demographics_change = coalesce(current.found, False) & udf(
        _differs,
        current["agencyid"],
        current["creditrating"],
        current["networth"],
        current["marketingnameplate"],
        col("AgencyID"),
        col("CreditRating"),
        col("NetWorth"),
        col("marketingnameplate"),
        returns="bool",
    )
    reversioned = p.update(
        dimcustomer,
        owner,
        set={
            "agencyid": col("AgencyID"),
            "creditrating": col("CreditRating"),
            "networth": col("NetWorth"),
            "marketingnameplate": col("marketingnameplate"),
            "batchid": batchid,
        },
        when=demographics_change,
    )
    p.update_where(
        dimaccount,
        "customerid",
        owner,
        set={"sk_customerid": reversioned["sk_customerid"], "batchid": batchid},
        when=demographics_change,
    )

    # -- 2. customers ---------------------------------------------------------------------------
    customer_fields = [
        ("taxid", "C_TAX_ID"),
        ("lastname", "C_L_NAME"),
        ("firstname", "C_F_NAME"),
        ("middleinitial", "C_M_NAME"),
        ("tier", "C_TIER"),
        ("dob", "C_DOB"),
        ("addressline1", "C_ADLINE1"),
        ("addressline2", "C_ADLINE2"),
        ("postalcode", "C_ZIPCODE"),
        ("city", "C_CITY"),
        ("stateprov", "C_STATE_PROV"),
        ("country", "C_CTRY"),
        ("email1", "C_EMAIL_1"),
        ("email2", "C_EMAIL_2"),
    ]
    customer_in = {
        "C_ID": "int64",
        "batchid": "int64",
        "batchdate": "date",
        "line": "int64",
        **{src: CHANGE_COLUMNS[src] for _, src in customer_fields},
        "status_name": "string",
        "gender": "string",
        "phone1": "string",
        "phone2": "string",
        "phone3": "string",
        "nationaltaxratedesc": "string",
        "nationaltaxrate": "float64",
        "localtaxratedesc": "string",
        "localtaxrate": "float64",
        "matchkey": "string",
    }
    tax_names = {k: v[0] for k, v in ref.tax_rates.items()}
    tax_values = {k: v[1] for k, v in ref.tax_rates.items()}

    def prepare_customer(t: pa.Table) -> pa.Table:
        out = {name: t.column(name) for name in customer_in if name in t.column_names}
        out["status_name"] = rules.lookup(t.column("C_ST_ID"), ref.status_names, pa.string())
        out["gender"] = rules.gender(t.column("C_GNDR"))
        for n in (1, 2, 3):
            out[f"phone{n}"] = rules.phone(
                t.column(f"C_CTRY_{n}"),
                t.column(f"C_AREA_{n}"),
                t.column(f"C_LOCAL_{n}"),
                t.column(f"C_EXT_{n}"),
            )
        out["nationaltaxratedesc"] = rules.lookup(t.column("C_NAT_TX_ID"), tax_names, pa.string())
        out["nationaltaxrate"] = rules.lookup(t.column("C_NAT_TX_ID"), tax_values, pa.float64())
        out["localtaxratedesc"] = rules.lookup(t.column("C_LCL_TX_ID"), tax_names, pa.string())
        out["localtaxrate"] = rules.lookup(t.column("C_LCL_TX_ID"), tax_values, pa.float64())
        out["matchkey"] = rules.matchkey(
            t.column("C_F_NAME"),
            t.column("C_L_NAME"),
            t.column("C_ADLINE1"),
            t.column("C_ADLINE2"),
            t.column("C_ZIPCODE"),
        )
        return pa.table(out)

    kind_rows("Customer")
    flow.map("customer_prepared", prepare_customer, schema=customer_in)

    def bad_tier(t: pa.Table) -> pa.Array:
        return pc.invert(rules.known(pc.cast(t.column("C_TIER"), pa.string()), ["1", "2", "3"]))

    def bad_dob(t: pa.Table) -> pa.Array:
        dob = pc.cast(pc.cast(t.column("C_DOB"), pa.date32()), pa.int32())
        today = pc.cast(pc.cast(t.column("batchdate"), pa.date32()), pa.int32())
        limit = pa.array(
            [_years_before(d, 100) for d in t.column("batchdate").to_pylist()], pa.int32()
        )
        return pc.fill_null(pc.or_(pc.less(dob, limit), pc.greater(dob, today)), False)

    flow.filter("customer_bad_tier", bad_tier, input="customer_prepared")
    alerts.append(
        flow.map(
            "customer_tier_alerts",
            lambda t: _alerts(
                t,
                "DimCustomer",
                "Invalid customer tier",
                pc.binary_join_element_wise(
                    "C_ID = ",
                    _text(t.column("C_ID")),
                    ", C_TIER = ",
                    _text(t.column("C_TIER")),
                    "",
                ),
            ),
            schema=ALERT_COLUMNS,
        )
    )
    flow.filter("customer_bad_dob", bad_dob, input="customer_prepared")
    alerts.append(
        flow.map(
            "customer_dob_alerts",
            lambda t: _alerts(
                t,
                "DimCustomer",
                "DOB out of range",
                pc.binary_join_element_wise(
                    "C_ID = ",
                    _text(t.column("C_ID")),
                    ", C_DOB = ",
                    _text(t.column("C_DOB")),
                    "",
                ),
            ),
            schema=ALERT_COLUMNS,
        )
    )

    c = flow.transact("apply_customer", input="customer_prepared")
    new_key = col("matchkey")
    demo = c.read(aux_prospect_match, new_key, when=new_key.not_null())
    cust = c.update(
        dimcustomer,
        "C_ID",
        set={
            **{dst: col(src) for dst, src in customer_fields},
            "status": col("status_name"),
            "gender": col("gender"),
            "phone1": col("phone1"),
            "phone2": col("phone2"),
            "phone3": col("phone3"),
            "nationaltaxratedesc": col("nationaltaxratedesc"),
            "nationaltaxrate": col("nationaltaxrate"),
            "localtaxratedesc": col("localtaxratedesc"),
            "localtaxrate": col("localtaxrate"),
            "agencyid": demo["agencyid"],
            "creditrating": demo["creditrating"],
            "networth": demo["networth"],
            "marketingnameplate": demo["marketingnameplate"],
            "batchid": batchid,
            "matchkey": new_key,
        },
        if_missing="insert",
    )
    old_key = cust.before("matchkey")
    was_active = coalesce(cust.before("status") == "Active", False)
    is_active = coalesce(col("status_name") == "Active", False)
    left = c.update(
        aux_customer_match,
        old_key,
        set={
            "active": old("active") - if_else(was_active, 1, 0),
            "customerid": if_else(old("customerid") == col("C_ID"), _NULL_I, old("customerid")),
        },
        if_missing="skip",
        when=cust.found & old_key.not_null(),
    )
    joined = c.update(
        aux_customer_match,
        new_key,
        set={"active": old("active") + if_else(is_active, 1, 0), "customerid": col("C_ID")},
        if_missing="insert",
        when=new_key.not_null(),
    )
    c.update_where(
        prospect,
        "matchkey",
        old_key,
        set={"iscustomer": coalesce(left["active"], 0) > 0},
        when=cust.found & old_key.not_null() & coalesce(old_key != new_key, True),
    )
    c.update_where(
        prospect,
        "matchkey",
        new_key,
        set={"iscustomer": coalesce(joined["active"], 0) > 0},
        when=new_key.not_null(),
    )
    c.update_where(
        dimaccount,
        "customerid",
        col("C_ID"),
        set={
            "sk_customerid": cust["sk_customerid"],
            "status": if_else(col("status_name") == "Inactive", "Inactive", old("status")),
            "batchid": batchid,
        },
    )

    # -- 3. accounts ----------------------------------------------------------------------------
    account_in = {
        "CA_ID": "int64",
        "CA_B_ID": "int64",
        "CA_C_ID": "int64",
        "CA_NAME": "string",
        "CA_TAX_ST": "int64",
        "status_name": "string",
        "batchid": "int64",
        "line": "int64",
    }

    def prepare_account(t: pa.Table) -> pa.Table:
        out = {name: t.column(name) for name in account_in if name in t.column_names}
        out["status_name"] = rules.lookup(t.column("CA_ST_ID"), ref.status_names, pa.string())
        return pa.table(out)

    kind_rows("Account")
    flow.map("account_prepared", prepare_account, schema=account_in)
    a = flow.transact("apply_account", input="account_prepared")
    broker = a.read(dimbroker, "CA_B_ID")
    owner_row = a.read(dimcustomer, "CA_C_ID")
    refs = broker.found & owner_row.found
    a.update(
        dimaccount,
        "CA_ID",
        set={
            "sk_brokerid": broker["sk_brokerid"],
            "sk_customerid": owner_row["sk_customerid"],
            # 4.6.1.3: the accounts of an inactive customer are inactive (DIGen sends an
            # occasional ACTV account update for a customer that is already inactive)
            "status": if_else(owner_row["status"] == "Inactive", "Inactive", col("status_name")),
            "accountdesc": col("CA_NAME"),
            "taxstatus": col("CA_TAX_ST"),
            "batchid": batchid,
            "customerid": col("CA_C_ID"),
        },
        if_missing="insert",
        when=refs,
    )
    a.emit(
        batchid=batchid,
        line=col("line"),
        problem=if_else(refs, lit(None), "Unknown broker or customer"),
        problem_data=_joined(
            "CA_ID = ", col("CA_ID"), ", CA_B_ID = ", col("CA_B_ID"), ", CA_C_ID = ", col("CA_C_ID")
        ),
    )
    problems("apply_account", "Account")

    # -- 4. trades ------------------------------------------------------------------------------
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
                f"{step}_alerts",
                _trade_alert(column, text),
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
            "sk_closedateid": if_else(closing, col("sk_dateid"), _NULL_I),
            "sk_closetimeid": if_else(closing, col("sk_timeid"), _NULL_I),
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
    tr.emit(
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
        problem_data=_joined(
            "T_ID = ", col("T_ID"), ", T_CA_ID = ", col("T_CA_ID"), ", T_S_SYMB = ", col("T_S_SYMB")
        ),
    )
    problems("apply_trade", "Trade")

    # -- 5. cash --------------------------------------------------------------------------------
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
    ca.emit(
        batchid=batchid,
        line=col("line"),
        problem=if_else(holder.found, lit(None), "Unknown account"),
        problem_data=_joined("CT_CA_ID = ", col("CT_CA_ID")),
    )
    problems("apply_cash", "CashTransaction")

    # -- 6. holdings ----------------------------------------------------------------------------
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
    ho.emit(
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
        problem_data=_joined("HH_H_T_ID = ", col("HH_H_T_ID"), ", HH_T_ID = ", col("HH_T_ID")),
    )
    flow.filter("holding_found", col("problem").is_null(), input="apply_holding")
    holdings_schema = dict(dw.FACTHOLDINGS.columns)
    flow.map(
        "factholdings_rows",
        lambda t: t.select(list(holdings_schema)),
        schema=holdings_schema,
    )
    flow.sink("factholdings", input="factholdings_rows")
    problems("apply_holding", "HoldingHistory")

    # -- 7. daily market ------------------------------------------------------------------------
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
        symbols = t.column("DM_S_SYMB").to_pylist()
        dates = t.column("DM_DATE").to_pylist()
        out["eps4"] = pa.array(
            [
                None if s is None or d is None else ref.eps4(s, d)
                for s, d in zip(symbols, dates, strict=True)
            ],
            pa.float64(),
        )
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
    mk.emit(
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
        problem_data=_joined("DM_S_SYMB = ", col("DM_S_SYMB")),
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
            "sk_fiftytwoweekhighdate": _sk_of_micros(t.column("high52_at")),
            "fiftytwoweeklow": t.column("low52"),
            "sk_fiftytwoweeklowdate": _sk_of_micros(t.column("low52_at")),
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
            lambda t: _alerts(
                t,
                "FactMarketHistory",
                "No earnings for company",
                pc.binary_join_element_wise("DM_S_SYMB = ", _text(t.column("symbol")), ""),
            ),
            schema=ALERT_COLUMNS,
        )
    )
    problems("apply_market", "DailyMarket")

    # -- 8. watches -----------------------------------------------------------------------------
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
            "sk_dateid_dateremoved": _NULL_I,
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
    wa.emit(
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
        problem_data=_joined("W_C_ID = ", col("W_C_ID"), ", W_S_SYMB = ", col("W_S_SYMB")),
    )
    problems("apply_watch", "WatchHistory")

    # -- alerts -> DImessages --------------------------------------------------------------------
    flow.merge("alerts", alerts)
    flow.map("dimessages_rows", lambda t: t.select(list(ALERT_COLUMNS)), schema=ALERT_COLUMNS)
    flow.sink("dimessages", input="dimessages_rows")
    return flow


def _joined(*parts: object) -> Expr:
    """Text of literals and column values (null values written as ``null``)."""
    return udf(
        lambda *values: "".join("null" if v is None else str(v) for v in values),
        *parts,
        returns="string",
    )


def _sk_of_micros(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    days = pc.cast(pc.divide(pc.cast(values, pa.int64()), DAY_US), pa.int32())
    return rules.sk_dateid(pc.cast(days, pa.date32()))


def _years_before(day: datetime.date | None, years: int) -> int | None:
    if day is None:
        return None
    try:
        earlier = day.replace(year=day.year - years)
    except ValueError:  # 29 February
        earlier = day.replace(year=day.year - years, day=28)
    return (earlier - datetime.date(1970, 1, 1)).days


def _trade_alert(column: str, text: str) -> Callable[[pa.Table], pa.Table]:
    def to_alert(t: pa.Table) -> pa.Table:
        data = pc.binary_join_element_wise(
            "T_ID = ", _text(t.column("T_ID")), f", {column} = ", _text(t.column(column)), ""
        )
        return _alerts(t, "DimTrade", text, data)

    return to_alert
