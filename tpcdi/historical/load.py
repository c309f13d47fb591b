"""The historical load (Batch1, clause 4.5) on Spark, into the warehouse, seeding the engine.

:func:`transform` runs every transformation on a SparkSession and returns the warehouse tables as
Arrow (:class:`HistoricalResult`); :func:`load_warehouse` bulk-loads them into every target; the
result's :attr:`HistoricalResult.seed` is the incremental dataflow's starting state.

Steps, in order (each timed in :attr:`HistoricalResult.seconds`):

1. Read Batch1 with the readers while the Spark session starts (a thread).
2. Dimensions (:mod:`tpcdi.historical.sql_dims`) in an in-memory DuckDB over the Arrow tables:
   DimCompany, DimSecurity, Financial, DimCustomer and DimAccount (SCD2 from the actions, with the
   cascade), Prospect; DimBroker, DimDate, DimTime and the reference tables straight from Arrow.
   They are small; DuckDB does them in about a second at SF=3.
3. Facts (:mod:`tpcdi.historical.sql_facts`) on Spark: the sources and dimensions go in as
   Parquet files Spark scans in parallel, the dimensions are broadcast; DimTrade,
   FactCashBalances, FactHoldings, FactWatches, FactMarketHistory (52-week windows by doubling,
   row-based); results come back with ``toArrow``.
4. The engine seed (:mod:`tpcdi.historical.seed`).
5. Alerts, rejects and status rows for DImessages (:mod:`tpcdi.historical.messages`).

A fact row whose dimension lookup fails (a dangling reference) is not loaded; it becomes an Alert
naming the file and line, so nothing is lost silently.
"""

from __future__ import annotations

import datetime
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from etl_dataflows.dataflow import CompiledDataflow
from etl_dataflows.state import StateImage
from migration.schema import WarehouseLayout
from streamdi.settings import SparkSettings
from tpcdi.historical import sql_dims, sql_facts
from tpcdi.historical.inputs import HistoricalInputs, read_batch1
from tpcdi.historical.messages import BATCH_ID, message_rows, reject_rows, split_dangling
from tpcdi.historical.seed import seed_state
from tpcdi.historical.session import spark_session
from tpcdi.warehouse.exceptions import WarehouseMismatch
from tpcdi.warehouse.tables import STATIC_TABLES, TABLES, WarehouseType
from tpcdi.warehouse.warehouse import Warehouse

logger = logging.getLogger(__name__)

_ARROW: dict[WarehouseType, pa.DataType] = {
    "int64": pa.int64(),
    "float64": pa.float64(),
    "bool": pa.bool_(),
    "string": pa.string(),
    "timestamp": pa.timestamp("us"),
    "date": pa.date32(),
    "time": pa.time32("s"),
}
_SOURCE_VIEWS = {
    "CustomerMgmt.xml": "cm",
    "Trade.txt": "trade",
    "TradeHistory.txt": "tradehistory",
    "CashTransaction.txt": "cashtransaction",
    "HoldingHistory.txt": "holdinghistory",
    "DailyMarket.txt": "dailymarket",
    "WatchHistory.txt": "watchhistory",
    "CMP": "cmp",
    "SEC": "sec",
    "FIN": "fin",
}


@dataclass
class HistoricalResult:
    """What the historical load produced: DW tables (engine tables in the layout's columns,
    static tables in the specification's), the DImessages rows, the engine seed, timings."""

    tables: dict[str, pa.Table] = field(default_factory=dict)
    messages: pa.Table | None = None
    seed: StateImage = field(default_factory=StateImage)
    seconds: dict[str, float] = field(default_factory=dict)
    source_rows: int = 0
    rejects: int = 0
    batch_date: datetime.date | None = None
    #: the Batch1 sources (kept by :func:`transform_dimensions` for the stream)
    inputs: HistoricalInputs | None = None

    @property
    def rows(self) -> int:
        """Rows of the warehouse tables (DImessages included)."""
        total = sum(t.num_rows for t in self.tables.values())
        return int(total + (self.messages.num_rows if self.messages is not None else 0))


class _Timer:
    def __init__(self, seconds: dict[str, float]) -> None:
        self.seconds = seconds
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name] = round(self.seconds.get(name, 0.0) + now - self._last, 3)
        self._last = now


def _conform(rows: pa.Table, columns: dict[str, WarehouseType | str]) -> pa.Table:
    """``rows`` with exactly ``columns`` (in order), cast to their Arrow types."""
    arrays = []
    for name, kind in columns.items():
        target = _ARROW[kind]  # type: ignore[index]
        if name not in rows.column_names:
            raise WarehouseMismatch(f"historical load produced no column {name!r}")
        column = rows.column(name)
        if pa.types.is_timestamp(column.type) and column.type.tz is not None:
            column = pc.cast(column, pa.timestamp("us", tz=column.type.tz)).cast(pa.timestamp("us"))
        arrays.append(column.cast(target))
    return pa.Table.from_arrays(arrays, names=list(columns))


def _layout_types(layout: WarehouseLayout, name: str) -> dict[str, str]:
    table = layout.flow.tables.get(name)
    if table is not None:
        return dict(table.image_columns())
    sink_columns = layout.tables[name].columns
    spec = TABLES[name].types()
    return {c: spec[c] for c in sink_columns}


class _Spark:
    """The session plus the moves of one load between Arrow and Spark.

    Sources go to Spark as Parquet files written by pyarrow from the readers' Arrow tables and
    read back lazily by Spark: measured at SF=3, DailyMarket (1.28 M rows) took 7.4 s through
    ``createDataFrame`` (the rows travel through the driver, which also keeps them in its heap:
    the 2 GB driver ran out of memory holding Batch1) and 0.2 s to write plus a parallel scan as
    Parquet. Results come back with ``toArrow``.
    """

    def __init__(self, session: Any, workdir: Path) -> None:
        self.session = session
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)

    def view(self, name: str, table: pa.Table) -> None:
        import pyarrow.parquet as pq

        path = self.workdir / f"{name}.parquet"
        pq.write_table(table, path, compression="none", row_group_size=256 * 1024)
        self.session.read.parquet(str(path)).createOrReplaceTempView(name)

    def sql(self, query: str) -> Any:
        return self.session.sql(query)

    def arrow(self, query: str) -> pa.Table:
        started = time.perf_counter()
        table: pa.Table = self.sql(query).toArrow()
        logger.debug(
            "spark query rows=%s seconds=%.2f: %s",
            table.num_rows,
            time.perf_counter() - started,
            " ".join(query.split())[:60],
        )
        return table


class _DuckDB:
    """An in-memory DuckDB over Arrow tables, for the small dimensions."""

    def __init__(self, memory_limit: str = "1GB", threads: int = 2) -> None:
        import duckdb

        self.con = duckdb.connect(config={"memory_limit": memory_limit, "threads": threads})

    def view(self, name: str, table: pa.Table) -> None:
        self.con.register(name, table)

    def arrow(self, query: str) -> pa.Table:
        from staging.layout import arrow_of

        return arrow_of(self.con.sql(query))

    def materialize(self, name: str, query: str) -> pa.Table:
        table = self.arrow(query)
        self.view(name, table)
        return table

    def close(self) -> None:
        self.con.close()


def _with_prospect_values(prospect: pa.Table) -> pa.Table:
    """Prospect with the compared fields of each row as one string, as the incremental dataflow
    keeps them to tell a changed row from a repeated one (:func:`rules.prospect_values`)."""
    from tpcdi.incremental import rules

    values = rules.prospect_values([prospect.column(dst) for dst, _ in rules.PROSPECT_FIELDS])
    return prospect.append_column("prospectvalues", values)


def _with_row_index(table: pa.Table) -> pa.Table:
    return table.append_column("_row", pa.array(range(table.num_rows), pa.int64()))


def _rename(table: pa.Table, names: dict[str, str]) -> pa.Table:
    return table.rename_columns([names.get(n, n.lower()) for n in table.column_names])


def _dimbroker(hr: pa.Table, first_day: datetime.date) -> pa.Table:
    brokers = hr.filter(pc.fill_null(pc.equal(hr["EmployeeJobCode"], 314), False))
    brokers = brokers.sort_by("EmployeeID")
    n = brokers.num_rows
    day_us = (first_day - datetime.date(1970, 1, 1)).days * sql_dims.DAY_US
    return pa.table(
        {
            "sk_brokerid": pa.array(range(1, n + 1), pa.int64()),
            "brokerid": brokers["EmployeeID"],
            "managerid": brokers["ManagerID"],
            "firstname": brokers["EmployeeFirstName"],
            "lastname": brokers["EmployeeLastName"],
            "middleinitial": brokers["EmployeeMI"],
            "branch": brokers["EmployeeBranch"],
            "office": brokers["EmployeeOffice"],
            "phone": brokers["EmployeePhone"],
            "iscurrent": pa.array([True] * n),
            "batchid": pa.array([BATCH_ID] * n, pa.int64()),
            "effectivedate": pa.array([first_day] * n, pa.date32()),
            "enddate": pa.array([datetime.date(9999, 12, 31)] * n, pa.date32()),
            "_valid_from": pa.array([day_us] * n, pa.int64()),
            "_valid_to": pa.array([sql_dims.OPEN_END] * n, pa.int64()),
        }
    )


def _check_calendar(dimdate: pa.Table) -> None:
    """The incremental steps compute SK_DateID as yyyymmdd; DIGen numbers its days so."""
    values = dimdate["datevalue"]
    expected = pc.add(
        pc.add(
            pc.multiply(pc.cast(pc.year(values), pa.int64()), 10000),
            pc.multiply(pc.cast(pc.month(values), pa.int64()), 100),
        ),
        pc.cast(pc.day(values), pa.int64()),
    )
    if not pc.all(pc.equal(expected, dimdate["sk_dateid"])).as_py():
        raise WarehouseMismatch("Date.txt SK_DateID is not yyyymmdd of DateValue")


def transform(
    batch1: Path,
    flow: CompiledDataflow,
    layout: WarehouseLayout,
    settings: SparkSettings,
    workdir: Path,
    *,
    master: str | None = None,
    session: Any = None,
) -> HistoricalResult:
    """Run the historical load of ``batch1`` (see the module docstring); ``workdir`` holds the
    Parquet files Spark reads (the caller removes it)."""
    result = HistoricalResult()
    timer = _Timer(result.seconds)
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="spark-start")
    starting = pool.submit(spark_session, settings, master=master) if session is None else None
    try:
        inputs = read_batch1(batch1)
        timer.lap("read")
        dims = _dimensions(inputs, result, timer)
        spark = _Spark(session if session is not None else starting.result(), workdir)  # type: ignore[union-attr]
        timer.lap("spark_start_wait")
        _facts(spark, inputs, dims, result, timer)
    finally:
        pool.shutdown(wait=True)
    tables = result.tables
    for name in list(tables):
        if name in STATIC_TABLES:
            tables[name] = _conform(tables[name], TABLES[name].types())  # type: ignore[arg-type]
        else:
            tables[name] = _conform(tables[name], _layout_types(layout, name))
    result.seed = seed_state(flow, tables, dims.window_seed, inputs)
    timer.lap("seed")
    logger.info(
        "historical transform rows=%s messages=%s seconds=%s",
        result.rows,
        result.messages.num_rows if result.messages is not None else 0,
        result.seconds,
    )
    return result


def transform_dimensions(
    batch1: Path, flow: CompiledDataflow, layout: WarehouseLayout
) -> HistoricalResult:
    """Only the dimensions and reference tables of the historical load (no facts, no Spark): the
    starting point of ``streamdi tpcdi stream``, which streams Batch1's facts instead."""
    result = HistoricalResult()
    timer = _Timer(result.seconds)
    inputs = read_batch1(batch1)
    timer.lap("read")
    dims = _dimensions(inputs, result, timer)
    tables = result.tables
    for name in list(tables):
        if name in STATIC_TABLES:
            tables[name] = _conform(tables[name], TABLES[name].types())  # type: ignore[arg-type]
        else:
            tables[name] = _conform(tables[name], _layout_types(layout, name))
    now = datetime.datetime.now().replace(microsecond=0)  # the run's clock (local time)
    result.messages = message_rows(dims.alerts, "Alert", now)
    window = pa.table(
        {
            "symbol": pa.array([], pa.string()),
            "dn": pa.array([], pa.int64()),
            "high": pa.array([], pa.float64()),
            "low": pa.array([], pa.float64()),
        }
    )
    result.seed = seed_state(flow, tables, window, inputs)
    result.inputs = inputs
    timer.lap("seed")
    return result


@dataclass
class _Dims:
    """What the dimension step hands the facts."""

    alerts: list[pa.Table]
    window_seed: pa.Table = field(default_factory=lambda: pa.table({}))


def _dimensions(inputs: HistoricalInputs, result: HistoricalResult, timer: _Timer) -> _Dims:
    """Reference tables and the SCD2 dimensions, on DuckDB (see :mod:`sql_dims`)."""
    result.batch_date = inputs.batch_date
    result.source_rows = inputs.rows
    result.rejects = inputs.rejects.num_rows
    batch_date = inputs.batch_date.isoformat()
    t = inputs.tables
    tables = result.tables
    tables["statustype"] = _rename(t["StatusType.txt"], {})
    tables["tradetype"] = _rename(t["TradeType.txt"], {})
    tables["taxrate"] = _rename(t["TaxRate.txt"], {})
    tables["industry"] = _rename(t["Industry.txt"], {})
    tables["dimdate"] = _rename(t["Date.txt"], {})
    tables["dimtime"] = _rename(t["Time.txt"], {})
    _check_calendar(tables["dimdate"])
    first_day = min(tables["dimdate"]["datevalue"].to_pylist())
    tables["dimbroker"] = _dimbroker(t["HR.csv"], first_day)
    duck = _DuckDB()
    try:
        for name in ("statustype", "tradetype", "taxrate", "industry", "dimbroker"):
            duck.view(name, tables[name])
        duck.view("cm", t["CustomerMgmt.xml"])
        for kind in ("CMP", "SEC", "FIN"):
            duck.view(kind.lower(), t[kind])
        duck.view("prospect_src", _with_row_index(t["Prospect.csv"]))
        tables["dimcompany"] = duck.materialize("dimcompany", sql_dims.dimcompany())
        tables["dimsecurity"] = duck.materialize("dimsecurity", sql_dims.dimsecurity())
        financial = duck.arrow(sql_dims.financial())
        duck.materialize("prospect_keyed", sql_dims.prospect_keyed())
        duck.materialize("customer_states", sql_dims.customer_states())
        tables["dimcustomer"] = duck.materialize("dimcustomer", sql_dims.dimcustomer())
        tables["dimaccount"] = duck.materialize("dimaccount", sql_dims.dimaccount())
        tables["prospect"] = _with_prospect_values(duck.arrow(sql_dims.prospect(batch_date)))
        alerts = [
            duck.arrow(sql_dims.sprating_alerts()),
            duck.arrow(sql_dims.unresolved_securities()),
            duck.arrow(sql_dims.customer_alerts(batch_date)),
        ]
    finally:
        duck.close()
    financial, dangling = split_dangling(
        financial.append_column("_line", pa.array([0] * financial.num_rows, pa.int64())),
        ["sk_companyid"],
        "Financial",
        "FINWIRE",
        "Unknown company",
        financial["_where"],
    )
    alerts.append(dangling)
    tables["financial"] = financial.drop_columns(["_where", "_line"])
    timer.lap("dimensions")
    return _Dims(alerts)


def _facts(
    spark: _Spark, inputs: HistoricalInputs, dims: _Dims, result: HistoricalResult, timer: _Timer
) -> None:
    """DimTrade and the fact tables on Spark (see :mod:`sql_facts`)."""
    t = inputs.tables
    tables = result.tables
    alerts = dims.alerts
    for name in ("statustype", "tradetype", "dimaccount", "dimsecurity", "dimcustomer",
                 "dimcompany", "financial"):  # fmt: skip
        spark.view(name, tables[name])
    for file, view in _SOURCE_VIEWS.items():
        if view not in ("cm", "cmp", "sec", "fin"):
            spark.view(view, t[file])
    timer.lap("to_spark")
    trades = spark.sql(sql_facts.dimtrade()).cache()
    trades.createOrReplaceTempView("dimtrade_all")
    dimtrade = trades.toArrow()
    dimtrade, dangling = split_dangling(
        dimtrade,
        ["sk_accountid", "sk_securityid"],
        "DimTrade",
        "Trade.txt",
        "Unknown account or security",
        pc.binary_join_element_wise(
            "T_ID = ",
            pc.cast(dimtrade["tradeid"], pa.string()),
            ", T_CA_ID = ",
            pc.cast(dimtrade["T_CA_ID"], pa.string()),
            ", T_S_SYMB = ",
            dimtrade["T_S_SYMB"],
            "",
        ),
    )
    alerts.append(dangling)
    tables["dimtrade"] = dimtrade
    spark.sql(
        "SELECT * FROM dimtrade_all WHERE sk_accountid IS NOT NULL AND sk_securityid IS NOT NULL"
    ).createOrReplaceTempView("dimtrade")
    alerts.append(spark.arrow(sql_facts.trade_alerts()))
    timer.lap("dimtrade")
    cash = spark.arrow(sql_facts.factcashbalances())
    cash, dangling = split_dangling(
        cash,
        ["sk_accountid"],
        "FactCashBalances",
        "CashTransaction.txt",
        "Unknown account",
        pc.binary_join_element_wise("CT_CA_ID = ", pc.cast(cash["accountid"], pa.string()), ""),
    )
    alerts.append(dangling)
    tables["factcashbalances"] = cash
    holdings = spark.arrow(sql_facts.factholdings())
    holdings, dangling = split_dangling(
        holdings,
        ["sk_accountid"],
        "FactHoldings",
        "HoldingHistory.txt",
        "Holding of an unknown trade",
        pc.binary_join_element_wise(
            "HH_H_T_ID = ",
            pc.cast(holdings["tradeid"], pa.string()),
            ", HH_T_ID = ",
            pc.cast(holdings["currenttradeid"], pa.string()),
            "",
        ),
    )
    alerts.append(dangling)
    tables["factholdings"] = holdings
    trades.unpersist()
    timer.lap("cash_holdings")
    watches = spark.arrow(sql_facts.factwatches())
    watches = watches.filter(pc.invert(watches["never_placed"]))
    watches, dangling = split_dangling(
        watches,
        ["sk_customerid", "sk_securityid"],
        "FactWatches",
        "WatchHistory.txt",
        "Unknown customer or security",
        pc.binary_join_element_wise(
            "W_C_ID = ",
            pc.cast(watches["customerid"], pa.string()),
            ", W_S_SYMB = ",
            watches["symbol"],
            "",
        ),
    )
    alerts.append(dangling)
    tables["factwatches"] = watches
    timer.lap("watches")
    spark.sql(sql_facts.eps_quarters()).createOrReplaceTempView("eps4")
    dense = _needs_densify(spark)
    spark.sql(sql_facts.market_days(dense)).createOrReplaceTempView("market_days")
    md0 = spark.sql(sql_facts.market_base()).cache()
    md0.createOrReplaceTempView("md0")
    for i, query in enumerate(sql_facts.market_levels(), start=1):
        spark.sql(query).createOrReplaceTempView(f"md{i}")
    market = spark.arrow(sql_facts.factmarkethistory())
    dims.window_seed = spark.arrow(sql_facts.market_seed())
    md0.unpersist()
    market, dangling = split_dangling(
        market.append_column("_line", pa.array([0] * market.num_rows, pa.int64())),
        ["sk_securityid"],
        "FactMarketHistory",
        "DailyMarket.txt",
        "Unknown security",
        pc.binary_join_element_wise("DM_S_SYMB = ", market["symbol"], ""),
    )
    alerts.append(dangling)
    no_earnings = market.filter(market["no_earnings"])
    alerts.append(
        pa.table(
            {
                "messagesource": pa.array(["FactMarketHistory"] * no_earnings.num_rows),
                "messagetext": pa.array(["No earnings for company"] * no_earnings.num_rows),
                "messagedata": pc.binary_join_element_wise(
                    "DM_S_SYMB = ", no_earnings["symbol"], ""
                ),
            }
        )
    )
    tables["factmarkethistory"] = market
    timer.lap("market")
    now = datetime.datetime.now().replace(microsecond=0)  # the run's clock (local time)
    inserted = pa.table(
        {
            "messagesource": ["Prospect"],
            "messagetext": ["Inserted rows"],
            "messagedata": [str(tables["prospect"].num_rows)],
        }
    )
    result.messages = pa.concat_tables(
        [
            message_rows(alerts, "Alert", now),
            message_rows([reject_rows(inputs)], "Reject", now),
            message_rows([inserted], "Status", now),
        ]
    )


def _needs_densify(spark: _Spark) -> bool:
    """Whether some security's prices skip a day (DIGen's never do)."""
    row = spark.sql(
        "SELECT count(*) AS gaps FROM (SELECT DM_S_SYMB, count(*) AS n, "
        "datediff(max(DM_DATE), min(DM_DATE)) + 1 AS span FROM dailymarket GROUP BY DM_S_SYMB) "
        "WHERE n <> span"
    ).collect()[0]
    return bool(row["gaps"])


def load_warehouse(result: HistoricalResult, warehouse: Warehouse) -> dict[str, int]:
    """Bulk-load every table of ``result`` and its DImessages rows into the warehouse's targets;
    returns the rows per table."""
    counts: dict[str, int] = {}
    for name, rows in result.tables.items():
        warehouse.load(name, rows)
        counts[name] = rows.num_rows
    if result.messages is not None:
        warehouse.load("dimessages", result.messages)
        counts["dimessages"] = result.messages.num_rows
    return counts
