"""DailyMarket.txt and WatchHistory.txt.

DailyMarket: for every day of the Batch1 window (the two years up to the day before the batch
date) and then the day before each incremental batch date (every day of a long feed), one row
per active security that exists on that day; prices follow a random walk with
low <= close <= high.

WatchHistory: each (customer, symbol) pair is watched at most once and cancelled at most once,
later; a watch is placed by an active customer on an active security that both exist then. At
tiny scale factors (below about 0.3) the watches are capped at 30% of all pairs.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numba
import numpy as np
import pyarrow as pa

from tpcdi.generator import lines, sorting
from tpcdi.generator.scale import (
    BATCH1_DATE,
    BATCH1_END,
    DM_BEGIN,
    TRADE_BEGIN,
    Calendar,
    Scale,
    at,
    day,
)

DAY = 86_400
_CHUNK_DAYS = 32


def market_days(calendar: Calendar) -> dict[int, np.ndarray]:
    """The DM_DATE days of each batch: Batch1's two years, then for each incremental batch the
    day before its batch date (the last completed trading day)."""
    days = {1: np.arange(day(DM_BEGIN), day(BATCH1_DATE))}
    for batch in calendar.incremental:
        days[batch] = np.array([day(calendar.date(batch - 1))])
    return days


@dataclass
class PriceWalk:
    """The running close price (cents) of every security across the generated days."""

    close: np.ndarray

    @classmethod
    def start(cls, rng: np.random.Generator, symbols: int) -> PriceWalk:
        return cls(np.exp(rng.uniform(np.log(500), np.log(50_000), symbols)))


def daily_market(
    rng: np.random.Generator,
    walk: PriceWalk,
    days: np.ndarray,
    symbols: pa.Array,
    symbol_day: np.ndarray,
    active: np.ndarray,
) -> Iterator[list[pa.Array]]:
    """DailyMarket.txt fields (without CDC) for ``days``, in chunks of days; rows by day."""
    for begin in range(0, len(days), _CHUNK_DAYS):
        chunk = days[begin : begin + _CHUNK_DAYS]
        steps = np.exp(rng.normal(0, 0.02, (len(chunk), len(walk.close))))
        path = np.clip(walk.close * np.cumprod(steps, axis=0), 50, 100_000)
        walk.close = path[-1]
        exists = (symbol_day[None, :] <= chunk[:, None]) & active[None, :]
        d, s = np.nonzero(exists)
        close = np.round(path[d, s]).astype(np.int64)
        high = close + (close * rng.uniform(0, 0.08, len(close))).astype(np.int64)
        low = np.maximum(1, close - (close * rng.uniform(0, 0.08, len(close))).astype(np.int64))
        yield [
            lines.dates(chunk[d]),
            lines.pick(symbols, s),
            lines.money(close),
            lines.money(high),
            lines.money(low),
            lines.ints(rng.integers(1000, 10**9, len(close))),
        ]


@dataclass(frozen=True)
class _Directory:
    """Sorted creation times with a coarse index over ``begin``..``end``: how many were created
    at or before a time is a search of one bucket's few entries, not of them all."""

    created: np.ndarray
    bucket_start: np.ndarray  # entries created before each bucket's first second (and the end)
    begin: int
    width: int

    def __init__(self, created: np.ndarray, begin: int, end: int, buckets: int = 1 << 16) -> None:
        width = max(1, -(-(end - begin) // buckets))
        edges = begin + width * np.arange(buckets + 1, dtype=np.int64)
        object.__setattr__(self, "created", np.ascontiguousarray(created, dtype=np.int64))
        object.__setattr__(self, "bucket_start", np.searchsorted(created, edges, side="left"))
        object.__setattr__(self, "begin", begin)
        object.__setattr__(self, "width", width)


@numba.njit(cache=True, inline="always")
def _upto(created: np.ndarray, starts: np.ndarray, begin: int, width: int, t: int) -> int:
    """``np.searchsorted(created, t, side="right")`` for ``t`` in the directory's range."""
    k = (t - begin) // width
    lo, hi = int(starts[k]), int(starts[k + 1])
    while lo < hi:
        mid = (lo + hi) >> 1
        if created[mid] <= t:
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(nogil=True, cache=True)
def _pick(
    ts_draw: np.ndarray,
    c_draw: np.ndarray,
    s_draw: np.ndarray,
    begin: int,
    span: int,
    c_created: np.ndarray,
    c_starts: np.ndarray,
    s_created: np.ndarray,
    s_starts: np.ndarray,
    width_c: int,
    width_s: int,
    customer_until: np.ndarray,
    usable: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    m = len(ts_draw)
    ts = np.empty(m, dtype=np.int64)
    c = np.empty(m, dtype=np.int64)
    s = np.empty(m, dtype=np.int64)
    ok = np.empty(m, dtype=np.bool_)
    last_customer, last_usable = len(customer_until) - 1, len(usable) - 1
    for i in range(m):
        # the same arithmetic as NumPy's (float64 products truncated), so the same draws
        t = begin + int(ts_draw[i] * float(span))
        c_upto = _upto(c_created, c_starts, begin, width_c, t)
        s_upto = _upto(s_created, s_starts, begin, width_s, t)
        ci = int(c_draw[i] * float(c_upto))
        si = usable[min(int(s_draw[i] * float(s_upto)), last_usable)]
        ts[i], c[i], s[i] = t, ci, si
        ok[i] = c_upto > 0 and s_upto > 0 and customer_until[min(ci, last_customer)] > t
    return ts, c, s, ok


def _candidates(
    ts_draw: np.ndarray,
    c_draw: np.ndarray,
    s_draw: np.ndarray,
    begin: int,
    span: int,
    customers: _Directory,
    securities: _Directory,
    customer_until: np.ndarray,
    usable: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Candidate watches from three uniform draws each: the time, a customer created by then
    and a usable security created by then; whether the customer is still active then."""
    return _pick(
        ts_draw, c_draw, s_draw, begin, span,
        customers.created, customers.bucket_start, securities.created, securities.bucket_start,
        customers.width, securities.width, customer_until, usable,
    )  # fmt: skip


@dataclass
class Watches:
    """Watch events: customer, symbol, second, cancel flag; sorted by time."""

    customer: np.ndarray
    symbol: np.ndarray
    ts: np.ndarray
    cancel: np.ndarray

    def fields(self, symbols: pa.Array, rows: np.ndarray | None = None) -> list[lines.Field]:
        """WatchHistory.txt fields (without CDC) of the watch events ``rows`` (default all)."""
        sel = np.arange(len(self.ts)) if rows is None else rows
        return [
            lines.ints(self.customer[sel]),
            lines.pick(symbols, self.symbol[sel]),
            lines.timestamps(self.ts[sel]),
            lines.pick(["ACTV", "CNCL"], self.cancel[sel]),
        ]


class WatchBook:
    """Draws watches so that each (customer, symbol) pair is watched once and cancelled once."""

    def __init__(self, rng: np.random.Generator, symbols: int) -> None:
        self.rng = rng
        self.symbols = symbols
        #: every (customer, symbol) key watched so far, sorted (a long feed adds to it daily:
        #: membership by binary search, not a hash of the whole set per lookup)
        self.pairs = np.zeros(0, dtype=np.int64)
        self.open_c = np.zeros(0, dtype=np.int64)
        self.open_s = np.zeros(0, dtype=np.int64)
        self.open_t = np.zeros(0, dtype=np.int64)

    def _draw(
        self,
        n: int,
        begin: int,
        end: int,
        customer_created: np.ndarray,
        customer_until: np.ndarray,
        symbol_created: np.ndarray,
        symbol_ok: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        got_c, got_s, got_t = [], [], []
        need = n
        usable = np.flatnonzero(symbol_ok)
        usable = usable[np.argsort(symbol_created[usable], kind="stable")]
        usable_created = symbol_created[usable]
        customers = _Directory(customer_created, begin, end)
        securities = _Directory(usable_created, begin, end)
        for _ in range(100):
            if need <= 0:
                break
            m = need + need // 4 + 16
            # a time, then a customer and a security that exist then (each uniform among those)
            draws = self.rng.random(m), self.rng.random(m), self.rng.random(m)
            ts, c, s, ok = _candidates(
                *draws, begin, end - begin, customers, securities, customer_until, usable
            )
            key = c * self.symbols + s
            ok &= sorting.first_occurrences(key) & ~self._watched(key)
            c, s, ts, key = c[ok][:need], s[ok][:need], ts[ok][:need], key[ok][:need]
            added = np.sort(key)
            self.pairs = np.insert(self.pairs, np.searchsorted(self.pairs, added), added)
            got_c.append(c)
            got_s.append(s)
            got_t.append(ts)
            need -= len(c)
        return np.concatenate(got_c), np.concatenate(got_s), np.concatenate(got_t)

    def _watched(self, key: np.ndarray) -> np.ndarray:
        """Which keys were watched before."""
        at = np.searchsorted(self.pairs, key)
        return (
            np.asarray(
                (at < len(self.pairs)) & (self.pairs[np.minimum(at, len(self.pairs) - 1)] == key)
            )
            if len(self.pairs)
            else np.zeros(len(key), dtype=bool)
        )

    def _cancel(
        self, chosen: np.ndarray, begin: int, end: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        start = np.maximum(self.open_t[chosen] + 1, begin)
        ts = start + (self.rng.random(len(chosen)) * np.maximum(end - start, 1)).astype(np.int64)
        c, s = self.open_c[chosen], self.open_s[chosen]
        keep = np.ones(len(self.open_t), dtype=bool)
        keep[chosen] = False
        self.open_c, self.open_s, self.open_t = (
            self.open_c[keep],
            self.open_s[keep],
            self.open_t[keep],
        )
        return c, s, ts

    def batch(
        self,
        batch: int,
        calendar: Calendar,
        scale: Scale,
        customer_created: np.ndarray,
        customer_until: np.ndarray,
        symbol_created: np.ndarray,
        symbol_ok: np.ndarray,
    ) -> Watches:
        """The watch events of ``batch``."""
        if batch == 1:
            begin, end = at(TRADE_BEGIN), BATCH1_END
            count, cancels = scale.watches, None
        else:
            begin = at(calendar.date(batch))
            end = begin + DAY
            count, cancels = scale.inc_watches, scale.inc_watch_cancels
        c, s, ts = self._draw(
            count, begin, end, customer_created, customer_until, symbol_created, symbol_ok
        )
        self.open_c = np.concatenate([self.open_c, c])
        self.open_s = np.concatenate([self.open_s, s])
        self.open_t = np.concatenate([self.open_t, ts])
        if cancels is None:
            chosen = np.flatnonzero(self.rng.random(len(self.open_t)) < scale.watch_cancel_share)
        else:
            chosen = self.rng.choice(
                len(self.open_t), min(cancels, len(self.open_t)), replace=False
            )
        cc, cs, ct = self._cancel(np.sort(chosen), begin, end)
        customer = np.concatenate([c, cc])
        symbol = np.concatenate([s, cs])
        stamp = np.concatenate([ts, ct])
        cancel = np.concatenate([np.zeros(len(c), bool), np.ones(len(cc), bool)])
        order = sorting.argsort(stamp)
        return Watches(customer[order], symbol[order], stamp[order], cancel[order])
