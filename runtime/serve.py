"""``streamdi serve``: the pipeline, the migration and the query service in one process.

DuckDB allows one writing process per file, so the process that runs the pipeline (staging) and
the migration (the DuckDB warehouse) also answers the queries. The run, in order:

1. Start (or join) the broker: ``KAFKA__BOOTSTRAP_SERVERS`` or the embedded one, watched
   (:mod:`runtime.broker_watch`: an owned embedded broker that dies is started again; its state
   is in ``/ready``, ``/status`` and the metrics).
2. Bind every source of the dataflow that has no input to an :class:`~ingest.push.HttpPushSource`
   (``POST /streams/{stream}/events``); sources bound to a file keep their file.
3. Open staging and, with ``MIGRATION__TARGETS``, the migrator the pipeline pushes with; the
   query service reads through the same store and targets.
4. Run the pipeline in a thread (collectors, engine, commits, migration worker); the query
   service's metrics and console (:mod:`api.console_recorder`) observe its committed batches,
   the console also the migrator's targets.
5. Serve the app with uvicorn on ``API__HOST:API__PORT`` (127.0.0.1 by default; another address
   without ``API__TOKEN`` is warned about) until SIGTERM or Ctrl-C, or until the pipeline fails
   (then exit 1: a process whose pipeline died should be restarted, not left answering from a
   frozen staging file). Each request's head must arrive within ``API__HEADER_TIMEOUT_S``
   (:mod:`api.protocol`).
6. Stop: as soon as the server is told to exit, refuse new queries and interrupt the running
   ones (each stops at once, or is abandoned after ``API__QUERY_GRACE_S``: DuckDB's binder cannot
   be interrupted); then the server, then the pipeline (it finishes and commits the batch in
   hand, pushes what is pending), then the readers, the migrator and staging. A statement still
   running after all that (an abandoned one) is left to the end of the process, which then exits
   at once (``os._exit``) rather than wait for it in DuckDB's teardown: everything staged and
   migrated is committed by then.

Before step 4 the query service verifies what user queries will run as (the PostgreSQL reader
login): an unsafe configuration stops the start with a message saying what to fix.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from api.app import create_app
from api.protocol import head_deadline_protocol
from api.responses import PipelineState
from api.service import QueryService
from ingest.deadletters import replay_entries
from ingest.push import HttpPushSource
from migration.migrator import Migrator, build_targets
from migration.schema import WarehouseLayout
from runtime.broker_watch import watched_broker
from runtime.faults import PipelineFaults
from runtime.pipeline import Pipeline, PipelineOptions
from runtime.push_sink import PushSink
from runtime.runspec import RunSpec, StreamBinding
from staging.handoff import StagedDeltas
from staging.store import StagingStore
from streamdi.errors import StreamdiError
from streamdi.exit_codes import EXIT_FAILED, EXIT_OK
from streamdi.settings import StreamdiSettings

logger = logging.getLogger(__name__)


def with_push_sources(spec: RunSpec) -> tuple[RunSpec, dict[str, HttpPushSource]]:
    """``spec`` with an HTTP push source bound to every source that has no input (step 2)."""
    streams = dict(spec.streams)
    sources: dict[str, HttpPushSource] = {}
    for stream in spec.flow.sources:
        binding = streams.get(stream) or StreamBinding()
        if binding.input is not None:
            continue
        source = HttpPushSource(
            f"{spec.flow.name}.{stream}",
            {c: t or "string" for c, t in spec.flow.schemas[stream].items()},
        )
        sources[stream] = source
        streams[stream] = dataclasses.replace(binding, input=source)
    return RunSpec(spec.flow, streams), sources


class _PipelineThread:
    """The pipeline in a thread, and what became of it."""

    def __init__(self, pipeline: Pipeline, store: StagingStore) -> None:
        self.pipeline = pipeline
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.finished = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(store,), name="pipeline", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def _run(self, store: StagingStore) -> None:
        try:
            self.pipeline.run(self.stop, store=store)
        except BaseException as exc:
            logger.error("pipeline failed: %s", exc)
            self.error = exc
        finally:
            self.finished.set()

    def state(self) -> tuple[PipelineState, str | None]:
        if self.error is not None:
            return "failed", f"{type(self.error).__name__}: {self.error}"
        if self.finished.is_set():
            return "stopped", None
        if self.pipeline.started.is_set():
            return "running", None
        return "starting", None

    def join(self, timeout: float | None = None) -> None:
        self.stop.set()
        self._thread.join(timeout)


def serve(
    spec: RunSpec,
    settings: StreamdiSettings,
    options: PipelineOptions,
    *,
    host: str,
    port: int,
    run_report: Mapping[str, Any] | None = None,
    faults: PipelineFaults | None = None,
) -> int:
    """Run the service until stopped; see the module docstring. Returns the exit code.
    ``run_report`` is the report of the TPC-DI run it serves (``GET /console/report``);
    ``faults``: the crash tests' hooks (:mod:`runtime.faults`), for the pipeline and its
    migrator."""
    import uvicorn

    # the pipeline's threads keep the interpreter busy; queries hand it back and forth between
    # DuckDB calls, so a shorter switch interval keeps their latency down
    sys.setswitchinterval(settings.api.switch_interval_s)
    # 1.
    with watched_broker(settings.kafka, settings.streamdi.state_dir) as watch:
        broker = watch.handle
        if broker.embedded:
            print(
                f"streamdi serve: embedded Apache Kafka at {broker.bootstrap_servers} "
                f"(its log: {settings.streamdi.state_dir / 'kafka'})",
                file=sys.stderr,
            )
        # 2.
        spec, push_sources = with_push_sources(spec)
        # 3.
        store = StagingStore(
            settings.staging_path,
            spec.flow,
            memory_limit=settings.staging.memory_limit,
            threads=settings.staging.threads,
            recent_cache_bytes=settings.staging.recent_cache_mb * 2**20,
        )
        migrator = None
        if settings.migration.target_names:
            layout = WarehouseLayout(
                spec.flow, settings.migration.schema_name, history=store.history
            )
            migrator = Migrator(
                StagedDeltas(store),
                build_targets(settings, layout),
                settings.migration,
                bootstrap="background",
                hook=faults.migration_hook() if faults is not None else None,
            )
        # 4.
        runner = _PipelineThread(
            Pipeline(spec, settings, broker, options, migrator=migrator, faults=faults), store
        )

        def replay(entries: list[tuple[int, Any]]) -> tuple[int, list[tuple[int, str]]]:
            return replay_entries(
                spec.stream_topics(), settings.kafka, broker.bootstrap_servers, entries
            )

        service = QueryService(
            store,
            settings,
            migrator=migrator,
            push_sources={s: PushSink(s, source) for s, source in push_sources.items()},
            pushable={s: s in push_sources for s in spec.flow.sources},
            replayer=replay,
            pipeline_state=runner.state,
            ingest=runner.pipeline,
            broker=watch.state,
            run_report=run_report,
        )
        runner.pipeline.observers.append(service.metrics.observe_batch)
        runner.pipeline.observers.append(service.console.observe_batch)
        try:
            service.start()
        except StreamdiError as exc:
            print(f"streamdi serve: {exc}", file=sys.stderr)
            service.close()
            if migrator is not None:
                migrator.close()
            store.close()
            return EXIT_FAILED
        runner.start()
        # 5.
        config = uvicorn.Config(
            create_app(service, settings),
            host=host,
            port=port,
            log_level="warning",
            lifespan="off",
            timeout_graceful_shutdown=10,
            http=head_deadline_protocol(settings.api.header_timeout_s),
            server_header=False,
        )
        warn_if_exposed(host, settings)
        server = uvicorn.Server(config)
        grace = settings.api.query_grace_s
        watcher = threading.Thread(
            target=_watch,
            args=(server, runner, host, port, lambda: service.shutdown(grace)),
            name="serve-watch",
            daemon=True,
        )
        watcher.start()
        # uvicorn hands a signal it caught back to the handler it found when it stops: ours
        # only notes it, so the shutdown below runs instead of the default handler's exit
        stopping = threading.Event()

        def note(signum: int, frame: Any) -> None:
            stopping.set()

        signal.signal(signal.SIGTERM, note)
        signal.signal(signal.SIGINT, note)
        try:
            server.run()
        finally:
            # 6.
            for source in push_sources.values():
                source.close()
            runner.join(timeout=120)
            left = service.shutdown(0.0)
            service.close()
            if migrator is not None:
                migrator.close()
            store.close()
    code = EXIT_OK
    if runner.error is not None:
        print(f"streamdi serve: the pipeline failed: {runner.error}", file=sys.stderr)
        code = EXIT_FAILED
    if left:
        print(
            f"streamdi serve: {left} abandoned query statements still run; exiting without "
            "waiting for them",
            file=sys.stderr,
            flush=True,
        )
        logging.shutdown()
        os._exit(code)
    return code


def warn_if_exposed(host: str, settings: StreamdiSettings) -> bool:
    """Say on stderr when the service listens beyond this machine without ``API__TOKEN``: then
    anyone who reaches the port may query, push, replay and pause. True if it warned."""
    try:
        local = ipaddress.ip_address(host).is_loopback
    except ValueError:
        local = host == "localhost"
    if local or settings.api.token is not None:
        return False
    print(
        f"streamdi serve: listening on {host} without API__TOKEN: anyone who can reach this "
        "port may query, push, replay and pause; set API__TOKEN or bind 127.0.0.1",
        file=sys.stderr,
        flush=True,
    )
    return True


def _watch(
    server: Any, runner: _PipelineThread, host: str, port: int, on_exit: Callable[[], object]
) -> None:
    """Announce the address once the server listens; stop the server if the pipeline fails;
    call ``on_exit`` (interrupt the queries) as soon as the server is told to exit."""
    try:
        _watch_until_exit(server, runner, host, port)
    finally:
        on_exit()


def _watch_until_exit(server: Any, runner: _PipelineThread, host: str, port: int) -> None:
    announced = False
    while not server.should_exit:
        if not announced and server.started:
            print(
                f"streamdi serve: http://{host}:{port} (OpenAPI docs at /docs)",
                file=sys.stderr,
                flush=True,
            )
            announced = True
        if runner.error is not None:
            logger.error("stopping the service: the pipeline failed")
            server.should_exit = True
            return
        time.sleep(0.1)
