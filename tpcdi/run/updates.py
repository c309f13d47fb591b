"""Incremental updates through the whole system: files -> collector -> Kafka -> engine -> staging
-> migration -> warehouse, with the pipeline kept running between updates.

:class:`UpdateStream` starts the broker (the embedded Apache Kafka unless
``KAFKA__BOOTSTRAP_SERVERS``) and the pipeline of the incremental dataflow on its own thread;
:meth:`UpdateStream.offer` collects a batch directory into the ``changes`` topic and waits until
every event of it is committed to staging and every warehouse target has merged the batches that
hold them. The time from offering the files to that moment is the update's *freshness*; the
moment each target got there is noted too (:attr:`OfferResult.visible_s`), so a run with two
warehouses knows each one's freshness.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from etl_dataflows.dataflow import CompiledDataflow
from ingest.broker import BrokerHandle, EmbeddedKafka, start_broker, stop_left_running
from ingest.collector import BatchCollector, CollectorReport
from ingest.sources import BaseSource
from runtime.pipeline import Pipeline, PipelineOptions
from runtime.runspec import RunSpec, StreamBinding, bind
from staging import state_file
from staging.store import connection_config
from streamdi.settings import StreamdiSettings
from tpcdi.incremental.flow import SOURCE
from tpcdi.run.exceptions import UpdateFailed
from tpcdi.warehouse.warehouse import Warehouse

logger = logging.getLogger(__name__)

#: How often the waits look at staging and the warehouses.
POLL_S = 0.01


@dataclass
class OfferResult:
    """One offered source: events and rejects it carried, the staging batch that holds its last
    event, and the seconds from the start of the offer to its last event offered to Kafka
    (``collect_s``), to every event committed to staging (``staged_s``), to the batches being
    merged in each target (``visible_s``) and in every target (``freshness_s``)."""

    events: int
    rejects: int
    staged_through: int
    collect_s: float
    staged_s: float
    freshness_s: float
    visible_s: dict[str, float] = field(default_factory=dict)


class UpdateStream:
    """See the module docstring. Use as a context manager (starts and stops everything)."""

    def __init__(
        self,
        flow: CompiledDataflow,
        settings: StreamdiSettings,
        warehouse: Warehouse,
        *,
        executor: str,
        timeout_s: float = 600.0,
    ) -> None:
        self.flow = flow
        self.settings = settings
        self.warehouse = warehouse
        self.executor = executor
        self.timeout_s = timeout_s
        self.topic = f"{flow.name}.{SOURCE}"
        self.spec: RunSpec = bind(
            flow, **{SOURCE: StreamBinding(topic=self.topic, allowed_lateness_ms=None)}
        )
        self._embedded: EmbeddedKafka | None = None
        self.broker: BrokerHandle | None = None
        self.pipeline: Pipeline | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._produced = 0

    # -- lifecycle -----------------------------------------------------------------------------

    def __enter__(self) -> UpdateStream:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        kafka = self.settings.kafka
        self.broker, self._embedded = start_broker(kafka, self.settings.streamdi.state_dir)
        options = PipelineOptions(executor=self.executor, collect=False)
        self.pipeline = Pipeline(self.spec, self.settings, self.broker, options)

        def work() -> None:
            assert self.pipeline is not None
            try:
                self.pipeline.run(self._stop)
            except BaseException as exc:
                logger.error("pipeline failed: %s", exc)
                self._error = exc

        self._thread = threading.Thread(target=work, name="tpcdi-pipeline", daemon=True)
        self._thread.start()
        # a running service: the engine holds its state and consumes before any file is offered,
        # so an update's freshness does not include the pipeline's start
        deadline = time.perf_counter() + self.timeout_s
        while not self.pipeline.started.wait(POLL_S):
            self._check()
            if time.perf_counter() > deadline:
                raise UpdateFailed(f"the pipeline did not start within {self.timeout_s:.0f} s")

    def stop(self) -> None:
        """Stop the pipeline (it commits what it holds and pushes what is pending), then the
        broker."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_s)
        if self._embedded is not None:
            self._embedded.stop()
            self._embedded = None
        if self._error is not None:
            error, self._error = self._error, None
            raise UpdateFailed(f"the pipeline stopped with an error: {error}") from error

    # -- offering ------------------------------------------------------------------------------

    def _check(self) -> None:
        if self._error is not None:
            raise UpdateFailed(f"the pipeline stopped with an error: {self._error}")
        if self._thread is None or not self._thread.is_alive():
            raise UpdateFailed("the pipeline is not running")

    def collector_arguments(self) -> dict[str, Any]:
        """The keyword arguments of a :class:`~ingest.collector.BatchCollector` into this
        stream's topic, all but ``source`` (picklable: a collector may run in another process)."""
        assert self.broker is not None
        settings = self.settings
        return {
            "stream": SOURCE,
            "topic": self.topic,
            "kafka": settings.kafka,
            "bootstrap": self.broker.bootstrap_servers,
            "log_id": self.broker.log_id,
            "checkpoint_dir": settings.streamdi.state_dir / "collector" / self.flow.name,
            "batch_events": settings.ingest.batch_events,
            "batch_ms": settings.ingest.batch_ms,
            "buffer_bytes": settings.ingest.producer_buffer_bytes,
        }

    def offer(self, source: BaseSource) -> OfferResult:
        """Collect ``source`` into the ``changes`` topic; return once it is merged into every
        warehouse target (see the module docstring)."""
        return self.offer_with(
            lambda arguments: _collected(BatchCollector(source=source, **arguments).run())
        )

    def offer_with(self, collect: Callable[[dict[str, Any]], tuple[int, int]]) -> OfferResult:
        """As :meth:`offer`, the collection done by ``collect`` (given
        :meth:`collector_arguments`; returns the events and rejects it produced), in this
        process or another."""
        assert self.broker is not None and self.pipeline is not None
        self._check()
        started = time.perf_counter()
        events, rejects = collect(self.collector_arguments())
        collected = time.perf_counter()
        self._produced += events
        deadline = started + self.timeout_s
        pipeline = self.pipeline
        while pipeline.report.events < self._produced:
            self._check()
            if time.perf_counter() > deadline:
                raise UpdateFailed(
                    f"after {self.timeout_s:.0f} s the pipeline had committed "
                    f"{pipeline.report.events} of {self._produced} events"
                )
            time.sleep(POLL_S)
        staged = time.perf_counter()
        through = self._staged_watermark()
        reached = self._wait_merged(through, deadline)
        done = time.perf_counter()
        logger.info(
            "offered events=%s rejects=%s staged_through=%s freshness_s=%.3f",
            events,
            rejects,
            through,
            done - started,
        )
        return OfferResult(
            events=events,
            rejects=rejects,
            staged_through=through,
            collect_s=collected - started,
            staged_s=staged - started,
            freshness_s=done - started,
            visible_s={t: at - started for t, at in reached.items()},
        )

    def _staged_watermark(self) -> int:
        """The last batch committed to staging (a cursor of the pipeline's own DuckDB instance,
        opened with the same configuration)."""
        config = connection_config(
            self.settings.staging.memory_limit, threads=self.settings.staging.threads
        )
        con = duckdb.connect(str(self.settings.staging_path), config=config)
        try:
            row = con.execute('SELECT coalesce(max(batch_id), 0) FROM "streamdi"."batches"')
            return int(row.fetchall()[0][0])
        finally:
            con.close()

    def merged_through(self, target: str) -> int:
        """The last batch ``target`` has loaded and merged."""
        stream = self.flow.name.replace("'", "''")
        rows = self.warehouse.query(
            "SELECT (SELECT coalesce(max(batch_id), 0) FROM streamdi_migration.ledger "
            f"WHERE stream = '{stream}') AS loaded, "
            "(SELECT coalesce(max(through_batch), 0) FROM streamdi_migration.merges "
            f"WHERE stream = '{stream}') AS merged",
            target,  # type: ignore[arg-type]
        ).to_pylist()[0]
        return min(int(rows["loaded"]), int(rows["merged"]))

    def _wait_merged(self, through: int, deadline: float) -> dict[str, float]:
        """Wait until every target has merged batch ``through``; when each got there."""
        reached: dict[str, float] = {}
        while True:
            for target in self.warehouse.targets:
                if target not in reached and self.merged_through(target) >= through:
                    reached[target] = time.perf_counter()
            if len(reached) == len(self.warehouse.targets):
                return reached
            self._check()
            if time.perf_counter() > deadline:
                behind = {t: self.merged_through(t) for t in self.warehouse.targets}
                raise UpdateFailed(f"the warehouses merged only up to {behind} of {through}")
            time.sleep(POLL_S)

    # -- what the run watches --------------------------------------------------------------------

    def timings(self) -> dict[str, float]:
        """The pipeline's cumulative seconds by where they went
        (:meth:`runtime.pipeline.Pipeline.timings`)."""
        return self.pipeline.timings() if self.pipeline is not None else {}

    def staging_bytes(self) -> int:
        """Bytes the staging file takes on disk (file, WAL, segment files)."""
        from staging.segments import staging_disk_bytes

        return staging_disk_bytes(self.settings.staging_path)

    def state_rows(self) -> int:
        """Rows of the engine's state as staging last folded it (the state file's tables,
        counted: DuckDB's own estimate also counts the rows a fold replaced). A connection of
        the pipeline's own DuckDB instance (the same configuration), where the state file is
        attached."""
        config = connection_config(
            self.settings.staging.memory_limit, threads=self.settings.staging.threads
        )
        con = state_file.connect(self.settings.staging_path, read_only=False, config=config)
        try:
            tables = state_file.read_map(
                dict(con.execute('SELECT key, value FROM "streamdi"."meta"').fetchall())
            )
            if not tables:
                return 0
            counts = " UNION ALL ".join(
                f"SELECT count(*) AS n FROM {state_file.table_ref(t)}" for t in tables.values()
            )
            return int(con.execute(f"SELECT sum(n) FROM ({counts})").fetchall()[0][0] or 0)
        finally:
            con.close()


def collector_dir(settings: StreamdiSettings) -> Path:
    return settings.streamdi.state_dir / "collector"


def _collected(report: CollectorReport) -> tuple[int, int]:
    return report.events, report.rejects


def forget_embedded_kafka(settings: StreamdiSettings) -> None:
    """Remove the embedded broker's log of the run's state directory (a broker of an earlier,
    killed run is stopped first). An external Kafka is left alone: its topics are the
    operator's."""
    if settings.kafka.bootstrap_servers:
        return
    stop_left_running(settings.streamdi.state_dir, settings.kafka)
    shutil.rmtree(settings.streamdi.state_dir / "kafka", ignore_errors=True)
