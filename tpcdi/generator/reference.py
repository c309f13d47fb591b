"""Reference files: Date.txt, Time.txt, Industry.txt, StatusType.txt, TaxRate.txt, TradeType.txt.

Status and trade type codes are the specification's (the audit checks their names); dates and
times follow the field descriptions of clause 2.2.2.7 and 2.2.2.15; industries and tax rates are
streamdi's own lists (:mod:`tpcdi.generator.words`).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tpcdi.generator import text
from tpcdi.generator.scale import DATE_END, FIRST_DAY, day
from tpcdi.generator.words import (
    BRACKET_WORDS,
    CA_PROVINCE_NAMES,
    CA_PROVINCES,
    NATIONAL_BRACKETS,
    SECTORS,
    US_STATES,
)

STATUS_TYPES = (
    ("ACTV", "Active"),
    ("CMPT", "Completed"),
    ("CNCL", "Canceled"),
    ("PNDG", "Pending"),
    ("SBMT", "Submitted"),
    ("INAC", "Inactive"),
)
#: (id, name, is_sell, is_market)
TRADE_TYPES = (
    ("TMB", "Market Buy", 0, 1),
    ("TMS", "Market Sell", 1, 1),
    ("TSL", "Stop Loss", 1, 1),
    ("TLS", "Limit Sell", 1, 0),
    ("TLB", "Limit Buy", 0, 0),
)
_MONTHS = [
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
]  # fmt: skip
_WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


def _s(values: list[str] | tuple[str, ...]) -> pa.Array:
    return pa.array(list(values), pa.string())


def date_columns() -> list[pa.Array]:
    """The 18 columns of Date.txt, one row per day from 1950-01-01 to 2020-12-31."""
    days = np.arange(day(FIRST_DAY), day(DATE_END) + 1)
    stamp = days.astype("M8[D]")
    year = stamp.astype("M8[Y]").astype(np.int64) + 1970
    month = stamp.astype("M8[M]").astype(np.int64) % 12 + 1
    dom = (stamp - stamp.astype("M8[M]")).astype(np.int64) + 1
    doy = (stamp - stamp.astype("M8[Y]")).astype(np.int64) + 1
    weekday = (days + 3) % 7  # 0 = Monday (1970-01-01 was a Thursday)
    jan1_weekday = (days - (doy - 1) + 3) % 7
    week = (doy - 1 + jan1_weekday) // 7 + 1
    quarter = (month - 1) // 3 + 1
    fiscal_year = year + (month >= 7)
    fiscal_quarter = ((month + 5) % 12) // 3 + 1
    y, m = text.ints(year), text.ints(month)
    month_name = text.pick(_MONTHS, month - 1)
    holiday = (
        ((month == 1) & (dom == 1))
        | ((month == 7) & (dom == 4))
        | ((month == 12) & (dom == 25))
        | ((month == 11) & (dom == 11))
    )
    return [
        text.ints(year * 10000 + month * 100 + dom),
        text.dates(days),
        text.concat(month_name, " ", text.ints(dom), ", ", y),
        y,
        y,
        text.ints(year * 10 + quarter),
        text.concat(y, " Q", text.ints(quarter)),
        text.concat(y, m),
        text.concat(y, " ", month_name),
        text.concat(y, text.ints(week)),
        text.concat(y, "-W", text.ints(week)),
        text.ints(weekday + 1),
        text.pick(_WEEKDAYS, weekday),
        text.ints(fiscal_year),
        text.ints(fiscal_year),
        text.ints(fiscal_year * 10 + fiscal_quarter),
        text.concat(text.ints(fiscal_year), " Q", text.ints(fiscal_quarter)),
        text.ints(holiday.astype(np.int64)),
    ]


def time_columns() -> list[pa.Array]:
    """The 10 columns of Time.txt, one row per second of the day."""
    second = np.arange(86_400)
    hh, mm, ss = second // 3600, second // 60 % 60, second % 60
    h, m, s = text.padded(hh, 2), text.padded(mm, 2), text.padded(ss, 2)
    hhmmss = text.concat(h, ":", m, ":", s)
    market = (hh >= 9) & (hh < 16)
    office = (hh >= 8) & (hh < 17)
    return [
        text.padded(hh * 10000 + mm * 100 + ss, 6),
        hhmmss,
        h,
        h,
        m,
        text.concat(h, ":", m),
        s,
        hhmmss,
        text.ints(market.astype(np.int64)),
        text.ints(office.astype(np.int64)),
    ]


def industries() -> list[tuple[str, str, str]]:
    """(IN_ID, IN_NAME, IN_SC_ID) of every industry; ids are two letters, in order."""
    rows: list[tuple[str, str, str]] = []
    for sector, _, names in SECTORS:
        for name in names:
            k = len(rows)
            rows.append((chr(65 + k // 26) + chr(65 + k % 26), name, sector))
    return rows


def industry_columns() -> list[pa.Array]:
    rows = industries()
    return [_s([r[i] for r in rows]) for i in range(3)]


def tax_rates() -> list[tuple[str, str, float]]:
    """(TX_ID, TX_NAME, TX_RATE): 5 national brackets for each of 2 countries and 5 local
    brackets for 62 states and provinces (320 rows, 310 distinct local rates)."""
    rows: list[tuple[str, str, float]] = []
    for country, rates in NATIONAL_BRACKETS:
        label = "U.S." if country == "US" else "Canadian"
        for k, rate in enumerate(rates):
            rows.append(
                (
                    f"{country}{k + 1}",
                    f"{label} federal income tax, {BRACKET_WORDS[k]} bracket",
                    rate,
                )
            )
    regions = [(code, code) for code in US_STATES] + list(
        zip(CA_PROVINCES, CA_PROVINCE_NAMES, strict=True)
    )
    regions = regions[:62]
    for n, (code, name) in enumerate(regions):
        for k in range(5):
            rate = round(0.01 + 0.004 * ((n * 7 + k * 3) % 20) + 0.01 * k, 5)
            rows.append((f"{code}{k + 1}", f"{name} income tax, {BRACKET_WORDS[k]} bracket", rate))
    return rows


def local_tax_ids() -> list[str]:
    return [r[0] for r in tax_rates()[10:]]


def national_tax_ids() -> list[str]:
    return [r[0] for r in tax_rates()[:10]]


def tax_rate_columns() -> list[pa.Array]:
    rows = tax_rates()
    rates = np.array([round(r[2] * 100_000) for r in rows])
    return [_s([r[0] for r in rows]), _s([r[1] for r in rows]), text.money(rates, 5)]


def status_type_columns() -> list[pa.Array]:
    return [_s([r[0] for r in STATUS_TYPES]), _s([r[1] for r in STATUS_TYPES])]


def trade_type_columns() -> list[pa.Array]:
    return [
        _s([r[0] for r in TRADE_TYPES]),
        _s([r[1] for r in TRADE_TYPES]),
        text.ints(np.array([r[2] for r in TRADE_TYPES])),
        text.ints(np.array([r[3] for r in TRADE_TYPES])),
    ]


def upper(array: pa.Array) -> pa.Array:
    return pc.utf8_upper(array)
