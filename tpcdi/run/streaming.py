"""``streamdi tpcdi stream``: S-Store's streaming TPC-DI on the incremental dataflow.

After the dimensions of the historical load are in the warehouse and seeded into the engine,
Batch1's TradeHistory (each status change of a trade, with the trade's fields from Trade.txt: the
first as an insert, the others as updates), CashTransaction and HoldingHistory (at its trade's
completion time) are offered in event-time order as the ``changes`` stream, through the same
collector -> Kafka -> engine -> staging -> migration path the incremental updates take.

Measured: events per second from the first event offered to the last one committed to staging,
and each event's latency from being offered (read from the source by the collector) to being
committed in staging (visible to union queries): a pipeline observer notes the committed count
at every staging commit, matched to the offered count in stream order. The collector runs in a
process of its own, as a source's collector would (``streamdi collect``), so its work does not
share the pipeline's interpreter; both sides stamp times with the system's monotonic clock.
"""

from __future__ import annotations

import logging
import multiprocessing
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from ingest.sources import BaseSource, SourceChunk
from migration.schema import WarehouseLayout
from runtime.committer import CommittedBatch
from staging import state_file
from staging.layout import arrow_of
from staging.store import StagingStore
from streamdi.settings import StreamdiSettings
from tpcdi.incremental import build_flow
from tpcdi.incremental.changes import CHANGE_COLUMNS
from tpcdi.incremental.reference import Reference
from tpcdi.run.job import RunOptions, configure_spark_master, prepare_data
from tpcdi.run.settings import run_settings
from tpcdi.run.updates import OfferResult, UpdateStream, forget_embedded_kafka
from tpcdi.warehouse.warehouse import Warehouse

logger = logging.getLogger(__name__)

_DUCK_TYPES = {
    "int64": "BIGINT",
    "float64": "DOUBLE",
    "bool": "BOOLEAN",
    "string": "VARCHAR",
    "timestamp": "TIMESTAMP",
    "date": "DATE",
}


@dataclass
class StreamOptions:
    sf: float | None = None
    data: Path | None = None
    seed: int = 0
    limit: int | None = None
    progress: bool = True
    workdir: Path | None = None
    executor: str | None = None
    spark_master: str | None = None
    rate: float | None = None


@dataclass
class StreamReport:
    """What the stream measured (see the module docstring)."""

    events: int = 0
    trades: int = 0
    seconds: float = 0.0
    events_per_s: float = 0.0
    trades_per_s: float = 0.0
    latency_ms: dict[str, float] = field(default_factory=dict)
    merged_s: float = 0.0
    load_s: float = 0.0
    executor: str = "local"
    data_dir: str = ""
    batch_events: int = 0
    #: where the pipeline's time went while the stream ran (:meth:`Pipeline.timings`)
    spent_s: dict[str, float] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "events": self.events,
            "trades": self.trades,
            "seconds": round(self.seconds, 3),
            "events_per_s": round(self.events_per_s, 1),
            "trades_per_s": round(self.trades_per_s, 1),
            "latency_ms": {k: round(v, 1) for k, v in self.latency_ms.items()},
            "merged_s": round(self.merged_s, 3),
            "dimension_load_s": round(self.load_s, 3),
            "executor": self.executor,
            "data_dir": self.data_dir,
            "batch_events": self.batch_events,
            "spent_s": {k: round(v, 3) for k, v in sorted(self.spent_s.items())},
        }

    def summary(self) -> str:
        lat = self.latency_ms
        ranked = sorted(
            ((k, v) for k, v in self.spent_s.items() if not k.startswith("step.")),
            key=lambda kv: -kv[1],
        )
        spent = ", ".join(f"{k} {v:.2f} s" for k, v in ranked if v >= 0.005)
        return (
            f"streamed {self.events:,} events ({self.trades:,} trade events) in "
            f"{self.seconds:.2f} s: {self.events_per_s:,.0f} events/s, "
            f"{self.trades_per_s:,.0f} trade events/s; latency offered -> staged "
            f"p50 {lat.get('p50', 0):,.0f} ms, p99 {lat.get('p99', 0):,.0f} ms, "
            f"max {lat.get('max', 0):,.0f} ms; merged into the warehouse "
            f"{self.merged_s:.2f} s after the last event was offered"
            + (f"\ntime by where: {spent}" if spent else "")
        )


def stream_events(inputs: dict[str, pa.Table]) -> pa.Table:
    """Batch1's trade, cash and holding records as ``changes`` events in event-time order."""
    con = duckdb.connect()
    try:
        for name, view in (
            ("Trade.txt", "trade"),
            ("TradeHistory.txt", "tradehistory"),
            ("CashTransaction.txt", "cashtransaction"),
            ("HoldingHistory.txt", "holdinghistory"),
        ):
            con.register(view, inputs[name])

        def select(kind: str, values: dict[str, str], ts: str, line: str, day: str) -> str:
            columns = []
            for column, column_type in CHANGE_COLUMNS.items():
                if column == "kind":
                    columns.append(f"'{kind}' AS kind")
                elif column == "batchid":
                    columns.append("CAST(1 AS BIGINT) AS batchid")
                elif column == "batchdate":
                    columns.append(f"CAST({day} AS DATE) AS batchdate")
                elif column == "line":
                    columns.append(f"CAST({line} AS BIGINT) AS line")
                else:
                    expr = values.get(column, "NULL")
                    columns.append(f'CAST({expr} AS {_DUCK_TYPES[column_type]}) AS "{column}"')
            columns.append(f"epoch_us({ts}) AS _ts")
            return ", ".join(columns)

        closing = "(SELECT TH_T_ID, max(TH_DTS) AS done FROM tradehistory GROUP BY 1)"
        final = "th.TH_ST_ID = 'CMPT'"
        trades = {
            "CDC_FLAG": "CASE WHEN row_number() OVER (PARTITION BY th.TH_T_ID ORDER BY th.TH_DTS) "
            "= 1 THEN 'I' ELSE 'U' END",
            "T_ID": "t.T_ID",
            "T_DTS": "th.TH_DTS",
            "T_ST_ID": "th.TH_ST_ID",
            "T_TT_ID": "t.T_TT_ID",
            "T_IS_CASH": "t.T_IS_CASH",
            "T_S_SYMB": "t.T_S_SYMB",
            "T_QTY": "t.T_QTY",
            "T_BID_PRICE": "t.T_BID_PRICE",
            "T_CA_ID": "t.T_CA_ID",
            "T_EXEC_NAME": "t.T_EXEC_NAME",
            "T_TRADE_PRICE": f"CASE WHEN {final} THEN t.T_TRADE_PRICE END",
            "T_CHRG": f"CASE WHEN {final} THEN t.T_CHRG END",
            "T_COMM": f"CASE WHEN {final} THEN t.T_COMM END",
            "T_TAX": f"CASE WHEN {final} THEN t.T_TAX END",
        }
        cash = {
            "CDC_FLAG": "'I'",
            "CT_CA_ID": "CT_CA_ID",
            "CT_DTS": "CT_DTS",
            "CT_AMT": "CT_AMT",
            "CT_NAME": "CT_NAME",
        }
        holdings = {
            "CDC_FLAG": "'I'",
            "HH_H_T_ID": "hh.HH_H_T_ID",
            "HH_T_ID": "hh.HH_T_ID",
            "HH_BEFORE_QTY": "hh.HH_BEFORE_QTY",
            "HH_AFTER_QTY": "hh.HH_AFTER_QTY",
        }
        query = f"""
            SELECT * FROM (
                SELECT 0 AS _rank, {select("Trade", trades, "th.TH_DTS", "t._line", "th.TH_DTS")}
                FROM tradehistory th JOIN trade t ON t.T_ID = th.TH_T_ID
                UNION ALL
                SELECT 1, {select("CashTransaction", cash, "CT_DTS", "_line", "CT_DTS")}
                FROM cashtransaction
                UNION ALL
                SELECT 2, {select("HoldingHistory", holdings, "c.done", "hh._line", "c.done")}
                FROM holdinghistory hh JOIN {closing} c ON c.TH_T_ID = hh.HH_T_ID
            ) ORDER BY _ts, _rank, line
        """
        events = arrow_of(con.sql(query)).drop_columns(["_rank"])
    finally:
        con.close()
    return events.append_column("_pos", pa.array(np.arange(1, events.num_rows + 1)))


class StreamSource(BaseSource):
    """A prepared events table offered in chunks (optionally paced to ``rate`` events/s); records
    when each chunk was offered."""

    def __init__(self, events: pa.Table, *, chunk: int = 5_000, rate: float | None = None) -> None:
        super().__init__(CHANGE_COLUMNS, None)
        self.events = events.cast(self.schema)
        self.chunk = chunk
        self.rate = rate
        self.offered: list[tuple[float, int]] = []

    @property
    def identity(self) -> str:
        return "tpcdi-stream"

    def read(self, start: int = 0) -> Iterator[SourceChunk]:
        begin = time.monotonic()
        n = self.events.num_rows
        first = max(0, start - 1)
        for offset in range(first, n, self.chunk):
            piece = self.events.slice(offset, self.chunk)
            end = offset + piece.num_rows
            if self.rate:
                wait = begin + end / self.rate - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
            self.offered.append((time.monotonic(), end))
            yield SourceChunk(piece, last_pos=end)
        yield SourceChunk(self.schema.empty_table(), last_pos=n, punctuation=True)


class _CommitRecorder:
    """Notes, at each staging commit, when it returned and how many events had been committed
    since this recorder attached (a pipeline observer: no thread polling, every commit seen)."""

    def __init__(self, updates: UpdateStream) -> None:
        self.updates = updates
        self.samples: list[tuple[float, int]] = []
        self._events = 0
        self._lock = threading.Lock()

    def _observe(self, batch: CommittedBatch) -> None:
        with self._lock:
            self._events += batch.events
            self.samples.append((time.monotonic(), self._events))

    def __enter__(self) -> _CommitRecorder:
        pipeline = self.updates.pipeline
        assert pipeline is not None
        pipeline.observers.append(self._observe)
        return self

    def __exit__(self, *exc: object) -> None:
        pipeline = self.updates.pipeline
        if pipeline is not None and self._observe in pipeline.observers:
            pipeline.observers.remove(self._observe)


def collect_events(
    events_path: str, rate: float | None, arguments: dict[str, Any], offered_path: str
) -> tuple[int, int]:
    """In a collector process: offer the events of an Arrow file through a
    :class:`~ingest.collector.BatchCollector` (``arguments``), save when each chunk was offered
    (``offered_path``, .npy) and return the events and rejects produced."""
    from ingest.collector import BatchCollector

    with pa.memory_map(events_path) as mapped:
        events = pa.ipc.open_file(mapped).read_all()
    source = StreamSource(events, rate=rate)
    report = BatchCollector(source=source, **arguments).run()
    np.save(offered_path, np.array(source.offered, dtype=np.float64).reshape(-1, 2))
    return report.events, report.rejects


def _offer_in_process(
    updates: UpdateStream, events: pa.Table, rate: float | None, workdir: Path
) -> tuple[OfferResult, list[tuple[float, int]]]:
    """Offer ``events`` from a collector process (see the module docstring); the offer's result
    and when each chunk was offered."""
    workdir.mkdir(parents=True, exist_ok=True)
    events_path = workdir / "stream-events.arrow"
    offered_path = workdir / "stream-offered.npy"
    with pa.OSFile(str(events_path), "wb") as sink, pa.ipc.new_file(sink, events.schema) as out:
        out.write_table(events)
    context = multiprocessing.get_context("spawn")  # no fork of a process running threads
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        pool.submit(int, 0).result()  # the interpreter is up before anything is offered

        def collect(arguments: dict[str, Any]) -> tuple[int, int]:
            job = pool.submit(collect_events, str(events_path), rate, arguments, str(offered_path))
            return job.result()

        result = updates.offer_with(collect)
    offered = [(float(t), int(c)) for t, c in np.load(offered_path)]
    events_path.unlink(missing_ok=True)
    offered_path.unlink(missing_ok=True)
    return result, offered


def latencies(offered: list[tuple[float, int]], committed: list[tuple[float, int]]) -> np.ndarray:
    """Per event (in stream order): seconds from offered to committed, from the two cumulative
    curves (events are committed in stream order)."""
    if not offered or not committed:
        return np.zeros(0)
    o_time = np.array([t for t, _ in offered])
    o_count = np.array([c for _, c in offered])
    c_time = np.array([t for t, _ in committed])
    c_count = np.maximum.accumulate(np.array([c for _, c in committed]))
    total = int(min(o_count[-1], c_count[-1]))
    events = np.arange(1, total + 1)
    offered_at = o_time[np.searchsorted(o_count, events, side="left")]
    committed_at = c_time[np.searchsorted(c_count, events, side="left")]
    return np.asarray(committed_at - offered_at)


def stream_settings(base: StreamdiSettings, workdir: Path) -> StreamdiSettings:
    """The run's settings with event-stream batching: 5,000-event logical batches, cut after
    50 ms, engine batches of up to 20,000 events."""
    settings = run_settings(base, workdir, ("duckdb",))
    ingest = settings.ingest.model_copy(update={"batch_events": 5_000, "batch_ms": 50})
    engine = settings.engine.model_copy(update={"batch_size": 20_000, "batch_timeout_ms": 50})
    migration = settings.migration.model_copy(
        update={"push_batches": 16, "push_rows": 200_000, "push_ms": 500, "merge_ms": 1_000,
                "merge_rows": 500_000}
    )  # fmt: skip
    return settings.model_copy(update={"ingest": ingest, "engine": engine, "migration": migration})


def stream_tpcdi(options: StreamOptions, base: StreamdiSettings) -> StreamReport:
    """Load the dimensions, stream Batch1's facts, measure (see the module docstring)."""
    from tpcdi.historical.load import load_warehouse, transform_dimensions

    workdir = options.workdir or base.streamdi.state_dir / "tpcdi-stream"
    settings = stream_settings(base, workdir)
    executor = options.executor or settings.engine.executor
    configure_spark_master(settings, options.spark_master)
    data = prepare_data(
        RunOptions(sf=options.sf, data=options.data, seed=options.seed, progress=options.progress),
        base,
        sys.stderr,
    )
    report = StreamReport(executor=executor, data_dir=str(data))
    flow = build_flow().build()
    layout = WarehouseLayout(flow, settings.migration.schema_name)
    for path in state_file.staging_files(settings.staging_path):
        path.unlink(missing_ok=True)
    forget_embedded_kafka(settings)
    shutil.rmtree(settings.streamdi.state_dir / "collector", ignore_errors=True)
    started = time.perf_counter()
    with Warehouse(
        layout,
        ("duckdb",),
        duckdb_path=settings.warehouse_path,
        memory_limit=settings.tpcdi.duckdb_memory_limit,
    ) as warehouse:
        warehouse.reset()
        result = transform_dimensions(data / "Batch1", flow, layout)
        load_warehouse(result, warehouse)
        with StagingStore(
            settings.staging_path,
            flow,
            memory_limit=settings.staging.memory_limit,
            threads=settings.staging.threads,
        ) as store:
            store.seed(result.seed)
        assert result.inputs is not None
        events = stream_events(result.inputs.tables)
        if options.limit is not None:
            events = events.slice(0, options.limit)
        report.load_s = time.perf_counter() - started
        reference = Reference.from_warehouse(lambda sql: warehouse.query(sql))
        incremental = build_flow(reference).build()
        report.batch_events = settings.ingest.batch_events
        with (
            UpdateStream(
                incremental,
                settings,
                warehouse,
                executor=executor,
                timeout_s=settings.tpcdi.update_timeout_s,
            ) as updates,
            _CommitRecorder(updates) as commits,
        ):
            before = updates.timings()
            offered, offered_at = _offer_in_process(updates, events, options.rate, workdir)
            report.spent_s = {k: v - before.get(k, 0.0) for k, v in updates.timings().items()}
    lat = latencies(offered_at, commits.samples)
    report.events = offered.events
    report.trades = int(np.count_nonzero(np.asarray(events["kind"]) == "Trade"))
    first = offered_at[0][0] if offered_at else 0.0
    reached = [t for t, c in commits.samples if c >= offered.events]
    last = reached[0] if reached else time.monotonic()
    report.seconds = max(last - first, 1e-9)
    report.events_per_s = report.events / report.seconds
    report.trades_per_s = report.trades / report.seconds
    report.merged_s = offered.freshness_s - (offered_at[-1][0] - first) if offered_at else 0
    if len(lat):
        report.latency_ms = {
            "p50": float(np.percentile(lat, 50) * 1000),
            "p99": float(np.percentile(lat, 99) * 1000),
            "max": float(lat.max() * 1000),
        }
    return report
