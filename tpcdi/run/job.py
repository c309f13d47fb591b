"""``streamdi tpcdi run``: the whole TPC-DI benchmark run (clause 7) on embedded defaults.

Phases, in order (each one's wall time, rows and steps go into the :class:`RunRecord`):

1. **Data**: generate a staging area (``--sf``, with ``--days N`` a daily feed of N incremental
   batches) or locate DIGen output (``--data``, default the configured DIGen data set); every file
   of Batch1..BatchB must be there, or the run stops at once and lists what is missing.
2. **Initialization** (BatchID 0, untimed): the warehouse schema is dropped and created empty in
   every target, staging and collector checkpoints start afresh; batch validation and PCR.
3. **Historical load** (BatchID 1): Batch1 on Spark into every target; the engine's staging state
   is seeded from the result; batch validation and PCR.
4. **Incremental updates** (BatchID 2..B: DIGen's two, or one per day of a feed): the pipeline of
   the incremental dataflow runs on its own thread through all of them; each Batch directory is
   offered as the ``changes`` stream and its phase ends when every target has merged it
   (freshness), followed by the Prospect status messages, batch validation and PCR
   (:mod:`tpcdi.run.feed`: pacing, per-day measures, audits at sampled days).
5. **Audit**: answer keys into Audit, the automated audit over every batch.

Then the report: TPC_DI_RPS, the JSON (``--json``), peak memory of the process tree.

With ``--stop-after historical`` the run ends after the historical load, before its batch
validation and PCR: the work directory holds the loaded warehouse and the seeded staging file,
ready for the incremental updates to run under ``streamdi serve`` with each phase's bookkeeping
(phase 1's completion first) done by ``streamdi tpcdi phase`` (:mod:`tpcdi.run.resume`:
resumable after a kill, as the fault campaign drives them).
"""

from __future__ import annotations

import datetime
import logging
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO

from tqdm import tqdm

from migration.schema import WarehouseLayout
from staging import state_file
from staging.store import StagingStore
from streamdi.memory import limit_malloc_arenas, release_free_memory
from streamdi.settings import StreamdiSettings
from tpcdi.exceptions import GeneratorError, SourceNotFound
from tpcdi.incremental import build_flow
from tpcdi.incremental.changes import missing_files
from tpcdi.incremental.reference import Reference
from tpcdi.run import phases
from tpcdi.run.feed import DailyFeed, FeedOptions, status_row
from tpcdi.run.memory import MemorySampler
from tpcdi.run.record import PhaseTimer, RunRecord
from tpcdi.run.report_file import forget_report
from tpcdi.run.settings import run_settings
from tpcdi.run.updates import UpdateStream, forget_embedded_kafka
from tpcdi.warehouse.warehouse import Target, Warehouse

logger = logging.getLogger(__name__)

JOB = "streamdi tpcdi run"


@dataclass
class RunOptions:
    """What ``streamdi tpcdi run`` was asked to do."""

    sf: float | None = None
    data: Path | None = None
    targets: tuple[Target, ...] = ("duckdb",)
    spark_master: str | None = None
    seed: int = 0
    json_path: str | None = None
    png_path: str | None = None
    progress: bool = True
    workdir: Path | None = None
    executor: str | None = None
    #: switch to version 2 of the incremental dataflow before the second update
    #: (docs/evolution.md)
    upgrade_between: bool = False
    #: incremental batches to run: with ``sf``, the daily feed generated (default DIGen's 2);
    #: with data, the first ``days`` of its batches (default all)
    days: int | None = None
    #: offer one day every this many seconds (None: as fast as possible)
    day_seconds: float | None = None
    #: audit the warehouse after every this many days as well as at the end (0: at the end)
    audit_every: int = 0
    #: end the run after this phase: ``historical`` leaves a warehouse and a seeded staging file
    #: for the incremental updates to be driven from outside (:mod:`tpcdi.run.resume`)
    stop_after: Literal["historical"] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _now() -> datetime.datetime:
    return phases.now()


def generate_apart(root: Path, sf: float, *, seed: int, days: int, progress: bool) -> None:
    """Generate a data set in a child Python process: the generator's model (GBs at SF 100) and
    the pages its allocators keep after freeing it stay out of the run's own process, whose
    memory the run reports. The child shares this process's stderr (the progress bar, an
    error's traceback). Raises :class:`GeneratorError` when it fails."""
    done = subprocess.run(
        [sys.executable, "-c", _GENERATE, str(root), repr(sf), str(seed), str(days), str(progress)],
        check=False,
    )
    if done.returncode != 0:
        raise GeneratorError(
            f"generating SF {sf:g} into {root} failed (exit code {done.returncode}; the error is "
            "above)"
        )


_GENERATE = """import sys
from pathlib import Path
from tpcdi.generator import generate
root, sf, seed, days, progress = sys.argv[1:]
generate(Path(root), float(sf), seed=int(seed), days=int(days), progress=progress == "True")
"""


def prepare_data(options: RunOptions, settings: StreamdiSettings, out: TextIO) -> Path:
    """The staging area to load: generated (``--sf``), given (``--data``) or the configured
    DIGen data set. Raises :class:`SourceNotFound` naming every missing file."""
    from tpcdi.datasets import locate_digen, staging_root, unpack

    if options.sf is not None:
        days = options.days if options.days is not None else 2
        feed = "" if days == 2 else f"-days{days}"
        root = settings.tpcdi.cache_dir / f"generated-sf{options.sf:g}-seed{options.seed}{feed}"
        if not (root / ".complete").exists():
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir(parents=True)
            generate_apart(
                root, options.sf, seed=options.seed, days=days, progress=options.progress
            )
            (root / ".complete").touch()
    elif options.data is not None:
        given = Path(options.data)
        if given.is_file():
            root = unpack(given, settings.tpcdi.cache_dir)
        else:
            found = staging_root(given) if given.is_dir() else None
            if found is None:
                raise SourceNotFound(f"{given} holds no Batch1 directory", path=str(given))
            root = found
    else:
        located = locate_digen(settings.tpcdi)
        if located is None:
            raise SourceNotFound(
                "no TPC-DI data: pass --sf N to generate a data set or --data DIR for DIGen "
                "output (or set TPCDI__DIGEN_DATA)"
            )
        root = located
    check_data(root, options.days)
    return root


def configure_spark_master(settings: StreamdiSettings, master: str | None) -> None:
    """The process's one Spark session (historical load, ``--executor spark``) is built from the
    run's settings and ``--spark-master``."""
    from etl_dataflows.executors.spark.session import config_from_settings, configure_spark

    configure_spark(config_from_settings(settings, master))


def scale_factor_of(root: Path) -> float | None:
    """The scale factor a data set was generated at, from its ``Generator_audit.csv`` (DIGen and
    our generator write ``SF`` as the scale factor times 1000); None when it does not say."""
    import csv

    try:
        with (root / "Generator_audit.csv").open(newline="") as handle:
            for row in csv.reader(handle):
                if len(row) >= 6 and row[3].strip() == "SF" and row[5].strip():
                    return float(row[5]) / 1000
    except (OSError, ValueError):
        return None
    return None


def run_batches(root: Path, days: int | None = None) -> list[int]:
    """The batches a run loads from the staging area ``root``: Batch1 and the first ``days``
    incremental ones (default every ``Batch<N>`` directory; DIGen's: 1, 2, 3). Raises
    :class:`SourceNotFound` when it holds fewer than asked (or than one incremental batch)."""
    from tpcdi.readers import staging_batches

    try:
        found = staging_batches(root)
    except SourceNotFound:
        found = [1]  # check_data names what is missing
    wanted = max(found[-1], 2) - 1 if days is None else days
    if wanted < 1:
        raise SourceNotFound(f"a run needs at least one incremental batch, not {wanted}")
    return list(range(1, wanted + 2))


def check_data(root: Path, days: int | None = None) -> None:
    """Fail at start, listing every file a run needs that ``root`` lacks."""
    from tpcdi.historical.inputs import missing_batch1_files

    missing = [f"Batch1/{n}" for n in missing_batch1_files(root / "Batch1")]
    for batch in run_batches(root, days)[1:]:
        missing += [f"Batch{batch}/{n}" for n in missing_files(root / f"Batch{batch}")]
    if missing:
        raise SourceNotFound(
            f"{root} lacks {len(missing)} file(s) the run needs: " + ", ".join(missing),
            path=str(root),
        )


def _postgres_dsn(settings: StreamdiSettings) -> str:
    from migration.migrator import postgres_connection

    return postgres_connection(settings)[0]


def open_warehouse(
    settings: StreamdiSettings, layout: WarehouseLayout, targets: Sequence[str]
) -> Warehouse:
    """The run's warehouse in ``targets`` (the DuckDB file under the work directory; PostgreSQL
    at ``POSTGRES__DSN`` or the embedded server)."""
    return Warehouse(
        layout,
        targets,  # type: ignore[arg-type]
        duckdb_path=settings.warehouse_path if "duckdb" in targets else None,
        postgres_dsn=_postgres_dsn(settings) if "postgres" in targets else None,
        memory_limit=settings.tpcdi.duckdb_memory_limit,
    )


def run_tpcdi(
    options: RunOptions, base: StreamdiSettings, *, out: TextIO | None = None
) -> RunRecord:
    """Run every phase (see the module docstring) and return the record."""
    out = out or sys.stderr
    limit_malloc_arenas(base.tpcdi.malloc_arenas)  # before the run's threads start
    workdir = options.workdir or base.streamdi.state_dir / "tpcdi"
    settings = run_settings(base, workdir, options.targets)
    executor = options.executor or settings.engine.executor
    data = prepare_data(options, base, out)
    sf = options.sf if options.sf is not None else scale_factor_of(data)
    configure_spark_master(settings, options.spark_master)
    record = RunRecord(
        data_dir=str(data),
        targets=list(options.targets),
        sf=sf,
        executor=executor,
        spark_master=options.spark_master or settings.spark.master,
    )
    flow = build_flow().build()
    layout = WarehouseLayout(flow, settings.migration.schema_name)
    batches = run_batches(data, options.days)
    bar = tqdm(
        total=len(batches) + 2,
        desc="tpcdi run",
        unit="phase",
        file=out,
        disable=not options.progress,
    )
    embedded_pg = "postgres" in options.targets and settings.postgres.dsn is None
    sampler = MemorySampler(postgres_dir=settings.postgres_data_dir if embedded_pg else None)
    with ExitStack() as stack, sampler as memory:
        stack.callback(bar.close)
        warehouse = open_warehouse(settings, layout, options.targets)
        stack.callback(warehouse.close)
        # 2. initialization
        phase = PhaseTimer(record, "initialization", 0, bar, memory)
        _fresh_state(settings)
        warehouse.reset()
        status_row(warehouse, 0, "Phase started", "initialization")
        phase.step("reset")
        phases.batch_complete(warehouse, 0)
        phase.step("validation")
        phase.done()
        # 3. historical load
        _historical(options, settings, flow, layout, warehouse, data, record, bar, memory)
        if options.stop_after == "historical":
            record.peak_mem_mb = memory.peak_mb
            return record
        free_after_historical(executor)
        # 4. incremental updates
        reference = Reference.from_warehouse(lambda sql: warehouse.query(sql))
        incremental = build_flow(reference).build()
        with phases.VisibilityWriter(warehouse) as visibility:
            updates = UpdateStream(incremental, settings, warehouse, executor=executor)
            stack.callback(lambda: updates.stop())
            updates.start()
            visibility.start(2)
            feed = DailyFeed(
                data,
                warehouse,
                record,
                visibility,
                last_batch=batches[-1],
                options=FeedOptions(options.day_seconds, options.audit_every),
                memory=memory,
                bar=bar,
            )
            for batch_id in batches[1:]:
                if batch_id == 3 and options.upgrade_between:
                    updates.stop()
                    upgraded = build_flow(reference, version=2).build()
                    record.upgrade = _upgrade_between(upgraded, settings)
                    updates = UpdateStream(upgraded, settings, warehouse, executor=executor)
                    updates.start()
                visibility.batch_id = batch_id
                feed.run_day(batch_id, updates)
            updates.stop()
        # 5. audit
        phase = PhaseTimer(record, "audit", None, bar, memory)
        phases.final_visibility(warehouse, batches[-1])
        phase.step("visibility")
        record.audits = phases.audit_phase(warehouse, data, through=batches[-1])
        phase.step("audit")
        phase.done()
        record.table_rows = {
            t: {n: warehouse.count(n, t) for n in sorted(layout.tables) + _static()}
            for t in options.targets
        }
        record.metric = phases.metric(warehouse, record)
    record.peak_mem_mb = memory.peak_mb
    record.memory = memory.as_json()
    return record


def free_after_historical(executor: str) -> None:
    """Give back what the historical load held and the updates do not need: the Spark session
    and its JVM (0.85 GB resident at SF 100 through the updates, 2.4 GB at SF 10), unless the
    engine runs on Spark (``executor`` ``spark`` or ``spark:<placement>``); then the allocators'
    freed memory (:func:`release_free_memory`: 697 -> 381 MB at SF 3)."""
    if executor.partition(":")[0] != "spark":
        from etl_dataflows.executors.spark.session import stop_spark_session

        stop_spark_session()
    release_free_memory()


def _upgrade_between(flow: Any, settings: StreamdiSettings) -> dict[str, Any]:
    """Apply version 2 of the incremental dataflow to staging and every warehouse (the pipeline
    is stopped): what the report records of it."""
    from runtime.upgrade import apply_upgrade

    started = time.perf_counter()
    report = apply_upgrade(flow, settings)
    return {**report.to_json(), "seconds": round(time.perf_counter() - started, 3)}


def _static() -> list[str]:
    from tpcdi.warehouse.tables import STATIC_TABLES

    return list(STATIC_TABLES)


def _fresh_state(settings: StreamdiSettings) -> None:
    """Staging, collector checkpoints, the embedded broker's log and the report of an earlier
    run are removed (clause 7.2.3: a clean SUT)."""
    staging = settings.staging_path
    for path in state_file.staging_files(staging):
        path.unlink(missing_ok=True)
    forget_embedded_kafka(settings)
    forget_report(settings.streamdi.state_dir)
    shutil.rmtree(settings.streamdi.state_dir / "collector", ignore_errors=True)
    shutil.rmtree(settings.streamdi.state_dir / "spark", ignore_errors=True)


def _historical(
    options: RunOptions,
    settings: StreamdiSettings,
    flow: Any,
    layout: WarehouseLayout,
    warehouse: Warehouse,
    data: Path,
    record: RunRecord,
    bar: Any,
    memory: MemorySampler | None = None,
) -> None:
    from tpcdi.historical.load import load_warehouse, transform

    phase = PhaseTimer(record, "historical", 1, bar, memory)
    status_row(warehouse, 1, "Phase started", "historical load")
    workdir = settings.streamdi.state_dir / "spark"
    try:
        result = transform(
            data / "Batch1", flow, layout, settings.spark, workdir, master=options.spark_master
        )
        phase.phase.steps.update({f"transform.{k}": v for k, v in result.seconds.items()})
        phase.step("transform")
        counts = load_warehouse(result, warehouse)
        phase.step("load")
    finally:
        # Spark's Parquet files go once loaded; the Spark session stays up: it is the process's
        # one session, which the engine's spark executor shares (it ends with the process)
        shutil.rmtree(workdir, ignore_errors=True)
    with StagingStore(
        settings.staging_path,
        flow,
        memory_limit=settings.staging.memory_limit,
        threads=settings.staging.threads,
    ) as store:
        store.seed(result.seed)
    phase.step("seed_staging")
    if options.stop_after != "historical":
        # stopped after it, the phase is completed when the updates are about to start (a
        # visibility query must follow CT1 within five minutes): ``streamdi tpcdi phase end 1``
        phases.batch_complete(warehouse, 1)
        phase.step("validation")
    phase.phase.rows = result.source_rows
    phase.phase.dw_rows = sum(counts.values())
    phase.phase.details = {
        "rejects": result.rejects,
        "tables": counts,
        "pieces": result.pieces.as_json(),
    }
    record.batch_rows[1] = result.source_rows
    phase.done()
