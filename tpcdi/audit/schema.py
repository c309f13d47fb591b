"""The warehouse tables of clause 3.2 as the query side sees them: lower-case names (unquoted,
case-insensitive), their NOT NULL columns, and the keys of the history-tracking dimensions.

``SPEC_NAMES`` maps a table to the specification's spelling, which the DImessages rows use as
MessageSource (``DimAccount``), so the official audit and validation queries find them.
"""

from __future__ import annotations

from dataclasses import dataclass

END_OF_TIME = "9999-12-31"


@dataclass(frozen=True)
class HistoryTable:
    """A history-tracking dimension (clause 4.4.1.1): its surrogate and natural key columns."""

    spec_name: str
    table: str
    surrogate_key: str
    natural_key: str


HISTORY_TABLES: tuple[HistoryTable, ...] = (
    HistoryTable("DimAccount", "dimaccount", "sk_accountid", "accountid"),
    HistoryTable("DimBroker", "dimbroker", "sk_brokerid", "brokerid"),
    HistoryTable("DimCompany", "dimcompany", "sk_companyid", "companyid"),
    HistoryTable("DimCustomer", "dimcustomer", "sk_customerid", "customerid"),
    HistoryTable("DimSecurity", "dimsecurity", "sk_securityid", "symbol"),
)

#: The 18 tables whose row counts the batch validation records, in the specification's order.
VALIDATION_TABLES: tuple[str, ...] = (
    "DimAccount",
    "DimBroker",
    "DimCompany",
    "DimCustomer",
    "DimDate",
    "DimSecurity",
    "DimTime",
    "DimTrade",
    "FactCashBalances",
    "FactHoldings",
    "FactMarketHistory",
    "FactWatches",
    "Financial",
    "Industry",
    "Prospect",
    "StatusType",
    "TaxRate",
    "TradeType",
)

#: Columns each table declares "Not NULL" in clause 3.2 (all columns of the table for the
#: reference tables). Clause 3.4.2: no ill-formed rows may be visible.
NOT_NULL: dict[str, tuple[str, ...]] = {
    "DimAccount": (
        "sk_accountid", "accountid", "sk_brokerid", "sk_customerid", "status", "iscurrent",
        "batchid", "effectivedate", "enddate",
    ),
    "DimBroker": (
        "sk_brokerid", "brokerid", "firstname", "lastname", "iscurrent", "batchid",
        "effectivedate", "enddate",
    ),
    "DimCompany": (
        "sk_companyid", "companyid", "status", "name", "industry", "ceo", "postalcode", "city",
        "stateprov", "description", "iscurrent", "batchid", "effectivedate", "enddate",
    ),
    "DimCustomer": (
        "sk_customerid", "customerid", "taxid", "status", "lastname", "firstname", "dob",
        "addressline1", "postalcode", "city", "stateprov", "iscurrent", "batchid",
        "effectivedate", "enddate",
    ),
    "DimDate": (
        "sk_dateid", "datevalue", "datedesc", "calendaryearid", "calendaryeardesc",
        "calendarqtrid", "calendarqtrdesc", "calendarmonthid", "calendarmonthdesc",
        "calendarweekid", "calendarweekdesc", "dayofweeknum", "dayofweekdesc", "fiscalyearid",
        "fiscalyeardesc", "fiscalqtrid", "fiscalqtrdesc",
    ),
    "DimSecurity": (
        "sk_securityid", "symbol", "issue", "status", "name", "exchangeid", "sk_companyid",
        "sharesoutstanding", "firsttrade", "firsttradeonexchange", "dividend", "iscurrent",
        "batchid", "effectivedate", "enddate",
    ),
    "DimTime": (
        "sk_timeid", "timevalue", "hourid", "hourdesc", "minuteid", "minutedesc", "secondid",
        "seconddesc",
    ),
    "DimTrade": (
        "tradeid", "sk_createdateid", "sk_createtimeid", "status", "type", "cashflag",
        "sk_securityid", "sk_companyid", "quantity", "bidprice", "sk_customerid", "sk_accountid",
        "executedby", "batchid",
    ),
    "DImessages": ("messagedateandtime", "batchid", "messagetext", "messagetype"),
    "FactCashBalances": ("sk_customerid", "sk_accountid", "sk_dateid", "cash", "batchid"),
    "FactHoldings": (
        "tradeid", "currenttradeid", "sk_customerid", "sk_accountid", "sk_securityid",
        "sk_companyid", "sk_dateid", "sk_timeid", "currentprice", "currentholding", "batchid",
    ),
    "FactMarketHistory": (
        "sk_securityid", "sk_companyid", "sk_dateid", "yield", "fiftytwoweekhigh",
        "sk_fiftytwoweekhighdate", "fiftytwoweeklow", "sk_fiftytwoweeklowdate", "closeprice",
        "dayhigh", "daylow", "volume", "batchid",
    ),
    "FactWatches": ("sk_customerid", "sk_securityid", "sk_dateid_dateplaced", "batchid"),
    "Industry": ("in_id", "in_name", "in_sc_id"),
    "Financial": (
        "sk_companyid", "fi_year", "fi_qtr", "fi_qtr_start_date", "fi_revenue", "fi_net_earn",
        "fi_basic_eps", "fi_dilut_eps", "fi_margin", "fi_inventory", "fi_assets",
        "fi_liability", "fi_out_basic", "fi_out_dilut",
    ),
    "Prospect": (
        "agencyid", "sk_recorddateid", "sk_updatedateid", "batchid", "iscustomer", "lastname",
        "firstname", "city", "state",
    ),
    "StatusType": ("st_id", "st_name"),
    "TaxRate": ("tx_id", "tx_name", "tx_rate"),
    "TradeType": ("tt_id", "tt_name", "tt_is_sell", "tt_is_mrkt"),
}  # fmt: skip


def table_name(spec_name: str) -> str:
    """The warehouse table of a specification name: ``DimAccount`` -> ``dimaccount``."""
    return spec_name.lower()
