"""The registry of every file DIGen writes: name, format, typed columns, and the batches it is in.

Column types follow clause 2.2 of the TPC-DI specification, mapped to Arrow:

* identifiers, counts, quantities (``IDENT_T``, ``TRADE_T``, ``S_COUNT_T``, ``NUM``) -> ``int64``;
* money and rates (``S_PRICE_T``, ``VALUE_T``, ``BALANCE_T``, ``SNUM(m,n)``) -> ``float64``. Every
  value has at most two decimals (tax rates five) and at most 15 significant digits, so the double
  nearest to the text round-trips exactly when formatted back with its scale, and ``float64`` is
  what the engine, numpy, DuckDB and Spark all compute on without conversion;
* ``DATE`` -> ``date32``, ``DATETIME`` -> ``timestamp[us]``, time of day -> ``time32[s]``;
* ``BOOLEAN`` -> ``bool`` (DIGen writes ``0``/``1`` in Trade.txt, ``true``/``false`` in Date.txt
  and Time.txt; both are accepted);
* everything else (``CHAR(n)``, codes, phone parts with leading zeros) -> ``string``.

An empty field is null. ``required`` marks the fields the specification declares ``Not NULL``: a
line with such a field empty is rejected.

Files of incremental batches (Batch2, Batch3, and every later one of a longer daily feed) start
with ``CDC_FLAG`` and ``CDC_DSN`` where the specification says so (:attr:`SourceFile.cdc_batches`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

import pyarrow as pa

from tpcdi.exceptions import UnknownSourceFile

SourceFormat = Literal["pipe", "csv", "xml", "finwire", "batch_date", "audit"]

I64 = pa.int64()
F64 = pa.float64()
STR = pa.string()
DATE = pa.date32()
TS = pa.timestamp("us")
TIME = pa.time32("s")
BOOL = pa.bool_()

HISTORICAL, INCREMENTAL = (1,), (2, 3)
ALL_BATCHES = (1, 2, 3)


def batch_kind(batch: int) -> int:
    """1 for the historical load's batch, 2 for any incremental batch (Batch2, Batch3, ...): the
    registry's ``batches`` name DIGen's three, and every incremental batch has Batch2's files."""
    return 1 if batch <= 1 else 2


@dataclass(frozen=True)
class Field:
    """One column of a source file. ``width`` is the fixed width of a FINWIRE field."""

    name: str
    type: pa.DataType
    required: bool = False
    width: int = 0


def _f(name: str, type_: pa.DataType, required: bool = False, width: int = 0) -> Field:
    return Field(name, type_, required, width)


CDC_FIELDS = (_f("CDC_FLAG", STR, True), _f("CDC_DSN", I64, True))


@dataclass(frozen=True)
class SourceFile:
    """What DIGen writes under one name.

    ``fields`` are the columns of a delimited file (without the CDC columns) or of the table the
    XML reader returns; ``record_types`` are the FINWIRE record layouts (``CMP``, ``SEC``,
    ``FIN``), each a sequence of fixed-width fields after the 15-character PTS and the 3-character
    record type.
    """

    name: str
    format: SourceFormat
    batches: tuple[int, ...]
    fields: tuple[Field, ...] = ()
    cdc_batches: tuple[int, ...] = ()
    header: bool = False
    record_types: dict[str, tuple[Field, ...]] = field(default_factory=dict)
    description: str = ""

    def in_batch(self, batch: int) -> bool:
        """Whether DIGen writes this file into ``Batch<batch>`` (any incremental batch as
        Batch2)."""
        return batch_kind(batch) in self.batches

    def fields_for(self, batch: int) -> tuple[Field, ...]:
        """The columns of this file in ``batch`` (CDC columns first where the batch has them)."""
        return CDC_FIELDS + self.fields if batch_kind(batch) in self.cdc_batches else self.fields

    def schema(self, batch: int) -> pa.Schema:
        """The Arrow schema the reader returns for this file in ``batch``."""
        return pa.schema(
            [pa.field(f.name, f.type, nullable=not f.required) for f in self.fields_for(batch)]
        )


_ACCOUNT = (
    _f("CA_ID", I64, True),
    _f("CA_B_ID", I64, True),
    _f("CA_C_ID", I64, True),
    _f("CA_NAME", STR),
    _f("CA_TAX_ST", I64),
    _f("CA_ST_ID", STR),
)
_CASH_TRANSACTION = (
    _f("CT_CA_ID", I64, True),
    _f("CT_DTS", TS, True),
    _f("CT_AMT", F64, True),
    _f("CT_NAME", STR, True),
)
_PHONE_FIELDS = tuple(
    _f(f"C_{part}_{n}", STR) for n in (1, 2, 3) for part in ("CTRY", "AREA", "LOCAL", "EXT")
)
#: Customer.txt columns; CustomerMgmt.xml's reader uses the same names for the same data.
CUSTOMER_FIELDS = (
    _f("C_ID", I64, True),
    _f("C_TAX_ID", STR, True),
    _f("C_ST_ID", STR),
    _f("C_L_NAME", STR, True),
    _f("C_F_NAME", STR, True),
    _f("C_M_NAME", STR),
    _f("C_GNDR", STR),
    _f("C_TIER", I64),
    _f("C_DOB", DATE, True),
    _f("C_ADLINE1", STR, True),
    _f("C_ADLINE2", STR),
    _f("C_ZIPCODE", STR, True),
    _f("C_CITY", STR, True),
    _f("C_STATE_PROV", STR, True),
    _f("C_CTRY", STR),
    *_PHONE_FIELDS,
    _f("C_EMAIL_1", STR),
    _f("C_EMAIL_2", STR),
    _f("C_LCL_TX_ID", STR, True),
    _f("C_NAT_TX_ID", STR, True),
)
_DAILY_MARKET = (
    _f("DM_DATE", DATE, True),
    _f("DM_S_SYMB", STR, True),
    _f("DM_CLOSE", F64, True),
    _f("DM_HIGH", F64, True),
    _f("DM_LOW", F64, True),
    _f("DM_VOL", I64, True),
)
_DATE = (
    _f("SK_DateID", I64, True),
    _f("DateValue", DATE, True),
    _f("DateDesc", STR, True),
    _f("CalendarYearID", I64, True),
    _f("CalendarYearDesc", STR, True),
    _f("CalendarQtrID", I64, True),
    _f("CalendarQtrDesc", STR, True),
    _f("CalendarMonthID", I64, True),
    _f("CalendarMonthDesc", STR, True),
    _f("CalendarWeekID", I64, True),
    _f("CalendarWeekDesc", STR, True),
    _f("DayOfWeekNum", I64, True),
    _f("DayOfWeekDesc", STR, True),
    _f("FiscalYearID", I64, True),
    _f("FiscalYearDesc", STR, True),
    _f("FiscalQtrID", I64, True),
    _f("FiscalQtrDesc", STR, True),
    _f("HolidayFlag", BOOL),
)
_HOLDING_HISTORY = (
    _f("HH_H_T_ID", I64, True),
    _f("HH_T_ID", I64, True),
    _f("HH_BEFORE_QTY", I64, True),
    _f("HH_AFTER_QTY", I64, True),
)
_HR = (
    _f("EmployeeID", I64, True),
    _f("ManagerID", I64, True),
    _f("EmployeeFirstName", STR, True),
    _f("EmployeeLastName", STR, True),
    _f("EmployeeMI", STR),
    _f("EmployeeJobCode", I64),
    _f("EmployeeBranch", STR),
    _f("EmployeeOffice", STR),
    _f("EmployeePhone", STR),
)
_INDUSTRY = (_f("IN_ID", STR, True), _f("IN_NAME", STR, True), _f("IN_SC_ID", STR, True))
_PROSPECT = (
    _f("AgencyID", STR, True),
    _f("LastName", STR, True),
    _f("FirstName", STR, True),
    _f("MiddleInitial", STR),
    _f("Gender", STR),
    _f("AddressLine1", STR),
    _f("AddressLine2", STR),
    _f("PostalCode", STR),
    _f("City", STR, True),
    _f("State", STR, True),
    _f("Country", STR),
    _f("Phone", STR),
    _f("Income", I64),
    _f("NumberCars", I64),
    _f("NumberChildren", I64),
    _f("MaritalStatus", STR),
    _f("Age", I64),
    _f("CreditRating", I64),
    _f("OwnOrRentFlag", STR),
    _f("Employer", STR),
    _f("NumberCreditCards", I64),
    _f("NetWorth", I64),
)
_STATUS_TYPE = (_f("ST_ID", STR, True), _f("ST_NAME", STR, True))
_TAX_RATE = (_f("TX_ID", STR, True), _f("TX_NAME", STR, True), _f("TX_RATE", F64, True))
_TIME = (
    _f("SK_TimeID", I64, True),
    _f("TimeValue", TIME, True),
    _f("HourID", I64, True),
    _f("HourDesc", STR, True),
    _f("MinuteID", I64, True),
    _f("MinuteDesc", STR, True),
    _f("SecondID", I64, True),
    _f("SecondDesc", STR, True),
    _f("MarketHoursFlag", BOOL),
    _f("OfficeHoursFlag", BOOL),
)
_TRADE_HISTORY = (_f("TH_T_ID", I64, True), _f("TH_DTS", TS, True), _f("TH_ST_ID", STR, True))
_TRADE = (
    _f("T_ID", I64, True),
    _f("T_DTS", TS, True),
    _f("T_ST_ID", STR, True),
    _f("T_TT_ID", STR, True),
    _f("T_IS_CASH", BOOL),
    _f("T_S_SYMB", STR, True),
    _f("T_QTY", I64),
    _f("T_BID_PRICE", F64),
    _f("T_CA_ID", I64, True),
    _f("T_EXEC_NAME", STR, True),
    _f("T_TRADE_PRICE", F64),
    _f("T_CHRG", F64),
    _f("T_COMM", F64),
    _f("T_TAX", F64),
)
_TRADE_TYPE = (
    _f("TT_ID", STR, True),
    _f("TT_NAME", STR, True),
    _f("TT_IS_SELL", I64, True),
    _f("TT_IS_MRKT", I64, True),
)
_WATCH_HISTORY = (
    _f("W_C_ID", I64, True),
    _f("W_S_SYMB", STR, True),
    _f("W_DTS", TS, True),
    _f("W_ACTION", STR, True),
)
#: Columns of every ``*_audit.csv`` (clause 2.2.2.20); the file's header line is not data.
AUDIT_FIELDS = (
    _f("DataSet", STR, True),
    _f("BatchID", I64),
    _f("Date", DATE),
    _f("Attribute", STR, True),
    _f("Value", I64),
    _f("DValue", F64),
)

_PTS = (_f("PTS", TS, True), _f("RecType", STR, True))
_CO_NAME_OR_CIK = _f("CoNameOrCIK", STR, True, 60)
#: FINWIRE record layouts (clause 2.2.2.8) after PTS (15) and RecType (3). The last SEC/FIN
#: field is 60 characters (a company name) or 10 (a CIK).
FINWIRE_RECORDS: dict[str, tuple[Field, ...]] = {
    "CMP": (
        _f("CompanyName", STR, True, 60),
        _f("CIK", I64, True, 10),
        _f("Status", STR, True, 4),
        _f("IndustryID", STR, True, 2),
        _f("SPrating", STR, False, 4),
        _f("FoundingDate", DATE, False, 8),
        _f("AddrLine1", STR, True, 80),
        _f("AddrLine2", STR, False, 80),
        _f("PostalCode", STR, True, 12),
        _f("City", STR, True, 25),
        _f("StateProvince", STR, True, 20),
        _f("Country", STR, False, 24),
        _f("CEOname", STR, True, 46),
        _f("Description", STR, True, 150),
    ),
    "SEC": (
        _f("Symbol", STR, True, 15),
        _f("IssueType", STR, True, 6),
        _f("Status", STR, True, 4),
        _f("Name", STR, True, 70),
        _f("ExID", STR, True, 6),
        _f("ShOut", I64, True, 13),
        _f("FirstTradeDate", DATE, True, 8),
        _f("FirstTradeExchg", DATE, True, 8),
        _f("Dividend", F64, True, 12),
        _CO_NAME_OR_CIK,
    ),
    "FIN": (
        _f("Year", I64, True, 4),
        _f("Quarter", I64, True, 1),
        _f("QtrStartDate", DATE, True, 8),
        _f("PostingDate", DATE, True, 8),
        _f("Revenue", F64, True, 17),
        _f("Earnings", F64, True, 17),
        _f("EPS", F64, True, 12),
        _f("DilutedEPS", F64, True, 12),
        _f("Margin", F64, True, 12),
        _f("Inventory", F64, True, 17),
        _f("Assets", F64, True, 17),
        _f("Liabilities", F64, True, 17),
        _f("ShOut", I64, True, 13),
        _f("DilutedShOut", I64, True, 13),
        _CO_NAME_OR_CIK,
    ),
}


def _source(
    name: str,
    fmt: SourceFormat,
    batches: tuple[int, ...],
    fields: tuple[Field, ...] = (),
    *,
    cdc: tuple[int, ...] = (),
    description: str = "",
) -> SourceFile:
    return SourceFile(name, fmt, batches, fields, cdc, description=description)


#: Every source file by name. FINWIRE quarter files (``FINWIRE2003Q1``…) share the entry
#: ``FINWIRE``; every ``<name>_audit.csv`` shares ``audit``.
SOURCE_FILES: dict[str, SourceFile] = {
    s.name: s
    for s in (
        _source(
            "Account.txt",
            "pipe",
            INCREMENTAL,
            _ACCOUNT,
            cdc=INCREMENTAL,
            description="account changes (CDC extract)",
        ),
        _source(
            "BatchDate.txt",
            "batch_date",
            ALL_BATCHES,
            (_f("BatchDate", DATE, True),),
            description="the batch date",
        ),
        _source(
            "CashTransaction.txt",
            "pipe",
            ALL_BATCHES,
            _CASH_TRANSACTION,
            cdc=INCREMENTAL,
            description="cash transactions",
        ),
        _source(
            "Customer.txt",
            "pipe",
            INCREMENTAL,
            CUSTOMER_FIELDS,
            cdc=INCREMENTAL,
            description="customer changes (CDC extract)",
        ),
        _source(
            "CustomerMgmt.xml",
            "xml",
            HISTORICAL,
            description="customer and account actions of the historical load",
        ),
        _source(
            "DailyMarket.txt",
            "pipe",
            ALL_BATCHES,
            _DAILY_MARKET,
            cdc=INCREMENTAL,
            description="daily security prices",
        ),
        _source("Date.txt", "pipe", HISTORICAL, _DATE, description="DimDate rows"),
        SourceFile(
            "FINWIRE",
            "finwire",
            HISTORICAL,
            record_types=FINWIRE_RECORDS,
            description="quarterly financial newswire files FINWIREyyyyQn",
        ),
        _source(
            "HoldingHistory.txt",
            "pipe",
            ALL_BATCHES,
            _HOLDING_HISTORY,
            cdc=INCREMENTAL,
            description="holding changes",
        ),
        _source("HR.csv", "csv", HISTORICAL, _HR, description="employees"),
        _source("Industry.txt", "pipe", HISTORICAL, _INDUSTRY, description="industries"),
        _source(
            "Prospect.csv",
            "csv",
            ALL_BATCHES,
            _PROSPECT,
            description="prospective customers (full extract every batch)",
        ),
        _source("StatusType.txt", "pipe", HISTORICAL, _STATUS_TYPE, description="status codes"),
        _source("TaxRate.txt", "pipe", HISTORICAL, _TAX_RATE, description="tax rates"),
        _source("Time.txt", "pipe", HISTORICAL, _TIME, description="DimTime rows"),
        _source(
            "TradeHistory.txt",
            "pipe",
            HISTORICAL,
            _TRADE_HISTORY,
            description="trade status history",
        ),
        _source("Trade.txt", "pipe", ALL_BATCHES, _TRADE, cdc=INCREMENTAL, description="trades"),
        _source("TradeType.txt", "pipe", HISTORICAL, _TRADE_TYPE, description="trade types"),
        _source(
            "WatchHistory.txt",
            "pipe",
            ALL_BATCHES,
            _WATCH_HISTORY,
            cdc=INCREMENTAL,
            description="watch list changes",
        ),
        SourceFile(
            "audit",
            "audit",
            ALL_BATCHES,
            AUDIT_FIELDS,
            header=True,
            description="answer keys <name>_audit.csv (clause 2.2.2.20)",
        ),
    )
}

FINWIRE_NAME = re.compile(r"^FINWIRE(\d{4})Q([1-4])$")


def source_file(name: str) -> SourceFile:
    """The registry entry for a file name (``Trade.txt``, ``FINWIRE2003Q1``, ``Trade_audit.csv``).

    Raises :class:`~tpcdi.exceptions.UnknownSourceFile` for a name DIGen never writes.
    """
    if name in SOURCE_FILES and name not in ("FINWIRE", "audit"):
        return SOURCE_FILES[name]
    if FINWIRE_NAME.match(name):
        return SOURCE_FILES["FINWIRE"]
    if name.endswith("_audit.csv"):
        return SOURCE_FILES["audit"]
    raise UnknownSourceFile(name)


def batch_of_directory(name: str) -> int | None:
    """The batch number of a staging directory named ``BatchN``, else ``None``."""
    match = re.fullmatch(r"Batch(\d+)", name)
    return int(match.group(1)) if match else None
