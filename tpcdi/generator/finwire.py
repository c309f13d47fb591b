"""FINWIRE: companies (CMP), securities (SEC) and quarterly financials (FIN) in fixed-width
quarter files FINWIRE1967Q1 .. FINWIRE2017Q3.

Rules kept (clauses 2.2.2.8, 4.5.3, 4.5.6, 4.5.14 and the audit): a company's CIK and name never
change and names are unique; a SEC or FIN record refers to a company (by CIK or by name) that
already has a CMP record; no company or symbol has two records on one day; at most one FIN per
company and quarter, with EPS, diluted EPS and margin consistent with earnings; every PTS is within
Batch1. A tenth of the symbols are inactive securities that nothing trades or watches.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tpcdi.generator import lines, sorting, text
from tpcdi.generator.people import AddressBook, addresses
from tpcdi.generator.reference import industries
from tpcdi.generator.scale import BATCH1_END, FW_BEGIN_YEAR, Scale, at
from tpcdi.generator.words import BAD_SPRATINGS, FIRST_NAMES, LAST_NAMES, SPRATINGS

DAY = 86_400
QUARTERS = (2017 - FW_BEGIN_YEAR) * 4 + 3  # 1967Q1 .. 2017Q3
FW_END = BATCH1_END  # exclusive


def quarter_starts() -> np.ndarray:
    """Second at which each quarter starts, plus the end of the last quarter's data."""
    starts = [
        at(datetime.date(FW_BEGIN_YEAR + q // 4, 3 * (q % 4) + 1, 1)) for q in range(QUARTERS)
    ]
    return np.array([*starts, FW_END], dtype=np.int64)


def quarter_name(q: int) -> str:
    return f"FINWIRE{FW_BEGIN_YEAR + q // 4}Q{q % 4 + 1}"


@dataclass(frozen=True)
class Records:
    """Every FINWIRE record, sorted by PTS."""

    lines: pa.Array
    kinds: np.ndarray  # 0 CMP, 1 SEC, 2 FIN per line
    quarter_bounds: np.ndarray  # index into lines where each quarter file starts (+ end)


@dataclass
class Market:
    """Companies and securities as the rest of the data set needs them, and the FINWIRE records:
    :meth:`records` draws the FIN records' values (the last draws from the FINWIRE stream, so
    they can run on another thread while the rest of the model is drawn) and sorts every
    record."""

    company_created: np.ndarray  # second of the first CMP record, per CIK
    company_names: pa.Array
    symbols: pa.Array  # per security
    symbol_created: np.ndarray  # second of the first SEC record
    symbol_active: np.ndarray  # whether the security trades
    finish: Callable[[], Records]

    def records(self) -> Records:
        """Every FINWIRE record. Draws them: call once (they are not kept, hundreds of MB at
        SF 100)."""
        return self.finish()


def _rpad(values: pa.Array, width: int) -> pa.Array:
    filled = pc.utf8_rpad(pc.fill_null(values, ""), width=width, padding=" ")
    return pc.utf8_slice_codeunits(filled, 0, width)


def _lpad(values: pa.Array, width: int) -> pa.Array:
    return pc.utf8_lpad(pc.fill_null(values, ""), width=width, padding=" ")


def _pts(seconds: np.ndarray) -> pa.Array:
    stamp = text.timestamps(seconds)
    return text.concat(
        pc.utf8_slice_codeunits(stamp, 0, 4),
        pc.utf8_slice_codeunits(stamp, 5, 7),
        pc.utf8_slice_codeunits(stamp, 8, 10),
        "-",
        pc.utf8_slice_codeunits(stamp, 11, 13),
        pc.utf8_slice_codeunits(stamp, 14, 16),
        pc.utf8_slice_codeunits(stamp, 17, 19),
    )


def _spread(rng: np.random.Generator, count: int, start: int, end: int) -> np.ndarray:
    return np.sort(start + (rng.random(count) * (end - start)).astype(np.int64))


def _later_distinct(
    rng: np.random.Generator, owners: np.ndarray, created: np.ndarray, count: int, pool: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``count`` (owner, second) updates of owners from ``pool``, each on a later day than the
    owner's creation and never two on one day for one owner."""
    got_o, got_t = [], []
    used = set((owners.astype(np.int64) * 100_000 + created[owners] // DAY).tolist())
    need = count
    while need > 0:
        o = rng.choice(pool, 2 * need + 8)
        first = (created[o] // DAY + 1) * DAY
        ok = first < FW_END
        o, first = o[ok], first[ok]
        t = first + (rng.random(len(o)) * (FW_END - first)).astype(np.int64)
        keys = o.astype(np.int64) * 100_000 + t // DAY
        keep: list[int] = []
        for i, key in enumerate(keys.tolist()):
            if key not in used and len(keep) < need:
                used.add(key)
                keep.append(i)
        got_o.append(o[keep])
        got_t.append(t[keep])
        need -= len(keep)
    return np.concatenate(got_o), np.concatenate(got_t)


def _cmp_lines(
    rng: np.random.Generator, book: AddressBook, cik: np.ndarray, ts: np.ndarray, names: pa.Array
) -> pa.Array:
    n = len(cik)
    place = addresses(rng, book, n)
    inds = industries()
    rating = text.choose(rng, SPRATINGS, n)
    rating = pc.if_else(pa.array(rng.random(n) < 0.03), text.choose(rng, BAD_SPRATINGS, n), rating)
    founded = text.with_nulls(
        text.compact_dates(ts // DAY - rng.integers(365, 365 * 120, n)), rng.random(n) < 0.03
    )
    ceo = text.concat(text.choose(rng, FIRST_NAMES, n), " ", text.choose(rng, LAST_NAMES, n))
    country = text.with_nulls(place["country"], rng.random(n) < 0.05)
    fields = [
        (_pts(ts), 15),
        ("CMP", 3),
        (names, 60),
        (text.padded(cik, 10), 10),
        (text.pick(["ACTV", "INAC"], (rng.random(n) < 0.13).astype(np.int64)), 4),
        (text.pick([r[0] for r in inds], rng.integers(0, len(inds), n)), 2),
        (rating, 4),
        (founded, 8),
        (place["addr1"], 80),
        (place["addr2"], 80),
        (place["zipcode"], 12),
        (place["city"], 25),
        (place["state"], 20),
        (country, 24),
        (ceo, 46),
        (text.letters(rng, rng.integers(20, 151, n)), 150),
    ]
    return text.concat(
        *[_rpad(v if isinstance(v, pa.Array) else pa.array([v] * n), w) for v, w in fields]
    )


def _company_ref(rng: np.random.Generator, cik: np.ndarray, names: pa.Array) -> pa.Array:
    """CoNameOrCIK: the zero-padded CIK or the name padded to 60, half each."""
    by_cik = rng.random(len(cik)) < 0.5
    return pc.if_else(pa.array(by_cik), text.padded(cik, 10), _rpad(names.take(pa.array(cik)), 60))


def _money(values: np.ndarray, width: int) -> pa.Array:
    return _lpad(text.money(np.round(values * 100).astype(np.int64)), width)


def build(rng: np.random.Generator, scale: Scale, book: AddressBook) -> Market:
    """Draw every FINWIRE record of the data set."""
    bounds = quarter_starts()
    nc = scale.companies
    first = scale.first_quarter_companies
    created = np.concatenate(
        [
            _spread(rng, first, bounds[0], bounds[1]),
            _spread(rng, nc - first, bounds[1], FW_END - DAY),
        ]
    )
    company_names = text.concat(
        text.letters(rng, rng.integers(12, 45, nc)), " ", text.ints(np.arange(nc))
    )
    # CMP: creations and updates
    upd_c, upd_t = _later_distinct(
        rng, np.arange(nc), created, scale.cmp_records - nc, np.arange(nc)
    )
    cmp_cik = np.concatenate([np.arange(nc), upd_c])
    cmp_ts = np.concatenate([created, upd_t])
    cmp_lines = _cmp_lines(rng, book, cmp_cik, cmp_ts, company_names.take(pa.array(cmp_cik)))

    # SEC: symbols created after their company, then updates
    ns = scale.securities
    owner = rng.integers(0, nc, ns)
    start = (created[owner] // DAY) * DAY
    sym_created = start + (rng.random(ns) * (FW_END - start)).astype(np.int64)
    sym_created = np.maximum(sym_created, created[owner] + 1)
    raw = text.letters(rng, rng.integers(3, 8, ns))
    symbols = text.concat(
        pc.utf8_upper(pc.replace_substring(raw, " ", "X")), text.ints(np.arange(ns))
    )
    active = rng.random(ns) >= 0.1
    upd_s, upd_st = _later_distinct(
        rng, np.arange(ns), sym_created, scale.sec_records - ns, np.arange(ns)
    )
    sec_sym = np.concatenate([np.arange(ns), upd_s])
    sec_ts = np.concatenate([sym_created, upd_st])
    n = len(sec_sym)
    issue = text.pick(
        ["COMMON", "PREF_A", "PREF_B", "PREF_C", "PREF_D"],
        rng.choice(5, n, p=[0.73, 0.15, 0.08, 0.03, 0.01]),
    )
    first_trade = sec_ts // DAY - rng.integers(0, 365 * 40, n)
    sec_fields = [
        (_pts(sec_ts), 15),
        (pa.array(["SEC"] * n), 3),
        (symbols.take(pa.array(sec_sym)), 15),
        (issue, 6),
        (text.pick(["INAC", "ACTV"], active[sec_sym].astype(np.int64)), 4),
        (text.letters(rng, rng.integers(20, 71, n)), 70),
        (text.choose(rng, ["NYSE", "NASDAQ", "AMEX", "PCX"], n), 6),
    ]
    sec_lines = text.concat(
        *[_rpad(v, w) for v, w in sec_fields],
        _lpad(text.ints(rng.integers(10**6, 10**10, n)), 13),
        text.compact_dates(first_trade),
        text.compact_dates(first_trade + rng.integers(0, 365 * 5, n)),
        _money(rng.uniform(0, 10, n), 12),
        _company_ref(rng, owner[sec_sym], company_names),
    )

    # FIN: one per company and quarter after its creation, for most quarters
    quarter_of_creation = np.searchsorted(bounds, created, side="right") - 1
    grid_c, grid_q = np.nonzero(
        (np.arange(QUARTERS)[None, :] >= quarter_of_creation[:, None])
        & (rng.random((nc, QUARTERS)) < scale.fin_share)
    )
    low = np.maximum(bounds[grid_q], created[grid_c] + 1)
    high = bounds[grid_q + 1]
    ok = low < high
    grid_c, grid_q, low, high = grid_c[ok], grid_q[ok], low[ok], high[ok]
    fin_ts = low + (rng.random(len(low)) * (high - low)).astype(np.int64)

    def finish() -> Records:
        fin_lines = _fin_lines(rng, grid_c, grid_q, fin_ts, bounds, company_names)
        lines = pa.concat_arrays([cmp_lines, sec_lines, fin_lines])
        stamps = np.concatenate([cmp_ts, sec_ts, fin_ts])
        kinds = np.concatenate(
            [
                np.zeros(len(cmp_ts), np.int8),
                np.ones(len(sec_ts), np.int8),
                np.full(len(fin_ts), 2, np.int8),
            ]
        )
        order = sorting.argsort(stamps)
        return Records(
            lines=lines.take(pa.array(order)),
            kinds=kinds[order],
            quarter_bounds=np.searchsorted(stamps[order], bounds),
        )

    return Market(
        company_created=created,
        company_names=company_names,
        symbols=symbols,
        symbol_created=sym_created,
        symbol_active=active,
        finish=finish,
    )


def _fin_lines(
    rng: np.random.Generator,
    company: np.ndarray,
    quarter: np.ndarray,
    ts: np.ndarray,
    bounds: np.ndarray,
    names: pa.Array,
) -> pa.Array:
    n = len(company)
    revenue = np.round(rng.uniform(1e6, 1e10, n), 2)
    earnings = np.round(revenue * rng.uniform(-0.2, 0.4, n), 2)
    shares = rng.integers(10**6, 10**9, n)
    diluted = (shares * rng.uniform(1.0, 1.1, n)).astype(np.int64)
    year = FW_BEGIN_YEAR + quarter // 4

    def money(values: np.ndarray, width: int) -> lines.Field:
        return lines.padded(lines.money(np.round(values * 100).astype(np.int64)), width, right=True)

    fields = [
        lines.stamps(ts),
        lines.const("FIN", n),
        lines.ints(year),
        lines.ints(quarter % 4 + 1),
        lines.compact_dates(bounds[quarter] // DAY),
        lines.compact_dates(ts // DAY),
        money(revenue, 17),
        money(earnings, 17),
        money(earnings / shares, 12),
        money(earnings / diluted, 12),
        money(earnings / revenue, 12),
        money(rng.uniform(0, 1e9, n), 17),  # drawn in this order, as the fields are written
        money(rng.uniform(1e6, 1e11, n), 17),
        money(rng.uniform(1e5, 1e10, n), 17),
        lines.padded(lines.ints(shares), 13, right=True),
        lines.padded(lines.ints(diluted), 13, right=True),
    ]
    # CoNameOrCIK: the zero-padded CIK or the name padded to 60, half each
    nc = len(names)
    refs = pa.concat_arrays([text.padded(np.arange(nc), 10), _rpad(names, 60)])
    by_cik = rng.random(n) < 0.5
    fields.append(lines.pick(refs, np.where(by_cik, company, nc + company)))
    return lines.format_strings(fields)
