"""A tiny, correct TPC-DI warehouse built by hand for three batches, for the audit's tests.

Every row is written as the rules of clauses 3 and 4 say (history-tracking versions, cascades,
surrogate keys current at the trade's date, 52-week highs and lows, nameplates, …), the batch
validation and PCR rows end each phase, the visibility queries run during the updates, and
answer keys in DIGen's ``*_audit.csv`` format describe exactly this data. On it every audit check
is OK; a test then injects one defect (through :class:`Spec`) and expects the check guarding
against it to fail.

Timeline (seconds after ``T0``): CT0 0; batch 1, validation 9, CT1 10; Visibility_1 11;
batch 2, Visibility_2 15, validation 19, CT2 20; batch 3, Visibility_2 25, validation 29,
CT3 30; final Visibility_1 31.
"""

from __future__ import annotations

import copy
import datetime
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from tpcdi.audit.connection import WarehouseConnection
from tpcdi.audit.ddl import ensure_audit_tables
from tpcdi.audit.keys import load_audit_files
from tpcdi.audit.pcr import write_pcr
from tpcdi.audit.validation import (
    INACTIVE_WATCHES,
    ValidationRow,
    count_validation,
    insert_messages,
)
from tpcdi.audit.visibility import write_visibility

D = datetime.date
EOT = D(9999, 12, 31)
T0 = datetime.datetime(2024, 1, 1, 12, 0, 0)
FIRST_DAY = D(2016, 1, 1)
LAST_DAY = D(2017, 12, 31)
BATCH_DATE = {1: D(2017, 7, 7), 2: D(2017, 7, 8), 3: D(2017, 7, 9)}
WINDOW = {1: (FIRST_DAY, BATCH_DATE[1]), 2: (BATCH_DATE[2],) * 2, 3: (BATCH_DATE[3],) * 2}

Row = dict[str, Any]


def at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def dk(day: D) -> int:
    """DimDate surrogate key of a date (yyyymmdd)."""
    return day.year * 10000 + day.month * 100 + day.day


DDL = {
    "dimaccount": "sk_accountid BIGINT, accountid BIGINT, sk_brokerid BIGINT, sk_customerid BIGINT, "
    "status VARCHAR(10), accountdesc VARCHAR(50), taxstatus SMALLINT, iscurrent BOOLEAN, "
    "batchid INTEGER, effectivedate DATE, enddate DATE",
    "dimbroker": "sk_brokerid BIGINT, brokerid BIGINT, managerid BIGINT, firstname VARCHAR(50), "
    "lastname VARCHAR(50), middleinitial VARCHAR(1), branch VARCHAR(50), office VARCHAR(50), "
    "phone VARCHAR(14), iscurrent BOOLEAN, batchid INTEGER, effectivedate DATE, enddate DATE",
    "dimcompany": "sk_companyid BIGINT, companyid BIGINT, status VARCHAR(10), name VARCHAR(60), "
    "industry VARCHAR(50), sprating VARCHAR(4), islowgrade BOOLEAN, ceo VARCHAR(100), "
    "addressline1 VARCHAR(80), addressline2 VARCHAR(80), postalcode VARCHAR(12), "
    "city VARCHAR(25), stateprov VARCHAR(20), country VARCHAR(24), description VARCHAR(150), "
    "foundingdate DATE, iscurrent BOOLEAN, batchid INTEGER, effectivedate DATE, enddate DATE",
    "dimcustomer": "sk_customerid BIGINT, customerid BIGINT, taxid VARCHAR(20), "
    "status VARCHAR(10), lastname VARCHAR(30), firstname VARCHAR(30), middleinitial VARCHAR(1), "
    "gender VARCHAR(1), tier SMALLINT, dob DATE, addressline1 VARCHAR(80), "
    "addressline2 VARCHAR(80), postalcode VARCHAR(12), city VARCHAR(25), stateprov VARCHAR(20), "
    "country VARCHAR(24), phone1 VARCHAR(30), phone2 VARCHAR(30), phone3 VARCHAR(30), "
    "email1 VARCHAR(50), email2 VARCHAR(50), nationaltaxratedesc VARCHAR(50), "
    "nationaltaxrate {rate}, localtaxratedesc VARCHAR(50), localtaxrate {rate}, "
    "agencyid VARCHAR(30), creditrating INTEGER, networth BIGINT, "
    "marketingnameplate VARCHAR(100), iscurrent BOOLEAN, batchid INTEGER, effectivedate DATE, "
    "enddate DATE",
    "dimdate": "sk_dateid BIGINT, datevalue DATE, datedesc VARCHAR(20), calendaryearid INTEGER, "
    "calendaryeardesc VARCHAR(20), calendarqtrid INTEGER, calendarqtrdesc VARCHAR(20), "
    "calendarmonthid INTEGER, calendarmonthdesc VARCHAR(20), calendarweekid INTEGER, "
    "calendarweekdesc VARCHAR(20), dayofweeknum INTEGER, dayofweekdesc VARCHAR(10), "
    "fiscalyearid INTEGER, fiscalyeardesc VARCHAR(20), fiscalqtrid INTEGER, "
    "fiscalqtrdesc VARCHAR(20), holidayflag BOOLEAN",
    "dimsecurity": "sk_securityid BIGINT, symbol VARCHAR(15), issue VARCHAR(6), "
    "status VARCHAR(10), name VARCHAR(70), exchangeid VARCHAR(6), sk_companyid BIGINT, "
    "sharesoutstanding BIGINT, firsttrade DATE, firsttradeonexchange DATE, dividend {money}, "
    "iscurrent BOOLEAN, batchid INTEGER, effectivedate DATE, enddate DATE",
    "dimtime": "sk_timeid BIGINT, timevalue TIME, hourid INTEGER, hourdesc VARCHAR(20), "
    "minuteid INTEGER, minutedesc VARCHAR(20), secondid INTEGER, seconddesc VARCHAR(20), "
    "markethoursflag BOOLEAN, officehoursflag BOOLEAN",
    "dimtrade": "tradeid BIGINT, sk_brokerid BIGINT, sk_createdateid BIGINT, "
    "sk_createtimeid BIGINT, sk_closedateid BIGINT, sk_closetimeid BIGINT, status VARCHAR(10), "
    "type VARCHAR(12), cashflag BOOLEAN, sk_securityid BIGINT, sk_companyid BIGINT, "
    "quantity INTEGER, bidprice {money}, sk_customerid BIGINT, sk_accountid BIGINT, "
    "executedby VARCHAR(64), tradeprice {money}, fee {money}, commission {money}, tax {money}, "
    "batchid INTEGER",
    "factcashbalances": "sk_customerid BIGINT, sk_accountid BIGINT, sk_dateid BIGINT, "
    "cash {money}, batchid INTEGER",
    "factholdings": "tradeid BIGINT, currenttradeid BIGINT, sk_customerid BIGINT, "
    "sk_accountid BIGINT, sk_securityid BIGINT, sk_companyid BIGINT, sk_dateid BIGINT, "
    "sk_timeid BIGINT, currentprice {money}, currentholding INTEGER, batchid INTEGER",
    "factmarkethistory": "sk_securityid BIGINT, sk_companyid BIGINT, sk_dateid BIGINT, "
    "peratio {money}, yield {money}, fiftytwoweekhigh {money}, sk_fiftytwoweekhighdate BIGINT, "
    "fiftytwoweeklow {money}, sk_fiftytwoweeklowdate BIGINT, closeprice {money}, "
    "dayhigh {money}, daylow {money}, volume BIGINT, batchid INTEGER",
    "factwatches": "sk_customerid BIGINT, sk_securityid BIGINT, sk_dateid_dateplaced BIGINT, "
    "sk_dateid_dateremoved BIGINT, batchid INTEGER",
    "industry": "in_id VARCHAR(2), in_name VARCHAR(50), in_sc_id VARCHAR(4)",
    "financial": "sk_companyid BIGINT, fi_year INTEGER, fi_qtr INTEGER, fi_qtr_start_date DATE, "
    "fi_revenue {money}, fi_net_earn {money}, fi_basic_eps {money}, fi_dilut_eps {money}, "
    "fi_margin {money}, fi_inventory {money}, fi_assets {money}, fi_liability {money}, "
    "fi_out_basic BIGINT, fi_out_dilut BIGINT",
    "prospect": "agencyid VARCHAR(30), sk_recorddateid BIGINT, sk_updatedateid BIGINT, "
    "batchid INTEGER, iscustomer BOOLEAN, lastname VARCHAR(30), firstname VARCHAR(30), "
    "middleinitial VARCHAR(1), gender VARCHAR(1), addressline1 VARCHAR(80), "
    "addressline2 VARCHAR(80), postalcode VARCHAR(12), city VARCHAR(25), state VARCHAR(20), "
    "country VARCHAR(24), phone VARCHAR(30), income BIGINT, numbercars INTEGER, "
    "numberchildren INTEGER, maritalstatus VARCHAR(1), age INTEGER, creditrating INTEGER, "
    "ownorrentflag VARCHAR(1), employer VARCHAR(30), numbercreditcards INTEGER, "
    "networth BIGINT, marketingnameplate VARCHAR(100)",
    "statustype": "st_id VARCHAR(4), st_name VARCHAR(10)",
    "taxrate": "tx_id VARCHAR(4), tx_name VARCHAR(50), tx_rate {rate}",
    "tradetype": "tt_id VARCHAR(3), tt_name VARCHAR(12), tt_is_sell INTEGER, tt_is_mrkt INTEGER",
}
REFERENCE = ("dimdate", "dimtime", "industry", "statustype", "taxrate", "tradetype")


def _dates() -> list[Row]:
    rows = []
    day = FIRST_DAY
    while day <= LAST_DAY:
        q = (day.month - 1) // 3 + 1
        rows.append(
            {
                "sk_dateid": dk(day), "datevalue": day, "datedesc": day.isoformat(),
                "calendaryearid": day.year, "calendaryeardesc": str(day.year),
                "calendarqtrid": day.year * 10 + q, "calendarqtrdesc": f"{day.year} Q{q}",
                "calendarmonthid": day.year * 100 + day.month,
                "calendarmonthdesc": f"{day.year} {day.month}",
                "calendarweekid": day.year * 100 + day.isocalendar()[1],
                "calendarweekdesc": f"{day.year}-W{day.isocalendar()[1]}",
                "dayofweeknum": day.isoweekday(), "dayofweekdesc": day.strftime("%A"),
                "fiscalyearid": day.year, "fiscalyeardesc": str(day.year),
                "fiscalqtrid": day.year * 10 + q, "fiscalqtrdesc": f"{day.year} Q{q}",
                "holidayflag": False,
            }
        )  # fmt: skip
        day += datetime.timedelta(days=1)
    return rows


def _times() -> list[Row]:
    rows = []
    for h, m, s in ((0, 0, 0), (9, 30, 0), (10, 0, 0), (12, 0, 0), (15, 0, 0)):
        rows.append(
            {
                "sk_timeid": h * 10000 + m * 100 + s, "timevalue": datetime.time(h, m, s),
                "hourid": h, "hourdesc": f"{h:02}", "minuteid": m, "minutedesc": f"{h:02}:{m:02}",
                "secondid": s, "seconddesc": f"{h:02}:{m:02}:{s:02}",
                "markethoursflag": 9 <= h < 16, "officehoursflag": 9 <= h < 17,
            }
        )  # fmt: skip
    return rows


def _broker(sk: int, broker_id: int) -> Row:
    return {
        "sk_brokerid": sk, "brokerid": broker_id, "managerid": 1, "firstname": "Bo",
        "lastname": f"Ker{broker_id}", "middleinitial": "B", "branch": "Main", "office": "1",
        "phone": "555-0100", "iscurrent": True, "batchid": 1, "effectivedate": FIRST_DAY,
        "enddate": EOT,
    }  # fmt: skip


def _company(sk: int, cik: int, name: str, rating: str | None, low: bool | None, eff: D,
             end: D) -> Row:  # fmt: skip
    return {
        "sk_companyid": sk, "companyid": cik, "status": "Active", "name": name,
        "industry": "Technology", "sprating": rating, "islowgrade": low, "ceo": "Ann Chief",
        "addressline1": "1 Main St", "addressline2": None, "postalcode": "10001",
        "city": "Springfield", "stateprov": "NY", "country": "United States of America",
        "description": "makes things", "foundingdate": D(1990, 1, 1), "iscurrent": end == EOT,
        "batchid": 1, "effectivedate": eff, "enddate": end,
    }  # fmt: skip


def _security(sk: int, symbol: str, company_sk: int, dividend: float, eff: D, end: D) -> Row:
    return {
        "sk_securityid": sk, "symbol": symbol, "issue": "COMMON", "status": "Active",
        "name": f"{symbol} shares", "exchangeid": "NYSE", "sk_companyid": company_sk,
        "sharesoutstanding": 1000000, "firsttrade": D(2000, 1, 3),
        "firsttradeonexchange": D(2000, 1, 3), "dividend": dividend, "iscurrent": end == EOT,
        "batchid": 1, "effectivedate": eff, "enddate": end,
    }  # fmt: skip


PERSON = {
    10: ("Smith", "Anna", "12 Oak Ave", None, "02134"),
    11: ("Jones", "Bill", "4 Elm St", "Apt 2", "60601"),
    12: ("Brown", "Cara", "9 Pine Rd", None, "M5V 2T6"),
}


def _customer(sk: int, cid: int, batch: int, eff: D, end: D, *, status: str = "Active",
              tier: int = 1, current: bool | None = None, **extra: Any) -> Row:  # fmt: skip
    last, first, line1, line2, postal = PERSON[cid]
    row = {
        "sk_customerid": sk, "customerid": cid, "taxid": f"123-45-67{cid}", "status": status,
        "lastname": last, "firstname": first, "middleinitial": "Q", "gender": "F", "tier": tier,
        "dob": D(1970, 5, 17), "addressline1": line1, "addressline2": line2,
        "postalcode": postal, "city": "Boston", "stateprov": "MA",
        "country": "United States of America", "phone1": "+1 (617) 555-0101",
        "phone2": "(617) 555-0102", "phone3": "555-0103123", "email1": f"{first}.{last}@mail.com",
        "email2": None, "nationaltaxratedesc": "National 1", "nationaltaxrate": 0.2,
        "localtaxratedesc": "US Tax 1", "localtaxrate": 0.1, "agencyid": None,
        "creditrating": None, "networth": None, "marketingnameplate": None,
        "iscurrent": end == EOT if current is None else current, "batchid": batch,
        "effectivedate": eff, "enddate": end,
    }  # fmt: skip
    row.update(extra)
    return row


def _account(sk: int, aid: int, customer_sk: int, batch: int, eff: D, end: D, *,
             status: str = "Active", desc: str = "Main", current: bool | None = None) -> Row:  # fmt: skip
    return {
        "sk_accountid": sk, "accountid": aid, "sk_brokerid": 1, "sk_customerid": customer_sk,
        "status": status, "accountdesc": desc, "taxstatus": aid % 3,
        "iscurrent": end == EOT if current is None else current, "batchid": batch,
        "effectivedate": eff, "enddate": end,
    }  # fmt: skip


def _trade(tid: int, batch: int, account: tuple[int, int], security: tuple[int, int],
           created: tuple[D, int] | None, closed: tuple[D, int] | None, status: str,
           kind: str, qty: int, price: float | None, fee: float | None = None,
           commission: float | None = None) -> Row:  # fmt: skip
    return {
        "tradeid": tid, "sk_brokerid": 1,
        "sk_createdateid": dk(created[0]) if created else None,
        "sk_createtimeid": created[1] if created else None,
        "sk_closedateid": dk(closed[0]) if closed else None,
        "sk_closetimeid": closed[1] if closed else None, "status": status, "type": kind,
        "cashflag": True, "sk_securityid": security[0], "sk_companyid": security[1],
        "quantity": qty, "bidprice": 20.0, "sk_customerid": account[1],
        "sk_accountid": account[0], "executedby": "Joe Trader", "tradeprice": price, "fee": fee,
        "commission": commission, "tax": 1.0 if price is not None else None, "batchid": batch,
    }  # fmt: skip


def _holding(trade: Row, original: int, holding: int, batch: int) -> Row:
    return {
        "tradeid": original, "currenttradeid": trade["tradeid"],
        "sk_customerid": trade["sk_customerid"], "sk_accountid": trade["sk_accountid"],
        "sk_securityid": trade["sk_securityid"], "sk_companyid": trade["sk_companyid"],
        "sk_dateid": trade["sk_closedateid"], "sk_timeid": trade["sk_closetimeid"],
        "currentprice": trade["tradeprice"], "currentholding": holding, "batchid": batch,
    }  # fmt: skip


def _market(sec: tuple[int, int], day: D, high: float, low: float, close: float,
            hi52: tuple[float, D], lo52: tuple[float, D], dividend: float,
            pe: float | None, batch: int) -> Row:  # fmt: skip
    return {
        "sk_securityid": sec[0], "sk_companyid": sec[1], "sk_dateid": dk(day), "peratio": pe,
        "yield": round(dividend / close * 100, 2), "fiftytwoweekhigh": hi52[0],
        "sk_fiftytwoweekhighdate": dk(hi52[1]), "fiftytwoweeklow": lo52[0],
        "sk_fiftytwoweeklowdate": dk(lo52[1]), "closeprice": close, "dayhigh": high,
        "daylow": low, "volume": 1000, "batchid": batch,
    }  # fmt: skip


def _prospect(agency: str, batch: int, record: int, update: int, person: tuple[str, ...],
              is_customer: bool, nameplate: str | None, **fields: Any) -> Row:  # fmt: skip
    last, first, line1, line2, postal = person
    row = {
        "agencyid": agency, "sk_recorddateid": dk(BATCH_DATE[record]),
        "sk_updatedateid": dk(BATCH_DATE[update]), "batchid": batch, "iscustomer": is_customer,
        "lastname": last, "firstname": first, "middleinitial": None, "gender": "F",
        "addressline1": line1, "addressline2": line2, "postalcode": postal, "city": "Boston",
        "state": "MA", "country": "United States of America", "phone": "555-0199",
        "income": None, "numbercars": None, "numberchildren": None, "maritalstatus": "S",
        "age": None, "creditrating": None, "ownorrentflag": "O", "employer": "Acme",
        "numbercreditcards": None, "networth": None, "marketingnameplate": nameplate,
    }  # fmt: skip
    row.update(fields)
    return row


def _message(batch: int, source: str, text: str, kind: str, data: str | None) -> tuple[Any, ...]:
    return (batch, source, text, kind, data)


@dataclass
class Spec:
    """Everything the builder writes; tests change it to inject one defect."""

    inserts: dict[int, dict[str, list[Row]]]
    updates: dict[int, list[tuple[str, list[Any]]]]
    messages: dict[int, list[tuple[Any, ...]]]
    keys: dict[tuple[str, int, str], int]
    #: SQL run after batch 3's data, before its visibility and validation queries.
    tamper: list[str] = field(default_factory=list)
    #: SQL run at the very end (after the final Visibility_1).
    tamper_after: list[str] = field(default_factory=list)
    reference_at_init: bool = False
    skip_pcr: set[int] = field(default_factory=set)
    skip_visibility_2: bool = False
    skip_validation: set[tuple[int, str, str]] = field(default_factory=set)
    late_validation: set[int] = field(default_factory=set)


def tiny_spec() -> Spec:
    """The correct warehouse."""
    acme1, acme2, bolt = 1, 2, 3
    _aaa1_v1, aaa1_v2, bbb1 = (1, acme1), (2, acme2), (3, bolt)
    t = {
        "reference": {
            "dimdate": _dates(),
            "dimtime": _times(),
            "industry": [
                {"in_id": "01", "in_name": "Technology", "in_sc_id": "TECH"},
                {"in_id": "02", "in_name": "Banking", "in_sc_id": "FIN"},
            ],
            "statustype": [
                {"st_id": i, "st_name": n}
                for i, n in (
                    ("ACTV", "Active"),
                    ("CMPT", "Completed"),
                    ("CNCL", "Canceled"),
                    ("PNDG", "Pending"),
                    ("SBMT", "Submitted"),
                    ("INAC", "Inactive"),
                )
            ],
            "taxrate": [
                {"tx_id": "US1", "tx_name": "US Tax 1", "tx_rate": 0.1},
                {"tx_id": "CA1", "tx_name": "CA Tax 1", "tx_rate": 0.05},
                {"tx_id": "NT1", "tx_name": "National 1", "tx_rate": 0.2},
            ],
            "tradetype": [
                {"tt_id": i, "tt_name": n, "tt_is_sell": s, "tt_is_mrkt": m}
                for i, n, s, m in (
                    ("TMB", "Market Buy", 0, 1),
                    ("TMS", "Market Sell", 1, 1),
                    ("TSL", "Stop Loss", 1, 1),
                    ("TLS", "Limit Sell", 1, 0),
                    ("TLB", "Limit Buy", 0, 0),
                )
            ],
        }
    }
    c = _customer
    a = _account
    _b1, b2, b3 = BATCH_DATE[1], BATCH_DATE[2], BATCH_DATE[3]
    tr1000 = _trade(1000, 1, (2, 1), aaa1_v2, (D(2016, 7, 1), 93000), (D(2016, 7, 1), 100000),
                    "Completed", "Market Buy", 100, 20.5, fee=1.0, commission=5.0)  # fmt: skip
    tr1001 = _trade(1001, 1, (3, 2), bbb1, (D(2016, 5, 1), 93000), (D(2016, 5, 2), 120000),
                    "Canceled", "Limit Buy", 50, None)  # fmt: skip
    tr1002 = _trade(1002, 1, (2, 1), aaa1_v2, (D(2016, 8, 1), 93000), (D(2016, 8, 1), 100000),
                    "Completed", "Market Sell", 10, 1.0, fee=20.0, commission=50.0)  # fmt: skip
    tr1003_open = _trade(1003, 1, (2, 1), aaa1_v2, (D(2017, 7, 1), 93000), None, "Pending",
                         "Limit Sell", 30, None)  # fmt: skip
    tr1003 = _trade(1003, 2, (2, 1), aaa1_v2, (D(2017, 7, 1), 93000), (b2, 100000),
                    "Completed", "Limit Sell", 30, 21.0, fee=1.0, commission=2.0)  # fmt: skip
    tr1004 = _trade(1004, 2, (6, 4), bbb1, (b2, 93000), (b2, 100000), "Completed",
                    "Market Sell", 5, 11.0, fee=1.0, commission=1.0)  # fmt: skip
    tr1005 = _trade(1005, 3, (8, 5), aaa1_v2, (b3, 93000), None, "Pending", "Limit Buy", 7, None)
    tr1006 = _trade(1006, 3, (8, 5), bbb1, (b3, 93000), (b3, 100000), "Completed",
                    "Market Buy", 8, 10.5, fee=1.0, commission=1.0)  # fmt: skip
    nameplates = {"AG3": "HighValue+Inherited"}
    t[1] = {
        "dimbroker": [_broker(1, 100), _broker(2, 101)],
        "dimcompany": [
            _company(acme1, 1001, "Acme Corp", "AA", False, FIRST_DAY, D(2016, 6, 1)),
            _company(acme2, 1001, "Acme Corp", "BB", True, D(2016, 6, 1), EOT),
            _company(bolt, 1002, "Bolt Inc", None, None, D(2016, 2, 1), EOT),
        ],
        "dimsecurity": [
            _security(1, "AAA1", acme1, 1.0, D(2016, 1, 15), D(2016, 6, 1)),
            _security(2, "AAA1", acme2, 2.0, D(2016, 6, 1), EOT),
            _security(3, "BBB1", bolt, 0.5, D(2016, 2, 1), EOT),
        ],
        "financial": [
            {
                "sk_companyid": acme1,
                "fi_year": 2016,
                "fi_qtr": 1,
                "fi_qtr_start_date": D(2016, 1, 1),
                "fi_revenue": 1000.0,
                "fi_net_earn": 100.0,
                "fi_basic_eps": 1.0,
                "fi_dilut_eps": 0.9,
                "fi_margin": 0.1,
                "fi_inventory": 10.0,
                "fi_assets": 5000.0,
                "fi_liability": 2000.0,
                "fi_out_basic": 100,
                "fi_out_dilut": 110,
            },
            {
                "sk_companyid": acme2,
                "fi_year": 2016,
                "fi_qtr": 3,
                "fi_qtr_start_date": D(2016, 7, 1),
                "fi_revenue": 1200.0,
                "fi_net_earn": 120.0,
                "fi_basic_eps": 1.2,
                "fi_dilut_eps": 1.1,
                "fi_margin": 0.1,
                "fi_inventory": 12.0,
                "fi_assets": 5100.0,
                "fi_liability": 2100.0,
                "fi_out_basic": 100,
                "fi_out_dilut": 110,
            },
        ],
        "dimcustomer": [
            # customer 10: new (tier 7: alert), updated in batch 2, inactivated in batch 3
            c(1, 10, 1, D(2016, 3, 1), EOT, tier=7),
            # customer 11: new (DOB out of range: alert), inactivated the same batch
            c(2, 11, 1, D(2016, 4, 1), D(2016, 9, 1), dob=D(1900, 1, 1)),
            c(3, 11, 1, D(2016, 9, 1), EOT, status="Inactive", dob=D(1900, 1, 1)),
        ],
        "dimaccount": [
            a(1, 500, 1, 1, D(2016, 3, 1), D(2016, 5, 1), desc="First"),
            a(2, 500, 1, 1, D(2016, 5, 1), EOT, desc="Renamed"),
            a(3, 501, 2, 1, D(2016, 4, 1), D(2016, 9, 1)),
            a(4, 501, 3, 1, D(2016, 9, 1), EOT, status="Inactive"),
        ],
        "dimtrade": [tr1000, tr1001, tr1002, tr1003_open],
        "factholdings": [_holding(tr1000, 1000, 100, 1), _holding(tr1002, 1000, 90, 1)],
        "factcashbalances": [
            {
                "sk_customerid": 1,
                "sk_accountid": 2,
                "sk_dateid": dk(D(2016, 7, 1)),
                "cash": 100.0,
                "batchid": 1,
            },
            {
                "sk_customerid": 2,
                "sk_accountid": 3,
                "sk_dateid": dk(D(2016, 5, 1)),
                "cash": 50.0,
                "batchid": 1,
            },
        ],
        "factmarkethistory": [
            _market(
                aaa1_v2,
                D(2016, 7, 1),
                22,
                18,
                20,
                (22, D(2016, 7, 1)),
                (18, D(2016, 7, 1)),
                2.0,
                5.0,
                1,
            ),
            _market(
                aaa1_v2,
                D(2017, 7, 6),
                25,
                21,
                23,
                (25, D(2017, 7, 6)),
                (21, D(2017, 7, 6)),
                2.0,
                5.0,
                1,
            ),
            _market(
                bbb1, D(2016, 7, 1), 10, 8, 9, (10, D(2016, 7, 1)), (8, D(2016, 7, 1)), 0.5, None, 1
            ),
        ],
        "factwatches": [
            {
                "sk_customerid": 1,
                "sk_securityid": 2,
                "sk_dateid_dateplaced": dk(D(2016, 8, 1)),
                "sk_dateid_dateremoved": None,
                "batchid": 1,
            },
            {
                "sk_customerid": 2,
                "sk_securityid": 3,
                "sk_dateid_dateplaced": dk(D(2016, 5, 1)),
                "sk_dateid_dateremoved": dk(D(2016, 6, 1)),
                "batchid": 1,
            },
        ],
        "prospect": [
            _prospect(
                "AG1",
                1,
                1,
                1,
                ("Doe", "Jane", "1 Lake Rd", None, "02135"),
                False,
                "HighValue+Boomer",
                income=250000,
                numberchildren=1,
                numbercreditcards=2,
                age=50,
                creditrating=700,
                numbercars=1,
                networth=500000,
            ),
            _prospect(
                "AG2",
                1,
                1,
                1,
                ("Roe", "Rick", "2 Hill Rd", None, "02136"),
                False,
                None,
                income=60000,
                age=30,
                creditrating=700,
                networth=200000,
            ),
        ],
    }
    t[2] = {
        "dimcustomer": [c(4, 10, 2, b2, EOT, tier=2, phone1="(617) 555-0111")],
        "dimaccount": [
            a(5, 500, 4, 2, b2, EOT, desc="Renamed"),
            a(6, 503, 4, 2, b2, EOT, desc="Second"),
        ],
        "dimtrade": [tr1004],
        "factholdings": [_holding(tr1003, 1003, 30, 2), _holding(tr1004, 1004, -5, 2)],
        "factcashbalances": [
            {
                "sk_customerid": 4,
                "sk_accountid": 5,
                "sk_dateid": dk(b2),
                "cash": 150.0,
                "batchid": 2,
            },
        ],
        "factmarkethistory": [
            _market(
                aaa1_v2,
                D(2017, 7, 7),
                24,
                20,
                22,
                (25, D(2017, 7, 6)),
                (20, D(2017, 7, 7)),
                2.0,
                5.0,
                2,
            ),
            _market(
                bbb1,
                D(2017, 7, 7),
                12,
                9,
                11,
                (12, D(2017, 7, 7)),
                (9, D(2017, 7, 7)),
                0.5,
                None,
                2,
            ),
        ],
        "factwatches": [
            {
                "sk_customerid": 4,
                "sk_securityid": 3,
                "sk_dateid_dateplaced": dk(b2),
                "sk_dateid_dateremoved": None,
                "batchid": 2,
            },
        ],
    }
    t[3] = {
        "dimcustomer": [
            c(
                5,
                12,
                3,
                b3,
                EOT,
                agencyid="AG3",
                networth=2000000,
                creditrating=None,
                marketingnameplate=nameplates["AG3"],
            ),
            c(6, 10, 3, b3, EOT, tier=2, status="Inactive", phone1="(617) 555-0111"),
        ],
        "dimaccount": [
            a(7, 500, 6, 3, b3, EOT, desc="Renamed", status="Inactive"),
            a(8, 502, 5, 3, b3, EOT, desc="Third"),
            a(9, 503, 6, 3, b3, EOT, desc="Second", status="Inactive"),
        ],
        "dimtrade": [tr1005, tr1006],
        "factholdings": [_holding(tr1006, 1006, 8, 3)],
        "factcashbalances": [
            {
                "sk_customerid": 5,
                "sk_accountid": 8,
                "sk_dateid": dk(b3),
                "cash": 10.0,
                "batchid": 3,
            },
        ],
        "factmarkethistory": [
            _market(
                aaa1_v2,
                D(2017, 7, 8),
                26,
                22,
                25,
                (26, D(2017, 7, 8)),
                (20, D(2017, 7, 7)),
                2.0,
                5.0,
                3,
            ),
            _market(
                bbb1,
                D(2017, 7, 8),
                11,
                10,
                10.5,
                (12, D(2017, 7, 7)),
                (9, D(2017, 7, 7)),
                0.5,
                None,
                3,
            ),
        ],
        "factwatches": [
            {
                "sk_customerid": 5,
                "sk_securityid": 2,
                "sk_dateid_dateplaced": dk(b3),
                "sk_dateid_dateremoved": None,
                "batchid": 3,
            },
        ],
        "prospect": [
            _prospect(
                "AG3", 3, 3, 3, PERSON[12], True, nameplates["AG3"], networth=2000000, age=22
            ),
        ],
    }
    expire = "UPDATE {%s} SET iscurrent = false, enddate = ? WHERE %s = ?"
    updates: dict[int, list[tuple[str, list[Any]]]] = {
        1: [],
        2: [
            (expire % ("dimcustomer", "sk_customerid"), [b2, 1]),
            (expire % ("dimaccount", "sk_accountid"), [b2, 2]),
            ("UPDATE {dimtrade} SET sk_closedateid = ?, sk_closetimeid = ?, status = ?, "
             "tradeprice = ?, fee = ?, commission = ?, tax = ?, batchid = 2 WHERE tradeid = ?",
             [dk(b2), 100000, "Completed", 21.0, 1.0, 2.0, 1.0, 1003]),
            ("UPDATE {prospect} SET numbercars = 5, marketingnameplate = 'Spender', "
             "sk_updatedateid = ?, batchid = 2 WHERE agencyid = 'AG2'", [dk(b2)]),
            ("UPDATE {prospect} SET sk_recorddateid = ?", [dk(b2)]),
        ],
        3: [
            (expire % ("dimcustomer", "sk_customerid"), [b3, 4]),
            (expire % ("dimaccount", "sk_accountid"), [b3, 5]),
            (expire % ("dimaccount", "sk_accountid"), [b3, 6]),
            ("UPDATE {factwatches} SET sk_dateid_dateremoved = ?, batchid = 3 "
             "WHERE sk_customerid = 1 AND sk_securityid = 2", [dk(b3)]),
            ("UPDATE {prospect} SET sk_recorddateid = ?", [dk(b3)]),
        ],
    }  # fmt: skip
    alert = "Alert"
    messages = {
        1: [
            _message(1, "DimCompany", "Invalid SPRating", alert, "CO_ID = 1002, CO_SP_RATE = ZZZ"),
            _message(1, "DimCustomer", "Invalid customer tier", alert, "C_ID = 10, C_TIER = 7"),
            _message(1, "DimCustomer", "DOB out of range", alert, "C_ID = 11, C_DOB = 1900-01-01"),
            _message(1, "DimTrade", "Invalid trade commission", alert, "T_ID = 1002, T_COMM = 50.00"),
            _message(1, "DimTrade", "Invalid trade fee", alert, "T_ID = 1002, T_CHRG = 20.00"),
            _message(1, "FactMarketHistory", "No earnings for company", alert, "DM_S_SYMB = BBB1"),
            _message(1, "Prospect", "Inserted rows", "Status", "2"),
        ],
        2: [
            _message(2, "FactMarketHistory", "No earnings for company", alert, "DM_S_SYMB = BBB1"),
            _message(2, "Prospect", "Source rows", "Status", "2"),
            _message(2, "Prospect", "Inserted rows", "Status", "0"),
            _message(2, "Prospect", "Updated rows", "Status", "1"),
        ],
        3: [
            _message(3, "FactMarketHistory", "No earnings for company", alert, "DM_S_SYMB = BBB1"),
            _message(3, "Prospect", "Source rows", "Status", "3"),
            _message(3, "Prospect", "Inserted rows", "Status", "1"),
            _message(3, "Prospect", "Updated rows", "Status", "0"),
        ],
    }  # fmt: skip
    per_batch = {
        ("DimBroker", "HR_BROKERS"): (2, None, None),
        ("DimCustomer", "C_NEW"): (2, 0, 1),
        ("DimCustomer", "C_UPDCUST"): (0, 1, 0),
        ("DimCustomer", "C_INACT"): (1, 0, 1),
        ("DimCustomer", "C_ID_HIST"): (0, 0, 0),
        ("DimCustomer", "C_DOB_TO"): (1, 0, 0),
        ("DimCustomer", "C_DOB_TY"): (0, 0, 0),
        ("DimCustomer", "C_TIER_INV"): (1, 0, 0),
        ("DimAccount", "CA_ADDACCT"): (0, 1, 1),
        ("DimAccount", "CA_CLOSEACCT"): (0, 0, 0),
        ("DimAccount", "CA_UPDACCT"): (1, 0, 0),
        ("DimAccount", "CA_ID_HIST"): (0, 0, 0),
        ("DimTrade", "T_Records"): (4, 2, 3),
        ("DimTrade", "T_NEW"): (4, 1, 2),
        ("DimTrade", "T_CanceledTrades"): (1, 0, 0),
        ("DimTrade", "T_InvalidCommision"): (1, 0, 0),
        ("DimTrade", "T_InvalidCharge"): (1, 0, 0),
        ("DimTradeHistory", "CT_Records"): (3, 1, 2),
        ("FactHoldings", "HH_RECORDS"): (2, 2, 1),
        ("FactMarketHistory", "DM_RECORDS"): (3, 2, 2),
        ("FactWatches", "WH_ACTIVE"): (2, 1, 1),
        ("FactWatches", "WH_RECORDS"): (3, 1, 2),
        ("Prospect", "P_RECORDS"): (2, 2, 3),
        ("Prospect", "P_NEW"): (2, 0, 1),
        ("Prospect", "P_C_MATCHING"): (0, 0, 1),
        ("DimCompany", "FW_CMP"): (4, None, None),
        ("DimSecurity", "FW_SEC"): (2, None, None),
        ("Financial", "FW_FIN"): (2, None, None),
    }
    keys: dict[tuple[str, int, str], int] = {}
    for (dataset, attribute), values in per_batch.items():
        for batch, value in zip((1, 2, 3), values, strict=True):
            if value is not None:
                keys[(dataset, batch, attribute)] = value
    return Spec(inserts=t, updates=updates, messages=messages, keys=keys)  # type: ignore[arg-type]


def create_tables(conn: WarehouseConnection) -> None:
    money, rate = (
        ("DOUBLE", "DOUBLE") if conn.dialect == "duckdb" else ("NUMERIC(15,2)", "NUMERIC(6,5)")
    )
    ensure_audit_tables(conn)
    for table, columns in DDL.items():
        conn.execute(f"CREATE TABLE {{{table}}} ({columns.format(money=money, rate=rate)})")
    conn.commit()


def insert(conn: WarehouseConnection, tables: dict[str, list[Row]]) -> None:
    for table, rows in tables.items():
        if rows:
            data = pa.Table.from_pylist(rows)
            conn.load_arrow(table, data, data.column_names)
    conn.commit()


def _validate(conn: WarehouseConnection, spec: Spec, batch: int, when: datetime.datetime) -> None:
    rows: list[ValidationRow] = [
        r for r in count_validation(conn) if (batch, r.source, r.text) not in spec.skip_validation
    ]
    insert_messages(conn, batch, "Validation", rows, when)
    conn.commit()


def write_answer_keys(directory: Path, keys: dict[tuple[str, int, str], int]) -> Path:
    """The answer keys as DIGen writes them: Batch<n>_audit.csv and Generator_audit.csv at the
    top, one <Dataset>_audit.csv per data set in each Batch<n>/."""
    header = "DataSet, BatchID ,Date , Attribute , Value, DValue\r\n"
    directory.mkdir(parents=True, exist_ok=True)
    for batch, (first, last) in WINDOW.items():
        (directory / f"Batch{batch}_audit.csv").write_text(
            header + f"Batch,{batch},{first},FirstDay,,\r\nBatch,{batch},{last},LastDay,,\r\n"
        )
    (directory / "Generator_audit.csv").write_text(header + "Generator,1,,SF,,10.0\r\n")
    for batch in (1, 2, 3):
        folder = directory / f"Batch{batch}"
        folder.mkdir(exist_ok=True)
        datasets = sorted({d for d, b, _ in keys if b == batch})
        for dataset in datasets:
            lines = [
                f"{d},{b},,{a},{v},\r\n" for (d, b, a), v in sorted(keys.items())
                if d == dataset and b == batch
            ]  # fmt: skip
            (folder / f"{dataset}_audit.csv").write_text(header + "".join(lines))
    return directory


def build(
    conn: WarehouseConnection,
    keys_dir: Path,
    spec: Spec | None = None,
    mutate: Callable[[Spec], None] | None = None,
) -> Spec:
    """Create and fill the warehouse phase by phase, as a benchmark run would; returns the spec."""
    spec = copy.deepcopy(spec or tiny_spec())
    if mutate is not None:
        mutate(spec)
    create_tables(conn)
    if spec.reference_at_init:
        insert(conn, spec.inserts["reference"])  # type: ignore[index]
    _validate(conn, spec, 0, at(-1))
    write_pcr(conn, 0, at(0))
    for batch in (1, 2, 3):
        base = 10 * batch
        if batch == 1 and not spec.reference_at_init:
            insert(conn, spec.inserts["reference"])  # type: ignore[index]
        insert(conn, spec.inserts.get(batch, {}))
        for sql, params in spec.updates.get(batch, []):
            conn.execute(sql, params)
        messages = spec.messages.get(batch, [])
        if messages:
            values = ", ".join(["(?, ?, ?, ?, ?, ?)"] * len(messages))
            params: list[Any] = []
            for b, source, text, kind, data in messages:
                params += [at(base - 5), b, source, text, kind, data]
            conn.execute(
                "INSERT INTO {dimessages} (messagedateandtime, batchid, messagesource, "
                f"messagetext, messagetype, messagedata) VALUES {values}",
                params,
            )
        conn.commit()
        if batch == 3:
            for sql in spec.tamper:
                conn.execute(sql)
            conn.commit()
        if batch > 1 and not spec.skip_visibility_2:
            write_visibility(conn, 2, batch - 1, at(base - 5 + 0.5))
        late = 1.5 if batch in spec.late_validation else 0
        _validate(conn, spec, batch, at(base - 1 + late))
        if batch not in spec.skip_pcr:
            write_pcr(conn, batch, at(base))
        if batch == 1:
            write_visibility(conn, 1, 1, at(11))
    write_visibility(conn, 1, 3, at(31))
    for sql in spec.tamper_after:
        conn.execute(sql)
    conn.commit()
    write_answer_keys(keys_dir, spec.keys)
    load_audit_files(conn, keys_dir)
    return spec


__all__ = ["INACTIVE_WATCHES", "Spec", "build", "tiny_spec", "write_answer_keys"]
