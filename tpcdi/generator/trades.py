"""Trades, their status history, holdings and cash transactions.

The model is a set of positions: a buy (market or limit) on an open account for an active symbol
and, once the buy completes, usually a sell of the whole holding later. Market orders go
SBMT -> CMPT within five minutes; limit orders go PNDG -> SBMT -> CMPT or PNDG -> CNCL within 90
days. Every event falls in the batch of its day: Batch1 files hold each trade's state at the end
of Batch1 and its history; an incremental batch holds the day's events as CDC records (``I`` for a
trade's first event, ``U`` after). Events after the last incremental day are never written. A
completed trade makes one HoldingHistory record (a buy opens a holding, a sell closes the buy's)
and one cash transaction.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from tpcdi.generator import lines, sorting
from tpcdi.generator.scale import TRADE_BEGIN, Calendar, Scale, at

DAY = 86_400
#: Status codes of events, in the order a trade goes through them.
PNDG, SBMT, CMPT, CNCL = 0, 1, 2, 3
STATUS = ("PNDG", "SBMT", "CMPT", "CNCL")
#: Trade types: buy/sell x market/limit.
TMB, TMS, TLB, TLS = 0, 1, 2, 3
TYPE = ("TMB", "TMS", "TLB", "TLS")
INVALID_FEE_SHARE = 1e-4


@dataclass(frozen=True)
class TradeNames:
    """The strings a trade's line shows: ``symbols`` (by symbol index) and ``brokers`` (names,
    by the index ``broker_of_trade`` holds for each trade)."""

    symbols: pa.Array
    brokers: pa.Array
    broker_of_trade: np.ndarray


@dataclass
class Trades:
    """Every trade (index = T_ID) and every status event."""

    created: np.ndarray
    kind: np.ndarray  # TMB, TMS, TLB, TLS
    account: np.ndarray
    symbol: np.ndarray
    qty: np.ndarray
    bid: np.ndarray  # cents
    price: np.ndarray  # cents
    charge: np.ndarray  # cents
    commission: np.ndarray  # cents
    tax: np.ndarray  # cents
    cash: np.ndarray  # bool
    holding: np.ndarray  # T_ID of the buy whose holding a completed trade changes
    event_trade: np.ndarray  # events, sorted by time
    event_status: np.ndarray
    event_ts: np.ndarray
    event_batch: np.ndarray  # the batch each event is written in
    event_first: np.ndarray  # the event is its trade's first (a CDC ``I`` record)


def _pick_open(
    rng: np.random.Generator, created: np.ndarray, ok_until: np.ndarray, at_ts: np.ndarray
) -> np.ndarray:
    """For each time, a random item created at or before it and still usable after it (items
    sorted by creation); -1 where none is found."""
    chosen = np.full(len(at_ts), -1, dtype=np.int64)
    todo = np.arange(len(at_ts))
    for _ in range(50):
        if len(todo) == 0:
            break
        upto = np.searchsorted(created, at_ts[todo], side="right")
        pick = (rng.random(len(todo)) * upto).astype(np.int64)
        good = (upto > 0) & (ok_until[np.minimum(pick, len(created) - 1)] > at_ts[todo])
        chosen[todo[good]] = pick[good]
        todo = todo[~good & (upto > 0)]
    return chosen


def _timeline(
    rng: np.random.Generator, start: np.ndarray, limit: np.ndarray
) -> tuple[list[tuple[np.ndarray, int, np.ndarray]], np.ndarray]:
    """Status events of orders placed at ``start``: [(rows, status, ts)] and the completion
    second of each order (-1 if it never completes)."""
    n = len(start)
    wait = (rng.random(n) * 90 * DAY).astype(np.int64)
    cancel = limit & (rng.random(n) < 0.1)
    submit = np.where(limit, start + wait, start)
    done = submit + rng.integers(1, 301, n)
    rows = np.arange(n)
    events = [
        (rows[limit], PNDG, start[limit]),
        (rows[~cancel], SBMT, submit[~cancel]),
        (rows[~cancel], CMPT, done[~cancel]),
        (rows[cancel], CNCL, (start + wait)[cancel]),
    ]
    return events, np.where(cancel, -1, done)


def build(
    rng: np.random.Generator,
    scale: Scale,
    calendar: Calendar,
    account_created: np.ndarray,
    account_usable: np.ndarray,
    symbol_created: np.ndarray,
    symbol_usable: np.ndarray,
) -> Trades:
    """Draw every position between the first trading day and the end of the calendar's last
    day.

    ``*_created`` are sorted creation seconds; ``*_usable`` the second until which each can be
    traded (an account until it closes or its customer becomes inactive).
    """
    begin = at(TRADE_BEGIN)
    horizon = calendar.horizon
    n = round(scale.positions_per_day * (horizon - begin) / DAY)
    # one market buy at noon of each incremental day, so every batch has a new and a completed
    # trade however small the scale factor
    noon = np.array([at(calendar.date(b)) for b in calendar.incremental]) + DAY // 2
    buy_at = np.sort(
        np.concatenate([begin + (rng.random(n) * (horizon - begin)).astype(np.int64), noon])
    )
    account = _pick_open(rng, account_created, account_usable, buy_at)
    symbol = _pick_open(rng, symbol_created, symbol_usable, buy_at)
    keep = (account >= 0) & (symbol >= 0)
    buy_at, account, symbol = buy_at[keep], account[keep], symbol[keep]
    n = len(buy_at)
    buy_limit = (rng.random(n) < 0.6) & ~np.isin(buy_at, noon)
    buy_events, buy_done = _timeline(rng, buy_at, buy_limit)
    # sells: most completed holdings are sold after 1 day to 1 year
    sold = (buy_done >= 0) & (rng.random(n) < 0.97)
    sell_of = np.flatnonzero(sold)
    sell_at = buy_done[sell_of] + rng.integers(DAY, 365 * DAY, len(sell_of))
    inside = sell_at < horizon
    sell_of, sell_at = sell_of[inside], sell_at[inside]
    sell_limit = rng.random(len(sell_of)) < 0.6
    sell_events, _ = _timeline(rng, sell_at, sell_limit)

    created = np.concatenate([buy_at, sell_at])
    order = sorting.argsort(created)  # T_ID = rank by creation
    tid = np.empty(len(created), dtype=np.int64)
    tid[order] = np.arange(len(created))
    m = len(created)
    position = np.concatenate([np.arange(n), sell_of])
    is_sell = np.concatenate([np.zeros(n, bool), np.ones(len(sell_of), bool)])
    is_limit = np.concatenate([buy_limit, sell_limit])
    kind = np.where(is_sell, np.where(is_limit, TLS, TMS), np.where(is_limit, TLB, TMB))
    qty = rng.integers(10, 10001, n)[position]
    bid = rng.integers(100, 1001, m)
    price = np.maximum(1, (bid * rng.uniform(0.95, 1.05, m)).astype(np.int64))
    value = qty * price  # cents
    commission = (value * rng.uniform(0, 0.02, m)).astype(np.int64)
    charge = (value * rng.uniform(0, 0.005, m)).astype(np.int64)
    tax = (value * rng.uniform(0, 0.1, m)).astype(np.int64)
    bad = rng.random(m) < INVALID_FEE_SHARE
    commission[bad] = (value[bad] * rng.uniform(1.5, 3, int(bad.sum()))).astype(np.int64)
    bad = rng.random(m) < INVALID_FEE_SHARE
    charge[bad] = (value[bad] * rng.uniform(1.5, 3, int(bad.sum()))).astype(np.int64)
    holding = tid[position]  # the buy's T_ID for both legs

    ev_trade, ev_status, ev_ts = [], [], []
    for offset, events in ((0, buy_events), (n, sell_events)):
        for rows, status, ts in events:
            ev_trade.append(tid[rows + offset])
            ev_status.append(np.full(len(rows), status, dtype=np.int8))
            ev_ts.append(ts)
    ev_trade_a, ev_status_a, ev_ts_a = (
        np.concatenate(ev_trade),
        np.concatenate(ev_status),
        np.concatenate(ev_ts),
    )
    written = ev_ts_a < horizon
    ev_trade_a, ev_status_a, ev_ts_a = ev_trade_a[written], ev_status_a[written], ev_ts_a[written]
    by_time = sorting.lexsort((ev_status_a, ev_trade_a, ev_ts_a))
    ev_trade_a, ev_status_a, ev_ts_a = ev_trade_a[by_time], ev_status_a[by_time], ev_ts_a[by_time]
    first = sorting.first_occurrences(ev_trade_a)

    def ordered(values: np.ndarray) -> np.ndarray:
        out = np.empty_like(values)
        out[tid] = values
        return out

    return Trades(
        created=ordered(created),
        kind=ordered(kind),
        account=ordered(account[position]),
        symbol=ordered(symbol[position]),
        qty=ordered(qty),
        bid=ordered(bid),
        price=ordered(price),
        charge=ordered(charge),
        commission=ordered(commission),
        tax=ordered(tax),
        cash=ordered(rng.random(m) < 0.2),
        holding=ordered(holding),
        event_trade=ev_trade_a,
        event_status=ev_status_a,
        event_ts=ev_ts_a,
        event_batch=calendar.batch_of(ev_ts_a),
        event_first=first,
    )


def is_invalid(trades: Trades, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Masks of completed trades ``rows`` whose commission, and whose fee, exceed their value."""
    value = trades.qty[rows] * trades.price[rows]
    return trades.commission[rows] > value, trades.charge[rows] > value


def trade_fields(
    trades: Trades,
    rows: np.ndarray,
    status: np.ndarray,
    ts: np.ndarray,
    names: TradeNames,
) -> list[lines.Field]:
    """Trade.txt fields (without CDC) of trades ``rows`` in ``status`` at ``ts``."""
    done = status == CMPT

    def fee(cents: np.ndarray) -> lines.Field:
        return lines.with_nulls(lines.money(cents[rows]), ~done)

    return [
        lines.ints(rows),
        lines.timestamps(ts),
        lines.pick(STATUS, status),
        lines.pick(TYPE, trades.kind[rows]),
        lines.ints(trades.cash[rows]),
        lines.pick(names.symbols, trades.symbol[rows]),
        lines.ints(trades.qty[rows]),
        lines.money(trades.bid[rows]),
        lines.ints(trades.account[rows]),
        lines.pick(names.brokers, names.broker_of_trade[rows]),
        fee(trades.price),
        fee(trades.charge),
        fee(trades.commission),
        fee(trades.tax),
    ]


def history_fields(trades: Trades, events: np.ndarray) -> list[lines.Field]:
    """TradeHistory.txt fields of status ``events``."""
    return [
        lines.ints(trades.event_trade[events]),
        lines.timestamps(trades.event_ts[events]),
        lines.pick(STATUS, trades.event_status[events]),
    ]


def holding_fields(trades: Trades, events: np.ndarray) -> list[lines.Field]:
    """HoldingHistory.txt fields (without CDC) of completion ``events``: a buy opens a holding
    (before 0, after its quantity), a sell closes its buy's holding."""
    rows = trades.event_trade[events]
    sell = np.isin(trades.kind[rows], (TMS, TLS))
    qty = trades.qty[rows]
    return [
        lines.ints(trades.holding[rows]),
        lines.ints(rows),
        lines.ints(np.where(sell, qty, 0)),
        lines.ints(np.where(sell, 0, qty)),
    ]


def cash_fields(trades: Trades, events: np.ndarray) -> list[lines.Field]:
    """CashTransaction.txt fields (without CDC) of completion ``events``: the money the trade
    moves in or out of its account at completion."""
    rows = trades.event_trade[events]
    sell = np.isin(trades.kind[rows], (TMS, TLS))
    qty = trades.qty[rows]
    value = qty * trades.price[rows]
    fees = trades.charge[rows] + trades.commission[rows]
    return [
        lines.ints(trades.account[rows]),
        lines.timestamps(trades.event_ts[events]),
        lines.money(np.where(sell, value - fees, -(value + fees))),
        lines.pick(["Purchase of ", "Sale of "], sell),
        lines.glued(lines.ints(qty)),
        lines.glued(lines.const(" shares, trade ", len(rows))),
        lines.glued(lines.ints(rows)),
    ]
