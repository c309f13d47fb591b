"""Writes the trade side of each batch (Trade.txt, TradeHistory.txt, HoldingHistory.txt,
CashTransaction.txt) and their answer keys, counted from the records written."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tpcdi.generator import lines, sorting
from tpcdi.generator.trades import (
    CMPT,
    CNCL,
    TLB,
    TLS,
    TMB,
    TMS,
    TradeNames,
    Trades,
    cash_fields,
    history_fields,
    holding_fields,
    is_invalid,
    trade_fields,
)  # fmt: skip
from tpcdi.generator.writer import AuditRow, StagingWriter

Dsn = Callable[[str, int], np.ndarray]


def _keys(dataset: str, batch: int, values: dict[str, int]) -> list[AuditRow]:
    return [AuditRow(dataset, batch, name, value) for name, value in values.items()]


def _trade_keys(
    trades: Trades, batch: int, rows: int, new: int, ids: np.ndarray, status: np.ndarray
) -> list[AuditRow]:
    comm, charge = is_invalid(trades, ids[status == CMPT])
    return _keys("DimTrade", batch, {
        "T_Records": rows, "T_NEW": new, "T_CanceledTrades": int((status == CNCL).sum()),
        "T_InvalidCommision": int(comm.sum()), "T_InvalidCharge": int(charge.sum()),
    })  # fmt: skip


def write_trades(w: StagingWriter, trades: Trades, batch: int, names: TradeNames, dsn: Dsn) -> None:
    """Write the four trade-side files of ``batch`` and their ``*_audit.csv``."""
    t = trades
    events = np.flatnonzero(t.event_batch == batch)  # in time order

    def columns(ids: np.ndarray, status: np.ndarray, ts: np.ndarray) -> list[lines.Field]:
        return trade_fields(t, ids, status, ts, names)

    if batch == 1:
        # each trade as it stands at the end of Batch1 (its last event there), by T_ID
        last = np.full(len(t.created), -1, dtype=np.int64)
        last[t.event_trade[events]] = events
        ids = np.flatnonzero(last >= 0)
        status, ts = t.event_status[last[ids]], t.event_ts[last[ids]]
        w.formatted_rows(1, "Trade.txt", len(ids), lambda i: columns(ids[i], status[i], ts[i]))
        w.audit(1, "Trade", _trade_keys(t, 1, len(ids), len(ids), ids, status))
        history = events[sorting.lexsort((t.event_ts[events], t.event_trade[events]))]
        w.formatted_rows(
            1, "TradeHistory.txt", len(history), lambda i: history_fields(t, history[i])
        )
        kind = t.kind[t.event_trade[history]]
        w.audit(1, "TradeHistory", _keys("DimTradeHistory", 1, {
            "TH_Records": len(history), "TH_TLBTrades": int((kind == TLB).sum()),
            "TH_TLSTrades": int((kind == TLS).sum()), "TH_TMBTrades": int((kind == TMB).sum()),
            "TH_TMSTrades": int((kind == TMS).sum()),
            "TH_CanceledLTrades": int((t.event_status[history] == CNCL).sum()),
        }))  # fmt: skip
    else:
        # the day's events as CDC records: I for a trade's first event, U after
        ids, status = t.event_trade[events], t.event_status[events]
        flags = (~t.event_first[events]).astype(np.int64)

        def incremental(i: np.ndarray) -> list[lines.Field]:
            cdc = [lines.pick(["I", "U"], flags[i]), lines.ints(dsn("trade", len(i)))]
            return cdc + columns(ids[i], status[i], t.event_ts[events[i]])

        w.formatted_rows(batch, "Trade.txt", len(events), incremental)
        new = int((flags == 0).sum())
        w.audit(batch, "Trade", _trade_keys(t, batch, len(events), new, ids, status))

    done = events[t.event_status[events] == CMPT]
    holdings = done[sorting.argsort(t.event_trade[done])] if batch == 1 else done

    def cdc(name: str, n: int) -> list[lines.Field]:
        return [] if batch == 1 else [lines.const("I", n), lines.ints(dsn(name, n))]

    w.formatted_rows(
        batch,
        "HoldingHistory.txt",
        len(holdings),
        lambda i: cdc("holding", len(i)) + holding_fields(t, holdings[i]),
    )
    w.audit(batch, "HoldingHistory", _keys("FactHoldings", batch, {"HH_RECORDS": len(done)}))
    w.formatted_rows(
        batch,
        "CashTransaction.txt",
        len(done),
        lambda i: cdc("cash", len(i)) + cash_fields(t, done[i]),
    )
    count = len(done)
    w.audit(batch, "CashTransaction", _keys("DimTradeHistory", batch, {
        "CT_Records": count, "CT_Trades": count, "CT_AccountsCreations": 0,
        "CT_UpdatedAccounts": 0,
    }))  # fmt: skip
