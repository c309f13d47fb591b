"""The data warehouse of TPC-DI clause 3.2: every table, its columns and their types.

Names are the specification's in lower case (``dimcustomer.sk_customerid``), so the official audit
and validation queries run unquoted on PostgreSQL and DuckDB. Types: identifiers, counts and
surrogate keys ``int64`` (BIGINT), money and rates ``float64`` (DOUBLE), ``date``, ``timestamp``,
``time`` (DimTime.TimeValue), ``bool`` and ``string``.

Two kinds of table:

* **engine tables** are state tables or sinks of the incremental dataflow
  (:mod:`tpcdi.incremental.flow`); the migration layer creates and merges them, and they may carry
  extra engine columns (``_valid_from``/``_valid_to`` of history tables, natural keys a table is
  keyed by). Their spec columns are listed here and the dataflow declares exactly these.
* **static tables** are loaded once by the historical load and never change afterwards
  (DimDate, DimTime, Industry, StatusType, TaxRate, TradeType, DimCompany, Financial) plus the
  Audit table the audit phase fills.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

WarehouseType = Literal["int64", "float64", "bool", "string", "timestamp", "date", "time"]
Columns = tuple[tuple[str, WarehouseType], ...]

#: EndDate of a current version (clause 4.4.1.2).
END_OF_TIME = "9999-12-31"

_HISTORY_TAIL: Columns = (
    ("iscurrent", "bool"),
    ("batchid", "int64"),
    ("effectivedate", "date"),
    ("enddate", "date"),
)


@dataclass(frozen=True)
class WarehouseTable:
    """One DW table: its spec columns in spec order; ``engine`` when the incremental dataflow
    owns it (a state table or a sink) and ``history`` for SCD type 2 dimensions."""

    name: str
    columns: Columns
    engine: bool = False
    history: bool = False

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.columns)

    def types(self) -> dict[str, WarehouseType]:
        return dict(self.columns)


DIMACCOUNT = WarehouseTable(
    "dimaccount",
    (
        ("sk_accountid", "int64"),
        ("accountid", "int64"),
        ("sk_brokerid", "int64"),
        ("sk_customerid", "int64"),
        ("status", "string"),
        ("accountdesc", "string"),
        ("taxstatus", "int64"),
        *_HISTORY_TAIL,
    ),
    engine=True,
    history=True,
)
DIMBROKER = WarehouseTable(
    "dimbroker",
    (
        ("sk_brokerid", "int64"),
        ("brokerid", "int64"),
        ("managerid", "int64"),
        ("firstname", "string"),
        ("lastname", "string"),
        ("middleinitial", "string"),
        ("branch", "string"),
        ("office", "string"),
        ("phone", "string"),
        *_HISTORY_TAIL,
    ),
    engine=True,
    history=True,
)
DIMCOMPANY = WarehouseTable(
    "dimcompany",
    (
        ("sk_companyid", "int64"),
        ("companyid", "int64"),
        ("status", "string"),
        ("name", "string"),
        ("industry", "string"),
        ("sprating", "string"),
        ("islowgrade", "bool"),
        ("ceo", "string"),
        ("addressline1", "string"),
        ("addressline2", "string"),
        ("postalcode", "string"),
        ("city", "string"),
        ("stateprov", "string"),
        ("country", "string"),
        ("description", "string"),
        ("foundingdate", "date"),
        *_HISTORY_TAIL,
    ),
    history=True,
)
DIMCUSTOMER = WarehouseTable(
    "dimcustomer",
    (
        ("sk_customerid", "int64"),
        ("customerid", "int64"),
        ("taxid", "string"),
        ("status", "string"),
        ("lastname", "string"),
        ("firstname", "string"),
        ("middleinitial", "string"),
        ("gender", "string"),
        ("tier", "int64"),
        ("dob", "date"),
        ("addressline1", "string"),
        ("addressline2", "string"),
        ("postalcode", "string"),
        ("city", "string"),
        ("stateprov", "string"),
        ("country", "string"),
        ("phone1", "string"),
        ("phone2", "string"),
        ("phone3", "string"),
        ("email1", "string"),
        ("email2", "string"),
        ("nationaltaxratedesc", "string"),
        ("nationaltaxrate", "float64"),
        ("localtaxratedesc", "string"),
        ("localtaxrate", "float64"),
        ("agencyid", "string"),
        ("creditrating", "int64"),
        ("networth", "int64"),
        ("marketingnameplate", "string"),
        *_HISTORY_TAIL,
    ),
    engine=True,
    history=True,
)
DIMDATE = WarehouseTable(
    "dimdate",
    (
        ("sk_dateid", "int64"),
        ("datevalue", "date"),
        ("datedesc", "string"),
        ("calendaryearid", "int64"),
        ("calendaryeardesc", "string"),
        ("calendarqtrid", "int64"),
        ("calendarqtrdesc", "string"),
        ("calendarmonthid", "int64"),
        ("calendarmonthdesc", "string"),
        ("calendarweekid", "int64"),
        ("calendarweekdesc", "string"),
        ("dayofweeknum", "int64"),
        ("dayofweekdesc", "string"),
        ("fiscalyearid", "int64"),
        ("fiscalyeardesc", "string"),
        ("fiscalqtrid", "int64"),
        ("fiscalqtrdesc", "string"),
        ("holidayflag", "bool"),
    ),
)
DIMSECURITY = WarehouseTable(
    "dimsecurity",
    (
        ("sk_securityid", "int64"),
        ("symbol", "string"),
        ("issue", "string"),
        ("status", "string"),
        ("name", "string"),
        ("exchangeid", "string"),
        ("sk_companyid", "int64"),
        ("sharesoutstanding", "int64"),
        ("firsttrade", "date"),
        ("firsttradeonexchange", "date"),
        ("dividend", "float64"),
        *_HISTORY_TAIL,
    ),
    engine=True,
    history=True,
)
DIMTIME = WarehouseTable(
    "dimtime",
    (
        ("sk_timeid", "int64"),
        ("timevalue", "time"),
        ("hourid", "int64"),
        ("hourdesc", "string"),
        ("minuteid", "int64"),
        ("minutedesc", "string"),
        ("secondid", "int64"),
        ("seconddesc", "string"),
        ("markethoursflag", "bool"),
        ("officehoursflag", "bool"),
    ),
)
DIMTRADE = WarehouseTable(
    "dimtrade",
    (
        ("tradeid", "int64"),
        ("sk_brokerid", "int64"),
        ("sk_createdateid", "int64"),
        ("sk_createtimeid", "int64"),
        ("sk_closedateid", "int64"),
        ("sk_closetimeid", "int64"),
        ("status", "string"),
        ("type", "string"),
        ("cashflag", "bool"),
        ("sk_securityid", "int64"),
        ("sk_companyid", "int64"),
        ("quantity", "int64"),
        ("bidprice", "float64"),
        ("sk_customerid", "int64"),
        ("sk_accountid", "int64"),
        ("executedby", "string"),
        ("tradeprice", "float64"),
        ("fee", "float64"),
        ("commission", "float64"),
        ("tax", "float64"),
        ("batchid", "int64"),
    ),
    engine=True,
)
DIMESSAGES = WarehouseTable(
    "dimessages",
    (
        ("messagedateandtime", "timestamp"),
        ("batchid", "int64"),
        ("messagesource", "string"),
        ("messagetext", "string"),
        ("messagetype", "string"),
        ("messagedata", "string"),
    ),
    engine=True,
)
FACTCASHBALANCES = WarehouseTable(
    "factcashbalances",
    (
        ("sk_customerid", "int64"),
        ("sk_accountid", "int64"),
        ("sk_dateid", "int64"),
        ("cash", "float64"),
        ("batchid", "int64"),
    ),
    engine=True,
)
FACTHOLDINGS = WarehouseTable(
    "factholdings",
    (
        ("tradeid", "int64"),
        ("currenttradeid", "int64"),
        ("sk_customerid", "int64"),
        ("sk_accountid", "int64"),
        ("sk_securityid", "int64"),
        ("sk_companyid", "int64"),
        ("sk_dateid", "int64"),
        ("sk_timeid", "int64"),
        ("currentprice", "float64"),
        ("currentholding", "int64"),
        ("batchid", "int64"),
    ),
    engine=True,
)
FACTMARKETHISTORY = WarehouseTable(
    "factmarkethistory",
    (
        ("sk_securityid", "int64"),
        ("sk_companyid", "int64"),
        ("sk_dateid", "int64"),
        ("peratio", "float64"),
        ("yield", "float64"),
        ("fiftytwoweekhigh", "float64"),
        ("sk_fiftytwoweekhighdate", "int64"),
        ("fiftytwoweeklow", "float64"),
        ("sk_fiftytwoweeklowdate", "int64"),
        ("closeprice", "float64"),
        ("dayhigh", "float64"),
        ("daylow", "float64"),
        ("volume", "int64"),
        ("batchid", "int64"),
    ),
    engine=True,
)
FACTWATCHES = WarehouseTable(
    "factwatches",
    (
        ("sk_customerid", "int64"),
        ("sk_securityid", "int64"),
        ("sk_dateid_dateplaced", "int64"),
        ("sk_dateid_dateremoved", "int64"),
        ("batchid", "int64"),
    ),
    engine=True,
)
INDUSTRY = WarehouseTable(
    "industry", (("in_id", "string"), ("in_name", "string"), ("in_sc_id", "string"))
)
FINANCIAL = WarehouseTable(
    "financial",
    (
        ("sk_companyid", "int64"),
        ("fi_year", "int64"),
        ("fi_qtr", "int64"),
        ("fi_qtr_start_date", "date"),
        ("fi_revenue", "float64"),
        ("fi_net_earn", "float64"),
        ("fi_basic_eps", "float64"),
        ("fi_dilut_eps", "float64"),
        ("fi_margin", "float64"),
        ("fi_inventory", "float64"),
        ("fi_assets", "float64"),
        ("fi_liability", "float64"),
        ("fi_out_basic", "int64"),
        ("fi_out_dilut", "int64"),
    ),
)
PROSPECT = WarehouseTable(
    "prospect",
    (
        ("agencyid", "string"),
        ("sk_recorddateid", "int64"),
        ("sk_updatedateid", "int64"),
        ("batchid", "int64"),
        ("iscustomer", "bool"),
        ("lastname", "string"),
        ("firstname", "string"),
        ("middleinitial", "string"),
        ("gender", "string"),
        ("addressline1", "string"),
        ("addressline2", "string"),
        ("postalcode", "string"),
        ("city", "string"),
        ("state", "string"),
        ("country", "string"),
        ("phone", "string"),
        ("income", "int64"),
        ("numbercars", "int64"),
        ("numberchildren", "int64"),
        ("maritalstatus", "string"),
        ("age", "int64"),
        ("creditrating", "int64"),
        ("ownorrentflag", "string"),
        ("employer", "string"),
        ("numbercreditcards", "int64"),
        ("networth", "int64"),
        ("marketingnameplate", "string"),
    ),
    engine=True,
)
STATUSTYPE = WarehouseTable("statustype", (("st_id", "string"), ("st_name", "string")))
TAXRATE = WarehouseTable(
    "taxrate", (("tx_id", "string"), ("tx_name", "string"), ("tx_rate", "float64"))
)
TRADETYPE = WarehouseTable(
    "tradetype",
    (
        ("tt_id", "string"),
        ("tt_name", "string"),
        ("tt_is_sell", "int64"),
        ("tt_is_mrkt", "int64"),
    ),
)
AUDIT = WarehouseTable(
    "audit",
    (
        ("dataset", "string"),
        ("batchid", "int64"),
        ("date", "date"),
        ("attribute", "string"),
        ("value", "int64"),
        ("dvalue", "float64"),
    ),
)

#: Every DW table of clause 3.2, by name.
TABLES: dict[str, WarehouseTable] = {
    t.name: t
    for t in (
        DIMACCOUNT,
        DIMBROKER,
        DIMCOMPANY,
        DIMCUSTOMER,
        DIMDATE,
        DIMSECURITY,
        DIMTIME,
        DIMTRADE,
        DIMESSAGES,
        FACTCASHBALANCES,
        FACTHOLDINGS,
        FACTMARKETHISTORY,
        FACTWATCHES,
        INDUSTRY,
        FINANCIAL,
        PROSPECT,
        STATUSTYPE,
        TAXRATE,
        TRADETYPE,
        AUDIT,
    )
}
STATIC_TABLES: tuple[str, ...] = tuple(n for n, t in TABLES.items() if not t.engine)
ENGINE_TABLES: tuple[str, ...] = tuple(n for n, t in TABLES.items() if t.engine)
#: The tables the batch validation query counts (DImessages and Audit are not among them).
COUNTED_TABLES: tuple[str, ...] = tuple(n for n in TABLES if n not in ("dimessages", "audit"))
