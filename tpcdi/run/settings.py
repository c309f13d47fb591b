"""The settings a TPC-DI run uses: the user's, with its files under the run's work directory and
migration tuned for freshness.

* staging, the DuckDB warehouse, collector checkpoints and Spark's scratch files live under
  ``<state_dir>/tpcdi`` (``--workdir``), so a run never touches another pipeline's files;
* migration targets are the run's; every committed batch is pushed at once and merged in the
  same round (the update is *visible*, not just loaded), and staging releases it immediately;
* an incremental update travels as few, large batches: the collector and the engine cut at a
  million events (a whole update at SF <= 10), the pipeline also cuts when Kafka goes quiet.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from streamdi.settings import StreamdiSettings


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
        update={"batch_events": 1_000_000, "batch_ms": 10_000, "allowed_lateness_ms": None}
    )
    engine = base.engine.model_copy(update={"batch_size": 1_000_000})
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
