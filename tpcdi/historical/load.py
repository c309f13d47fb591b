"""The historical load (Batch1, clause 4.5) on Spark, into the warehouse, seeding the engine.

:func:`transform` runs every transformation: the dimensions come back as Arrow tables
(:attr:`HistoricalResult.tables`), the fact tables stay where Spark wrote them, as Parquet
(:attr:`HistoricalResult.facts`); :func:`load_warehouse` bulk-loads both into every target, the
facts in bounded pieces (:mod:`tpcdi.historical.pieces`); the result's
:attr:`HistoricalResult.seed` is the incremental dataflow's starting state.

Steps, in order (each timed in :attr:`HistoricalResult.seconds`):

1. Read Batch1 with the readers while the Spark session starts (a thread); the big fact sources
   are streamed to Parquet as they are read (:mod:`tpcdi.historical.inputs`), the others are
   Arrow tables.
2. Dimensions (:mod:`tpcdi.historical.sql_dims`) in an in-memory DuckDB over the Arrow tables:
   DimCompany, DimSecurity, Financial, DimCustomer and DimAccount (SCD2 from the actions, with the
   cascade), Prospect; DimBroker, DimDate, DimTime and the reference tables straight from Arrow.
   They are small; DuckDB does them in about a second at SF=3.
3. Facts (:mod:`tpcdi.historical.facts`, SQL in :mod:`tpcdi.historical.sql_facts`) on Spark:
   DimTrade, FactCashBalances, FactHoldings, FactWatches, FactMarketHistory (52-week windows by
   doubling, row-based), written by Spark's tasks as Parquet; alerts for dangling references and
   the engine's seed parts come from Spark too.
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
from tpcdi.historical import sql_dims
from tpcdi.historical.facts import run_facts
from tpcdi.historical.inputs import HistoricalInputs, read_batch1
from tpcdi.historical.messages import BATCH_ID, message_rows, reject_rows, split_dangling
from tpcdi.historical.pieces import FactOutput, PieceLog, conform, load_fact
from tpcdi.historical.seed import seed_state
from tpcdi.historical.session import spark_session
from tpcdi.historical.spark import SparkWork
from tpcdi.warehouse.exceptions import WarehouseMismatch
from tpcdi.warehouse.tables import STATIC_TABLES, TABLES
from tpcdi.warehouse.warehouse import Warehouse

logger = logging.getLogger(__name__)


@dataclass
class HistoricalResult:
    """What the historical load produced: DW tables (engine tables in the layout's columns,
    static tables in the specification's) in memory, fact tables as Spark's Parquet output, the
    DImessages rows, the engine seed, timings; after :func:`load_warehouse`, the rows loaded per
    table and the pieces the facts moved in."""

    tables: dict[str, pa.Table] = field(default_factory=dict)
    facts: dict[str, FactOutput] = field(default_factory=dict)
    loaded: dict[str, int] = field(default_factory=dict)
    pieces: PieceLog = field(default_factory=PieceLog)
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
        """Rows of the in-memory warehouse tables (DImessages included) and of the fact tables
        loaded so far."""
        total = sum(t.num_rows for t in self.tables.values())
        total += sum(n for name, n in self.loaded.items() if name in self.facts)
        return int(total + (self.messages.num_rows if self.messages is not None else 0))


class _Timer:
    def __init__(self, seconds: dict[str, float]) -> None:
        self.seconds = seconds
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name] = round(self.seconds.get(name, 0.0) + now - self._last, 3)
        self._last = now


def _layout_types(layout: WarehouseLayout, name: str) -> dict[str, str]:
    table = layout.flow.tables.get(name)
    if table is not None:
        return dict(table.image_columns())
    sink_columns = layout.tables[name].columns
    spec = TABLES[name].types()
    return {c: spec[c] for c in sink_columns}


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


def _conform_tables(tables: dict[str, pa.Table], layout: WarehouseLayout) -> None:
    for name in list(tables):
        if name in STATIC_TABLES:
            tables[name] = conform(tables[name], TABLES[name].types())  # type: ignore[arg-type]
        else:
            tables[name] = conform(tables[name], _layout_types(layout, name))


#: The fact tables Spark writes.
FACT_TABLES = ("dimtrade", "factcashbalances", "factholdings", "factwatches", "factmarkethistory")


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
    Parquet files Spark reads and writes, which :func:`load_warehouse` reads back (the caller
    removes it after the load)."""
    result = HistoricalResult()
    timer = _Timer(result.seconds)
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="spark-start")
    starting = pool.submit(spark_session, settings, master=master) if session is None else None
    try:
        inputs = read_batch1(batch1, spill=Path(workdir) / "sources")
        timer.lap("read")
        dims = _dimensions(inputs, result, timer)
        spark = SparkWork(session if session is not None else starting.result(), workdir)  # type: ignore[union-attr]
        timer.lap("spark_start_wait")
        columns = {name: _layout_types(layout, name) for name in FACT_TABLES}
        done = run_facts(spark, inputs, result.tables, columns, timer.lap)
    finally:
        pool.shutdown(wait=True)
    result.facts = done.outputs
    _conform_tables(result.tables, layout)
    seeded = dict(result.tables)
    for name, part in done.seed_parts.items():
        seeded[name] = conform(part, columns[name])
    result.seed = seed_state(flow, seeded, done.window_seed, inputs)
    timer.lap("seed")
    result.messages = _messages(result, inputs, [*dims.alerts, *done.alerts])
    logger.info(
        "historical transform rows=%s facts=%s messages=%s seconds=%s",
        result.rows,
        sorted(result.facts),
        result.messages.num_rows,
        result.seconds,
    )
    return result


def _messages(
    result: HistoricalResult, inputs: HistoricalInputs, alerts: list[pa.Table]
) -> pa.Table:
    """The historical load's DImessages rows: alerts, rejects, the Prospect status."""
    now = datetime.datetime.now().replace(microsecond=0)  # the run's clock (local time)
    inserted = pa.table(
        {
            "messagesource": ["Prospect"],
            "messagetext": ["Inserted rows"],
            "messagedata": [str(result.tables["prospect"].num_rows)],
        }
    )
    return pa.concat_tables(
        [
            message_rows(alerts, "Alert", now),
            message_rows([reject_rows(inputs)], "Reject", now),
            message_rows([inserted], "Status", now),
        ]
    )


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
    _conform_tables(tables, layout)
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


def load_warehouse(result: HistoricalResult, warehouse: Warehouse) -> dict[str, int]:
    """Bulk-load every table of ``result`` and its DImessages rows into the warehouse's targets,
    the fact tables piece by piece from Spark's Parquet (:func:`tpcdi.historical.pieces.load_fact`,
    recorded in :attr:`HistoricalResult.pieces`), then settles the DuckDB file
    (:meth:`~tpcdi.warehouse.warehouse.Warehouse.settle`); returns the rows per table."""
    counts: dict[str, int] = {}
    for name, rows in result.tables.items():
        warehouse.load(name, rows)
        counts[name] = rows.num_rows
    for name, output in result.facts.items():
        counts[name] = load_fact(warehouse, output, result.pieces)
    result.loaded = counts
    if result.messages is not None:
        warehouse.load("dimessages", result.messages)
        counts["dimessages"] = result.messages.num_rows
    settled = warehouse.settle()
    if settled is not None:
        logger.info("warehouse settled after the load checkpoint_s=%.3f", settled)
    return counts
