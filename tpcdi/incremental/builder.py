"""What the steps of the incremental TPC-DI dataflow share while it is declared: the constants,
the state tables (:class:`FlowTables`), the alert plumbing (:class:`FlowBuilder`) and the column
helpers of the step modules (:mod:`tpcdi.incremental.dimension_steps`,
:mod:`tpcdi.incremental.fact_steps`)."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from etl_dataflows import Dataflow, col, concat, if_else, lit
from etl_dataflows.expressions import Expr
from etl_dataflows.tables import HistoryTable, Table, WindowTable
from tpcdi.incremental import rules
from tpcdi.incremental.changes import FILE_OF, columns_of_kind
from tpcdi.incremental.reference import Reference
from tpcdi.warehouse import tables as dw

FLOW_NAME = "tpcdi"
SOURCE = "changes"
DAY_US = 86_400_000_000
#: The 52-week window (clause 4.6.10.1: back to, not including, the same date one year earlier);
#: exact for dates whose previous year has 365 days, as both incremental batch dates of DIGen.
WINDOW_SPAN = 365 * DAY_US
#: The DW table an incremental file feeds (the ``messagesource`` of its alerts, as in Batch1's).
TABLE_OF_KIND: dict[str, str] = {
    "Account": "DimAccount",
    "Trade": "DimTrade",
    "CashTransaction": "FactCashBalances",
    "HoldingHistory": "FactHoldings",
    "DailyMarket": "FactMarketHistory",
    "WatchHistory": "FactWatches",
}
#: Sinks whose warehouse table has exactly the output columns (no engine columns).
PLAIN_SINKS = ("factholdings", "factmarkethistory", "dimessages")

NULL = lit(None)

ALERT_COLUMNS: dict[str, str] = {
    "messagedateandtime": "timestamp",
    "batchid": "int64",
    "messagesource": "string",
    "messagetext": "string",
    "messagetype": "string",
    "messagedata": "string",
}
#: What a transactional step emits for its alerts besides its own columns.
PROBLEM_COLUMNS: dict[str, str] = {
    "batchid": "int64",
    "problem": "string",
    "line": "int64",
}


def history_columns(table: dw.WarehouseTable, key: str, surrogate: str) -> dict[str, str]:
    skip = {key, surrogate, "iscurrent", "effectivedate", "enddate"}
    return {n: t for n, t in table.columns if n not in skip}


def plain_columns(table: dw.WarehouseTable, keys: Sequence[str]) -> dict[str, str]:
    return {n: t for n, t in table.columns if n not in keys}


def declare_history(
    flow: Dataflow,
    table: dw.WarehouseTable,
    key: tuple[str, str],
    surrogate: str,
    extra: dict[str, str] | None = None,
    indexes: Sequence[str] = (),
    fills: dict[str, Expr] | None = None,
) -> HistoryTable:
    columns = {**history_columns(table, key[0], surrogate), **(extra or {})}
    return flow.history_table(
        table.name,
        key={key[0]: key[1]},
        columns=columns,
        surrogate=surrogate,
        effective="effectivedate",
        end="enddate",
        current="iscurrent",
        period="date",
        indexes=indexes,
        fills=fills,
    )


def display_name(first: str, last: str) -> Expr:
    """``first last`` of two name columns (either alone when the other is null): DimCustomer's
    ``displayname`` in version 2 of the dataflow."""
    return if_else(
        col(first).is_null(),
        col(last),
        if_else(col(last).is_null(), col(first), concat(col(first), " ", col(last))),
    )


def now_column(n: int) -> pa.Array:
    now = datetime.datetime.now().replace(microsecond=0)  # the run's clock (local time)
    return pa.array([now] * n, pa.timestamp("us"))


def text_of(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    return pc.fill_null(pc.cast(values, pa.string()), "null")


def alert_rows(
    table: pa.Table, source: str, text: str | pa.Array, data: pa.Array, kind: str = "Alert"
) -> pa.Table:
    n = table.num_rows
    texts = pa.array([text] * n, pa.string()) if isinstance(text, str) else text
    return pa.table(
        {
            "messagedateandtime": now_column(n),
            "batchid": table.column("batchid"),
            "messagesource": pa.array([source] * n, pa.string()),
            "messagetext": texts,
            "messagetype": pa.array([kind] * n, pa.string()),
            "messagedata": data,
        }
    )


def where_in_file(file: str, table: pa.Table) -> pa.Array:
    """`` (<file> line <n>)`` for each row, appended to a dangling reference's message data."""
    return pc.binary_join_element_wise(
        pa.array([f" ({file} line "] * table.num_rows), text_of(table.column("line")), ")", ""
    )


@dataclass(frozen=True)
class ProblemText:
    """The message data of a step's problem rows: ``label`` + the value of ``column`` (``null``
    when null), pair after pair. The step emits the columns (:meth:`columns`); the text is made
    only for the rows that carry a problem, column-at-a-time, when they become alerts."""

    parts: tuple[tuple[str, str], ...]

    def columns(self) -> dict[str, Expr]:
        """The step's output columns the text needs."""
        return {f"pd_{column}": col(column) for _, column in self.parts}

    def render(self, table: pa.Table) -> pa.Array:
        pieces: list[Any] = []
        for label, column in self.parts:
            pieces += [label, text_of(table.column(f"pd_{column}"))]
        return pc.binary_join_element_wise(*pieces, "")


def problem_text(*pairs: tuple[str, str]) -> ProblemText:
    """``problem_text(("T_ID = ", "T_ID"), (", T_CA_ID = ", "T_CA_ID"))``: see
    :class:`ProblemText`."""
    return ProblemText(tuple(pairs))


def sk_of_micros(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    days = pc.cast(pc.divide(pc.cast(values, pa.int64()), DAY_US), pa.int32())
    return rules.sk_dateid(pc.cast(days, pa.date32()))


def years_before(day: datetime.date | None, years: int) -> int | None:
    if day is None:
        return None
    try:
        earlier = day.replace(year=day.year - years)
    except ValueError:  # 29 February
        earlier = day.replace(year=day.year - years, day=28)
    return (earlier - datetime.date(1970, 1, 1)).days


def trade_alert(column: str, text: str) -> Callable[[pa.Table], pa.Table]:
    def to_alert(t: pa.Table) -> pa.Table:
        data = pc.binary_join_element_wise(
            "T_ID = ", text_of(t.column("T_ID")), f", {column} = ", text_of(t.column(column)), ""
        )
        return alert_rows(t, "DimTrade", text, data)

    return to_alert


@dataclass(frozen=True)
class FlowTables:
    """The state tables of the dataflow (the warehouse's engine tables and the ``aux_*`` state)."""

    dimcustomer: HistoryTable
    dimaccount: HistoryTable
    dimsecurity: HistoryTable
    dimbroker: HistoryTable
    dimtrade: Table
    factcashbalances: Table
    factwatches: Table
    prospect: Table
    aux_cash: Table
    aux_customer_match: Table
    aux_prospect_match: Table
    aux_market_window: WindowTable


@dataclass
class FlowBuilder:
    """The dataflow being declared, its lookups and tables, and the alert steps so far (merged
    into DImessages at the end)."""

    flow: Dataflow
    ref: Reference
    tables: FlowTables
    alerts: list[str] = field(default_factory=list)
    batchid: Expr = field(default_factory=lambda: col("batchid"))
    version: int = 1
    """The version of the dataflow being declared (:func:`tpcdi.incremental.flow.build_flow`)."""
    sk_batch: Expr = field(default_factory=lambda: col("sk_batchdate"))

    def kind_rows(self, kind: str) -> str:
        """The events of one incremental file (``kind``), with only its file's columns (the
        selection costs nothing; filtering the ~100 columns of every event would)."""
        columns = columns_of_kind(kind)
        names = list(columns)
        narrow = self.flow.map(
            f"{kind.lower()}_columns", lambda t: t.select(names), schema=columns, input=SOURCE
        )
        return self.flow.filter(f"{kind.lower()}_rows", col("kind") == kind, input=narrow)

    def problems(self, step: str, source: str, about: ProblemText) -> None:
        """Route the rows of ``step`` that carry a problem to the alerts, their message data
        ``about`` them."""
        self.flow.filter(f"{step}_problems", col("problem").not_null(), input=step)

        def to_alert(table: pa.Table) -> pa.Table:
            data = pc.binary_join_element_wise(
                about.render(table), where_in_file(FILE_OF[source], table), ""
            )
            return alert_rows(table, TABLE_OF_KIND[source], table.column("problem"), data)

        self.alerts.append(self.flow.map(f"{step}alert_rows", to_alert, schema=ALERT_COLUMNS))
