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
order of :mod:`tpcdi.incremental.changes` keeps it across batches), declared by
:mod:`tpcdi.incremental.dimension_steps` (1-3) and :mod:`tpcdi.incremental.fact_steps` (4-8) on
a :class:`~tpcdi.incremental.builder.FlowBuilder`:

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

from etl_dataflows import Dataflow
from tpcdi.incremental import dimension_steps, fact_steps
from tpcdi.incremental.builder import (
    ALERT_COLUMNS,
    FLOW_NAME,
    PLAIN_SINKS,
    SOURCE,
    TABLE_OF_KIND,
    WINDOW_SPAN,
    FlowBuilder,
    FlowTables,
    declare_history,
    display_name,
    plain_columns,
)
from tpcdi.incremental.changes import CHANGE_COLUMNS
from tpcdi.incremental.reference import Reference
from tpcdi.warehouse import tables as dw

__all__ = ["ALERT_COLUMNS", "FLOW_NAME", "PLAIN_SINKS", "SOURCE", "TABLE_OF_KIND", "build_flow"]


#: The versions of the dataflow :func:`build_flow` declares: 1 is the specification's; 2 is the
#: example of an upgrade over live state (docs/evolution.md, ``tpcdi run --upgrade-between``).
VERSIONS = (1, 2)


def build_flow(reference: Reference | None = None, *, version: int = 1) -> Dataflow:
    """The incremental dataflow; ``reference`` supplies the static lookups (see
    :class:`~tpcdi.incremental.reference.Reference`; empty when ``None``, for layout-only use).

    ``version=2`` is an upgrade of it: DimCustomer gains ``displayname`` (first and last name;
    the customers already stored get it from their own columns, a change sets it from the
    record), and a new sink ``customer_changes`` delivers every customer record as prepared."""
    if version not in VERSIONS:
        raise ValueError(f"TPC-DI dataflow version {version} is not one of {VERSIONS}")
    ref = reference or Reference()
    flow = Dataflow(FLOW_NAME)
    # -- state tables ---------------------------------------------------------------------------
    upgraded = version >= 2
    dimcustomer = declare_history(
        flow,
        dw.DIMCUSTOMER,
        ("customerid", "int64"),
        "sk_customerid",
        extra={"matchkey": "string", **({"displayname": "string"} if upgraded else {})},
        fills={"displayname": display_name("firstname", "lastname")} if upgraded else None,
    )
    dimaccount = declare_history(
        flow,
        dw.DIMACCOUNT,
        ("accountid", "int64"),
        "sk_accountid",
        extra={"customerid": "int64"},
        indexes=("customerid",),
    )
    dimsecurity = declare_history(flow, dw.DIMSECURITY, ("symbol", "string"), "sk_securityid")
    dimbroker = declare_history(flow, dw.DIMBROKER, ("brokerid", "int64"), "sk_brokerid")
    dimtrade = flow.table(
        "dimtrade", key={"tradeid": "int64"}, columns=plain_columns(dw.DIMTRADE, ["tradeid"])
    )
    factcashbalances = flow.table(
        "factcashbalances",
        key={"accountid": "int64", "sk_dateid": "int64"},
        columns=plain_columns(dw.FACTCASHBALANCES, ["sk_dateid"]),
    )
    factwatches = flow.table(
        "factwatches",
        key={"customerid": "int64", "symbol": "string"},
        columns=plain_columns(dw.FACTWATCHES, []),
    )
    prospect = flow.table(
        "prospect",
        key={"agencyid": "string"},
        columns={
            **plain_columns(dw.PROSPECT, ["agencyid"]),
            "matchkey": "string",
            "prospectvalues": "string",
        },
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
    b = FlowBuilder(
        flow=flow,
        ref=ref,
        version=version,
        tables=FlowTables(
            dimcustomer=dimcustomer,
            dimaccount=dimaccount,
            dimsecurity=dimsecurity,
            dimbroker=dimbroker,
            dimtrade=dimtrade,
            factcashbalances=factcashbalances,
            factwatches=factwatches,
            prospect=prospect,
            aux_cash=aux_cash,
            aux_customer_match=aux_customer_match,
            aux_prospect_match=aux_prospect_match,
            aux_market_window=aux_market_window,
        ),
    )
    # dimensions before facts: the declaration order is the order within an engine batch
    dimension_steps.add_prospects(b)
    dimension_steps.add_customers(b)
    dimension_steps.add_accounts(b)
    fact_steps.add_trades(b)
    fact_steps.add_cash(b)
    fact_steps.add_holdings(b)
    fact_steps.add_market(b)
    fact_steps.add_watches(b)
    # alerts -> DImessages
    flow.merge("alerts", b.alerts)
    flow.map("dimessages_rows", lambda t: t.select(list(ALERT_COLUMNS)), schema=ALERT_COLUMNS)
    flow.sink("dimessages", input="dimessages_rows")
    if upgraded:
        flow.sink("customer_changes", input="customer_prepared")
    return flow
