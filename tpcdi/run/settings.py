"""The settings a TPC-DI run uses: the user's, with its files under the run's work directory and
migration tuned for freshness.

* staging, the DuckDB warehouse, collector checkpoints and Spark's scratch files live under
  ``<state_dir>/tpcdi`` (``--workdir``), so a run never touches another pipeline's files;
* migration targets are the run's; every committed batch is pushed at once and merged in the
  same round (the update is *visible*, not just loaded), and staging releases it immediately;
* an incremental update travels as batches of up to :data:`UPDATE_BATCH_EVENTS` events (a whole
  update up to SF ~15), the pipeline also cutting when Kafka goes quiet: a larger update is
  read, run, committed, loaded and merged a piece at a time, each stage working on one piece
  while the next is on its way (one batch of the whole update left each stage waiting for the
  one before).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from streamdi.settings import StreamdiSettings

#: The most events of a run's batch (collector and engine). Measured with the two updates of
#: a generated data set (freshness of each, medians of two or three runs, a quiet machine):
#: SF 30, 100 k: 3.9 / 3.0 s against 4.6 / 3.3 s as one batch (1 M), 50 k: 3.6 / 3.8 s, 200 k
#: (one batch there): 4.6 / 3.3 s; SF 100, 100 k: 14.8 / 11.6 s against 16.5 / 12.2 s, 200 k:
#: 15.4 / 11.6 s. The price is CPU: a merge and a staging commit per piece (SF 100: merges 2.7 ->
#: 7.5 s and commits 0.6 -> 6 s for the first update, overlapping the engine).
UPDATE_BATCH_EVENTS = 100_000


def run_settings(base: StreamdiSettings, workdir: Path, targets: Sequence[str]) -> StreamdiSettings:
    """``base`` adjusted for a TPC-DI run in ``workdir`` (see the module docstring)."""
    workdir = Path(workdir)
    service = base.streamdi.model_copy(update={"state_dir": workdir})
    staging = base.staging.model_copy(update={"path": workdir / "staging.duckdb"})
    migration = base.migration.model_copy(
        update={
            "targets": ",".join(targets),
            "push": None,
            "push_batches": 1,
            "push_rows": 1,
            "push_ms": 1,
            "merge_rows": 1,
            "merge_ms": 1,
            "retention_s": 0.0,
            "duckdb_path": workdir / "warehouse.duckdb",
            "schema_name": base.migration.schema_name or "tpcdi",
        }
    )
    ingest = base.ingest.model_copy(
        update={
            "batch_events": UPDATE_BATCH_EVENTS,
            "batch_ms": 10_000,
            "allowed_lateness_ms": None,
        }
    )
    engine = base.engine.model_copy(update={"batch_size": UPDATE_BATCH_EVENTS})
    postgres = base.postgres.model_copy(
        update={"data_dir": base.postgres.data_dir or base.streamdi.state_dir / "postgres"}
    )
    # the migration target and the run's warehouse share one DuckDB instance: one memory limit
    api = base.api.model_copy(update={"warehouse_memory_limit": base.tpcdi.duckdb_memory_limit})
    return base.model_copy(
        update={
            "streamdi": service,
            "staging": staging,
            "migration": migration,
            "ingest": ingest,
            "engine": engine,
            "postgres": postgres,
            "api": api,
        }
    )
