"""Static reference data the incremental dataflow's stateless steps look up.

StatusType, TradeType and TaxRate do not change after the historical load (clause 4.6.15-17), nor
do Financial, DimCompany and DimSecurity (4.6.3, 4.6.6, 4.6.13), so the per-symbol quarterly
earnings the PE ratio needs are fixed too. They are read from the warehouse once, when the
pipeline starts: the small ones as plain dictionaries, the earnings as one Arrow table whose
four-quarter sums (:class:`Eps4Lookup`) a map step looks up a whole column at a time.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streamdi.arrow_digest import table_digest

#: Runs a SQL query on the warehouse and returns Arrow.
Query = Callable[[str], pa.Table]


#: The earnings table's columns: the basic EPS of a company (``companyid``, every version of it)
#: in a quarter (:func:`quarter_index`); one row per company and quarter.
EARNINGS_SCHEMA = pa.schema(
    [("companyid", pa.int64()), ("quarter", pa.int64()), ("eps", pa.float64())]
)
#: The symbols' companies: the company of each symbol's current DimSecurity version.
LISTINGS_SCHEMA = pa.schema([("symbol", pa.string()), ("companyid", pa.int64())])

#: A key of (company number, quarter) is ``number * QUARTER_STRIDE + quarter``.
QUARTER_STRIDE = 1 << 16


def quarter_index(year: int, quarter: int) -> int:
    """A running number of quarters (year * 4 + quarter - 1)."""
    return year * 4 + quarter - 1


@dataclass(frozen=True)
class Eps4Lookup:
    """The earnings as sorted keys, for the four-quarter sums of whole columns.

    ``companies`` are the companies' ids, sorted (a company's number is its place there);
    ``keys`` (sorted) are ``number * QUARTER_STRIDE + quarter`` of the earnings rows and
    ``eps[i]`` belongs to ``keys[i]``; ``symbols[j]`` is listed by company number
    ``symbol_company[j]`` (-1: a company without earnings)."""

    companies: np.ndarray
    keys: np.ndarray
    eps: np.ndarray
    symbols: pa.Array
    symbol_company: np.ndarray

    @classmethod
    def of(cls, earnings: pa.Table, listings: pa.Table) -> Eps4Lookup:
        """Built from the earnings rows (:data:`EARNINGS_SCHEMA`; rows without an EPS left out)
        and the listings (:data:`LISTINGS_SCHEMA`; a symbol listed twice takes its first row)."""
        earnings = earnings.filter(pc.is_valid(earnings.column("eps")))
        company = np.asarray(earnings.column("companyid"), dtype=np.int64)
        quarter = np.asarray(earnings.column("quarter"), dtype=np.int64)
        if len(quarter) and (quarter.min() < 0 or quarter.max() >= QUARTER_STRIDE):
            raise ValueError(f"an earnings quarter outside 0..{QUARTER_STRIDE - 1}")
        companies, number = np.unique(company, return_inverse=True)
        keys = number.astype(np.int64) * QUARTER_STRIDE + quarter
        order = np.argsort(keys, kind="stable")
        listed = listings.filter(pc.is_valid(listings.column("symbol")))
        symbols = listed.column("symbol").combine_chunks()
        first = np.asarray(pc.index_in(symbols, value_set=pc.unique(symbols)))
        unique_rows = np.unique(first, return_index=True)[1]
        symbols = symbols.take(pa.array(unique_rows))
        owner = np.asarray(pc.fill_null(listed.column("companyid"), -1), dtype=np.int64)
        owner = owner[unique_rows]
        at = np.searchsorted(companies, owner).clip(0, max(len(companies) - 1, 0))
        known = (companies[at] == owner) if len(companies) else np.zeros(len(owner), bool)
        return cls(
            companies=companies,
            keys=keys[order],
            eps=np.asarray(earnings.column("eps"), dtype=np.float64)[order],
            symbols=symbols,
            symbol_company=np.where(known, at, -1),
        )

    def sums(self, symbols: pa.Array | pa.ChunkedArray, quarters: np.ndarray) -> pa.Array:
        """For each row, the sum of the EPS of the four quarters before ``quarters[i]`` of the
        company ``symbols[i]`` is listed by, added oldest first from 0.0 as ``sum()`` over them
        in that order does (so equal, bit for bit, to a sum one row at a time); null where the
        company reported none of them or the symbol is unknown or null."""
        listed = pc.index_in(symbols, value_set=self.symbols)
        place = np.asarray(pc.fill_null(listed, 0), dtype=np.int64)
        number = (
            self.symbol_company[place]
            if len(self.symbol_company)
            else np.full(len(place), -1, np.int64)
        )
        valid = np.asarray(pc.is_valid(listed)) & (number >= 0)
        base = np.where(valid, number, 0) * QUARTER_STRIDE
        key = base + np.asarray(quarters, dtype=np.int64)
        low = np.searchsorted(self.keys, np.maximum(key - 4, base))
        count = np.where(valid, np.searchsorted(self.keys, key) - low, 0)
        total = np.zeros(len(key), dtype=np.float64)
        for j in range(4):
            more = count > j
            total[more] += self.eps[low[more] + j]
        return pa.array(total, mask=count == 0)


@dataclass(frozen=True)
class Reference:
    """Lookups of the stateless steps; see the module docstring."""

    status_names: dict[str, str] = field(default_factory=dict)
    trade_types: dict[str, str] = field(default_factory=dict)
    tax_rates: dict[str, tuple[str, float]] = field(default_factory=dict)
    #: The basic EPS per company and quarter (:data:`EARNINGS_SCHEMA`).
    earnings: pa.Table = field(default_factory=EARNINGS_SCHEMA.empty_table)
    #: The company of each symbol's current version (:data:`LISTINGS_SCHEMA`).
    listings: pa.Table = field(default_factory=LISTINGS_SCHEMA.empty_table)
    #: A digest of the contents: what the dataflow's logic digest takes for this object instead
    #: of going through its values (millions at SF 100, ~15 s of CPU at every start of the
    #: pipeline). Read from a warehouse, the digest of what was read; else computed here.
    content_digest: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.content_digest is None:
            listed = [
                pa.table({"k": list(d), "v": [repr(v) for v in d.values()]})
                for d in (self.status_names, self.trade_types, self.tax_rates)
            ]
            object.__setattr__(
                self, "content_digest", _digest([*listed, self.earnings, self.listings])
            )

    @functools.cached_property
    def _eps4(self) -> Eps4Lookup:
        return Eps4Lookup.of(self.earnings, self.listings)

    def eps4(
        self, symbols: pa.Array | pa.ChunkedArray, days: pa.Array | pa.ChunkedArray
    ) -> pa.Array:
        """For each row, the sum of the basic EPS of the four quarters before the quarter of
        ``days[i]`` (dates) for ``symbols[i]``, or null when the company reported none of them
        or the symbol or day is null (clause 4.6.10.1)."""
        dates = pc.cast(days, pa.date32())
        quarter = pc.add(
            pc.multiply(pc.cast(pc.year(dates), pa.int64()), 4),
            pc.divide(pc.subtract(pc.cast(pc.month(dates), pa.int64()), 1), 3),
        )
        has_day = np.asarray(pc.is_valid(quarter))
        found = self._eps4.sums(symbols, np.asarray(pc.fill_null(quarter, 0), dtype=np.int64))
        if has_day.all():
            return found
        return pc.if_else(pa.array(has_day), found, pa.nulls(len(found), pa.float64()))

    @classmethod
    def from_warehouse(cls, query: Query) -> Reference:
        """Read the reference data from a loaded warehouse (the DW schema must be the default
        schema of the connection ``query`` uses)."""
        tables = [
            query("SELECT st_id, st_name FROM statustype ORDER BY 1"),
            query("SELECT tt_id, tt_name FROM tradetype ORDER BY 1"),
            query("SELECT tx_id, tx_name, tx_rate FROM taxrate ORDER BY 1"),
            query(
                "SELECT c.companyid, f.fi_year * 4 + f.fi_qtr - 1 AS quarter, "
                "sum(f.fi_basic_eps) AS eps "
                "FROM financial f JOIN dimcompany c ON c.sk_companyid = f.sk_companyid "
                "GROUP BY 1, 2 ORDER BY 1, 2"
            ),
            query(
                "SELECT s.symbol, c.companyid FROM dimsecurity s "
                "JOIN dimcompany c ON c.sk_companyid = s.sk_companyid "
                "WHERE s.iscurrent ORDER BY 1, 2"
            ),
        ]
        status, types, taxes = (t.to_pylist() for t in tables[:3])
        earnings, listings = (
            pa.table([pc.cast(t.column(i), f.type) for i, f in enumerate(schema)], schema=schema)
            for t, schema in ((tables[3], EARNINGS_SCHEMA), (tables[4], LISTINGS_SCHEMA))
        )
        return cls(
            status_names={r["st_id"]: r["st_name"] for r in status},
            trade_types={r["tt_id"]: r["tt_name"] for r in types},
            tax_rates={r["tx_id"]: (r["tx_name"], r["tx_rate"]) for r in taxes},
            earnings=earnings,
            listings=listings,
            content_digest=_digest(tables),
        )


def _digest(tables: list[pa.Table]) -> str:
    """A SHA-256 of the contents of ``tables`` (in their row order)."""
    hasher = hashlib.sha256()
    for table in tables:
        table_digest(hasher, table)
    return hasher.hexdigest()
