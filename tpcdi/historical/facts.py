"""DimTrade and the fact tables of the historical load on Spark (SQL in :mod:`sql_facts`), written
by Spark as Parquet (:class:`~tpcdi.historical.pieces.FactOutput`) rather than collected.

Steps, in order (each timed): the dimensions and sources become views; DimTrade is written, then
read back as the view the holdings join (only its rows whose account and security resolved);
FactCashBalances, FactHoldings, FactWatches (watches never placed dropped), FactMarketHistory
(52-week windows by doubling over a cached ``md0``); the engine's seed parts (open trades, active
watches, each account's last balance) are written by Spark too and read back by pyarrow.

A fact row whose dimension lookup fails is written with the others but not loaded (its required
columns are null); Spark turns it into an Alert naming the file and line, the same text the
driver-side split (:func:`tpcdi.historical.messages.split_dangling`) writes, so nothing is lost
silently and no fact table has to come back to the driver to find them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa

from tpcdi.historical import sql_facts
from tpcdi.historical.inputs import HistoricalInputs
from tpcdi.historical.pieces import FactOutput
from tpcdi.historical.spark import SparkWork

#: Batch1 sources and the Spark views the fact SQL reads them as.
SOURCE_VIEWS = {
    "Trade.txt": "trade",
    "TradeHistory.txt": "tradehistory",
    "CashTransaction.txt": "cashtransaction",
    "HoldingHistory.txt": "holdinghistory",
    "DailyMarket.txt": "dailymarket",
    "WatchHistory.txt": "watchhistory",
}
#: Dimensions the fact SQL joins.
DIMENSION_VIEWS = (
    "statustype",
    "tradetype",
    "dimaccount",
    "dimsecurity",
    "dimcustomer",
    "dimcompany",
    "financial",
)


@dataclass
class FactsDone:
    """What the Spark side produced: the fact outputs by table, the alerts (tables of
    ``messagesource``, ``messagetext``, ``messagedata``), the engine's seed parts and the 52-week
    window seed."""

    outputs: dict[str, FactOutput] = field(default_factory=dict)
    alerts: list[pa.Table] = field(default_factory=list)
    seed_parts: dict[str, pa.Table] = field(default_factory=dict)
    window_seed: pa.Table = field(default_factory=lambda: pa.table({}))


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def dangling_alerts(
    view: str, required: tuple[str, ...], source: str, file: str, text: str, data: str, line: str
) -> str:
    """Alerts for the rows of ``view`` whose ``required`` columns are not all set: ``data``
    (a SQL string expression) followed by `` (<file> line <line>)``."""
    ok = " AND ".join(f"{c} IS NOT NULL" for c in required)
    return f"""
    SELECT {_quote(source)} AS messagesource, {_quote(text)} AS messagetext,
           concat({data}, {_quote(f" ({file} line ")}, CAST({line} AS STRING), ')')
               AS messagedata
    FROM {view} WHERE NOT ({ok})
    """


def _loadable(view: str, required: tuple[str, ...]) -> str:
    ok = " AND ".join(f"{c} IS NOT NULL" for c in required)
    return f"SELECT * FROM {view} WHERE {ok}"


def run_facts(
    spark: SparkWork,
    inputs: HistoricalInputs,
    dimensions: dict[str, pa.Table],
    columns: dict[str, dict[str, str]],
    step: Callable[[str], None],
) -> FactsDone:
    """Every fact table on Spark (see the module docstring); ``columns`` are the warehouse's
    columns of each fact table, ``step(name)`` times a step."""
    done = FactsDone()
    alerts: list[str] = []  # queried at the end, as one Spark job
    for name in DIMENSION_VIEWS:
        spark.view(name, dimensions[name])
    for file, view in SOURCE_VIEWS.items():
        if file in inputs.parquet:
            spark.view_parquet(view, inputs.parquet[file])
        else:
            spark.view(view, inputs.tables[file])
    step("to_spark")

    def output(table: str, query: str, required: tuple[str, ...]) -> FactOutput:
        path = spark.write(f"{table}_all", query)
        spark.sql(_loadable(f"{table}_all", required)).createOrReplaceTempView(table)
        fact = FactOutput(table, path, columns[table], required)
        done.outputs[table] = fact
        return fact

    trade_keys = ("sk_accountid", "sk_securityid")
    output("dimtrade", sql_facts.dimtrade(), trade_keys)
    alerts.append(
        dangling_alerts(
            "dimtrade_all", trade_keys, "DimTrade", "Trade.txt",
            "Unknown account or security",
            "concat('T_ID = ', tradeid, ', T_CA_ID = ', T_CA_ID, ', T_S_SYMB = ', T_S_SYMB)",
            "_line",
        )
    )  # fmt: skip
    alerts.append(sql_facts.trade_alerts())
    step("dimtrade")
    output("factcashbalances", sql_facts.factcashbalances(), ("sk_accountid",))
    alerts.append(
        dangling_alerts(
            "factcashbalances_all", ("sk_accountid",), "FactCashBalances",
            "CashTransaction.txt", "Unknown account", "concat('CT_CA_ID = ', accountid)",
            "_line",
        )
    )  # fmt: skip
    output("factholdings", sql_facts.factholdings(), ("sk_accountid",))
    alerts.append(
        dangling_alerts(
            "factholdings_all", ("sk_accountid",), "FactHoldings", "HoldingHistory.txt",
            "Holding of an unknown trade",
            "concat('HH_H_T_ID = ', tradeid, ', HH_T_ID = ', currenttradeid)",
            "_line",
        )
    )  # fmt: skip
    step("cash_holdings")
    watch_keys = ("sk_customerid", "sk_securityid")
    output(
        "factwatches",
        f"SELECT * FROM ({sql_facts.factwatches()}) WHERE NOT never_placed",
        watch_keys,
    )
    alerts.append(
        dangling_alerts(
            "factwatches_all", watch_keys, "FactWatches", "WatchHistory.txt",
            "Unknown customer or security",
            "concat('W_C_ID = ', customerid, ', W_S_SYMB = ', symbol)",
            "_line",
        )
    )  # fmt: skip
    step("watches")
    spark.sql(sql_facts.eps_quarters()).createOrReplaceTempView("eps4")
    dense = needs_densify(spark)
    spark.sql(sql_facts.market_days(dense)).createOrReplaceTempView("market_days")
    md0 = spark.sql(sql_facts.market_base()).cache()
    md0.createOrReplaceTempView("md0")
    for i, query in enumerate(sql_facts.market_levels(), start=1):
        spark.sql(query).createOrReplaceTempView(f"md{i}")
    output("factmarkethistory", sql_facts.factmarkethistory(), ("sk_securityid",))
    done.window_seed = spark.arrow(sql_facts.market_seed())
    md0.unpersist()
    alerts.append(
        dangling_alerts(
            "factmarkethistory_all", ("sk_securityid",), "FactMarketHistory",
            "DailyMarket.txt", "Unknown security", "concat('DM_S_SYMB = ', symbol)", "0",
        )
    )  # fmt: skip
    alerts.append(
        "SELECT 'FactMarketHistory' AS messagesource, "
        "'No earnings for company' AS messagetext, "
        "concat('DM_S_SYMB = ', symbol) AS messagedata "
        "FROM factmarkethistory WHERE no_earnings"
    )
    done.alerts.append(
        spark.arrow(" UNION ALL ".join(f"SELECT * FROM ({query})" for query in alerts))
    )
    step("market")
    done.seed_parts = seed_parts(spark)
    step("seed_parts")
    return done


def seed_parts(spark: SparkWork) -> dict[str, pa.Table]:
    """The rows of the fact tables the engine's state starts with (what
    :func:`tpcdi.historical.seed.seed_state` keeps of them): open trades, watches not removed,
    and each account's newest balance; written by Spark, read back by pyarrow."""
    return {
        "dimtrade": spark.read(
            "seed_dimtrade",
            "SELECT * FROM dimtrade WHERE NOT coalesce(status IN ('Completed', 'Canceled'), false)",
        ),
        "factwatches": spark.read(
            "seed_factwatches", "SELECT * FROM factwatches WHERE sk_dateid_dateremoved IS NULL"
        ),
        "factcashbalances": spark.read(
            "seed_factcashbalances",
            "SELECT * FROM (SELECT *, row_number() OVER (PARTITION BY accountid "
            "ORDER BY sk_dateid DESC) AS _newest FROM factcashbalances) WHERE _newest = 1",
        ),
    }


def needs_densify(spark: SparkWork) -> bool:
    """Whether some security's prices skip a day (DIGen's never do)."""
    row = spark.sql(
        "SELECT count(*) AS gaps FROM (SELECT DM_S_SYMB, count(*) AS n, "
        "datediff(max(DM_DATE), min(DM_DATE)) + 1 AS span FROM dailymarket GROUP BY DM_S_SYMB) "
        "WHERE n <> span"
    ).collect()[0]
    return bool(row["gaps"])
