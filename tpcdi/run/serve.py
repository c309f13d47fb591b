"""``streamdi tpcdi run --serve``: after the run, keep the query service up over its warehouse.

The service is ``streamdi serve``'s (:func:`runtime.serve.serve`) on the run's own settings
(:func:`tpcdi.run.settings.run_settings`: the run's staging file, its warehouse target(s), schema
``tpcdi``) and the incremental TPC-DI dataflow, whose ``changes`` stream then takes events
POSTed to ``/streams/changes/events``: union queries see the DW tables the run loaded plus
whatever is staged above them. It starts its own broker; the pipeline reads the new broker's log
from its start and its collector continues the run's batch ids and positions from staging, so a
pushed event is neither skipped nor applied twice. The report the run saved in ``workdir``
(:mod:`tpcdi.run.report_file`) is handed to the service (``GET /console/report``). Stops on
SIGTERM or Ctrl-C.
"""

from __future__ import annotations

import logging
from pathlib import Path

from streamdi.settings import StreamdiSettings

logger = logging.getLogger(__name__)


def serve(
    settings: StreamdiSettings,
    workdir: Path,
    targets: tuple[str, ...],
    *,
    executor: str | None = None,
    version: int = 1,
) -> int:
    """Serve the warehouse of the run in ``workdir`` until stopped; returns the exit code.
    ``version`` is the incremental dataflow's version the run left staged (2 after
    ``--upgrade-between``)."""
    from migration.schema import WarehouseLayout
    from runtime.pipeline import PipelineOptions
    from runtime.runspec import StreamBinding, bind
    from runtime.serve import serve as serve_api
    from tpcdi.incremental import build_flow
    from tpcdi.incremental.flow import SOURCE
    from tpcdi.incremental.reference import Reference
    from tpcdi.run.job import open_warehouse
    from tpcdi.run.report_file import load_report
    from tpcdi.run.settings import run_settings

    logging.getLogger("kafka").setLevel(logging.WARNING)
    served = run_settings(settings, workdir, targets)
    layout = WarehouseLayout(build_flow(version=version).build(), served.migration.schema_name)
    with open_warehouse(served, layout, targets) as warehouse:
        reference = Reference.from_warehouse(lambda sql: warehouse.query(sql))
    flow = build_flow(reference, version=version).build()
    spec = bind(flow, **{SOURCE: StreamBinding(allowed_lateness_ms=None)})
    options = PipelineOptions(executor=executor or served.engine.executor, collect=True)
    logger.info("serving tpcdi warehouse targets=%s workdir=%s", ",".join(targets), workdir)
    return serve_api(
        spec,
        served,
        options,
        host=served.api.host,
        port=served.api.port,
        run_report=load_report(workdir),
    )
