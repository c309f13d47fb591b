"""Static reference data the incremental dataflow's stateless steps look up.

StatusType, TradeType and TaxRate do not change after the historical load (clause 4.6.15-17), nor
do Financial, DimCompany and DimSecurity (4.6.3, 4.6.6, 4.6.13), so the per-symbol quarterly
earnings the PE ratio needs are fixed too. They are read from the warehouse once, when the
pipeline starts, and the dataflow's map steps use them as plain dictionaries.
"""

from __future__ import annotations

import datetime
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa

from streamdi.arrow_digest import table_digest

#: Runs a SQL query on the warehouse and returns Arrow.
Query = Callable[[str], pa.Table]


def quarter_index(year: int, quarter: int) -> int:
    """A running number of quarters (year * 4 + quarter - 1)."""
    return year * 4 + quarter - 1


def quarter_of(day: datetime.date) -> int:
    return quarter_index(day.year, (day.month - 1) // 3 + 1)


@dataclass(frozen=True)
class Reference:
    """Lookups of the stateless steps; see the module docstring."""

    status_names: dict[str, str] = field(default_factory=dict)
    trade_types: dict[str, str] = field(default_factory=dict)
    tax_rates: dict[str, tuple[str, float]] = field(default_factory=dict)
    #: symbol -> {quarter index: basic EPS} of the company the symbol's current version belongs to
    earnings: dict[str, dict[int, float]] = field(default_factory=dict)
    #: A digest of the contents when read from a warehouse (see :meth:`from_warehouse`): what the
    #: dataflow's logic digest takes for this object instead of going through its dictionaries
    #: (millions of values at SF 100, ~15 s of CPU at every start of the pipeline).
    content_digest: str | None = field(default=None, compare=False)

    def eps4(self, symbol: str, day: datetime.date) -> float | None:
        """Sum of the basic EPS of the four quarters before ``day``'s quarter, or ``None`` when
        the company reported none of them (clause 4.6.10.1)."""
        quarters = self.earnings.get(symbol)
        if not quarters:
            return None
        q = quarter_of(day)
        values = [quarters[i] for i in range(q - 4, q) if i in quarters]
        return float(sum(values)) if values else None

    @classmethod
    def from_warehouse(cls, query: Query) -> Reference:
        """Read the reference data from a loaded warehouse (the DW schema must be the default
        schema of the connection ``query`` uses)."""
        tables = [
            query("SELECT st_id, st_name FROM statustype ORDER BY 1"),
            query("SELECT tt_id, tt_name FROM tradetype ORDER BY 1"),
            query("SELECT tx_id, tx_name, tx_rate FROM taxrate ORDER BY 1"),
            query(
                "SELECT s.symbol, f.fi_year, f.fi_qtr, sum(f.fi_basic_eps) AS eps "
                "FROM dimsecurity s "
                "JOIN dimcompany c ON c.sk_companyid = s.sk_companyid "
                "JOIN dimcompany cc ON cc.companyid = c.companyid "
                "JOIN financial f ON f.sk_companyid = cc.sk_companyid "
                "WHERE s.iscurrent GROUP BY s.symbol, f.fi_year, f.fi_qtr ORDER BY 1, 2, 3"
            ),
        ]
        status, types, taxes = (t.to_pylist() for t in tables[:3])
        found = tables[3]
        earnings: dict[str, dict[int, float]] = {}
        for symbol, year, quarter, eps in zip(
            *(found.column(name).to_pylist() for name in ("symbol", "fi_year", "fi_qtr", "eps")),
            strict=True,
        ):
            earnings.setdefault(symbol, {})[quarter_index(year, quarter)] = eps
        return cls(
            status_names={r["st_id"]: r["st_name"] for r in status},
            trade_types={r["tt_id"]: r["tt_name"] for r in types},
            tax_rates={r["tx_id"]: (r["tx_name"], r["tx_rate"]) for r in taxes},
            earnings=earnings,
            content_digest=_digest(tables),
        )


def _digest(tables: list[pa.Table]) -> str:
    """A SHA-256 of the contents of ``tables`` (in their row order)."""
    hasher = hashlib.sha256()
    for table in tables:
        table_digest(hasher, table)
    return hasher.hexdigest()
