"""The TPC-DI workload of the fault campaign: the incremental updates (Batch2 and Batch3) into
both warehouses, through ``streamdi serve``, fed over HTTP.

* **Prepared once** (:func:`prepare_base`): a data set generated at the scale factor (cached in
  ``TPCDI__CACHE_DIR`` as ``streamdi tpcdi run --sf`` caches it), then ``streamdi tpcdi run
  --target both --stop-after historical`` into a base folder with a PostgreSQL server of its own:
  the warehouses loaded by Spark, staging seeded, phase 1 not yet completed. Each run starts from
  a copy of that folder (PostgreSQL's data directory copied while it is stopped), so the
  reference and the faulted run start from the same bytes, and each run completes phase 1 itself
  (``streamdi tpcdi phase end 1``) just before its updates begin.
* **The input** (:func:`tpcdi_offers`): each batch's ``changes`` stream, as ``streamdi tpcdi
  run`` offers it (:class:`~tpcdi.incremental.changes.ChangesSource`: file after file, the
  dimensions before the facts, each record with its file's event time), cut into offers of
  ``offer_size`` events that never span two batches; each offer is an Arrow IPC stream POSTed to
  ``/streams/changes/events`` with ``expect_pos`` (positions from 0 across both batches). One
  offer is one logical batch and one engine batch, as in the ledger workload, so batch ids, and
  everything keyed by them, are the same in every run.
* **The spec** serve runs (:func:`run`): the incremental dataflow with the static lookups read
  from the DuckDB warehouse (as ``streamdi tpcdi run --serve`` does), its ``changes`` stream
  pushed over HTTP, no lateness check.
* **What is compared besides the rows** (:data:`RULES`, :func:`audit_relations`): DImessages'
  ``messagedateandtime`` is the wall clock by specification (alerts, status rows, validation
  rows, PCRs) and is left out; so are the visibility rows, whose counts depend on when they were
  taken. The audit of each warehouse is compared check by check: its verdict, and its numbers
  except those of the checks about time (:data:`TIMED_CHECKS`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from benchmarks.faults import compare
from benchmarks.faults.ledger import Offer
from benchmarks.faults.processes import PostgresService, run_command
from runtime import RunSpec

SPEC = "benchmarks.faults.tpcdi_workload:run"
SCHEMA = "tpcdi"
STREAM = "changes"
#: The incremental batches of the workload: DIGen's Batch2 and Batch3.
BATCHES = (2, 3)
#: Audit checks whose numbers say when things happened (timestamps, how many visibility queries
#: ran, so how many DImessages rows there are): only their verdicts are compared.
TIMED_CHECKS = frozenset(
    {
        "DImessages required fields",
        "DImessages phase order",
        "Data visibility row counts",
        "Data visibility joined row counts",
        "Data visibility schedule",
    }
)
_WALL_CLOCK = frozenset({"messagedateandtime"})
#: What the comparison leaves out (see the module docstring).
RULES = compare.Rules(
    volatile={
        "outputs.dimessages": _WALL_CLOCK,
        f"{SCHEMA}.dimessages": _WALL_CLOCK,
        f"{SCHEMA}_delta.dimessages": _WALL_CLOCK,
    },
    where={
        f"{SCHEMA}.dimessages": "messagetype NOT IN ('Visibility_1', 'Visibility_2')",
        f"{SCHEMA}_delta.dimessages": "messagetype NOT IN ('Visibility_1', 'Visibility_2')",
    },
)


def run() -> RunSpec:
    """The spec ``streamdi serve`` (and ``streamdi migrate``) runs: the incremental TPC-DI
    dataflow of the warehouse in the settings' DuckDB file, ``changes`` pushed over HTTP."""
    import duckdb

    from runtime.runspec import StreamBinding, bind
    from staging.layout import arrow_of
    from streamdi.settings import load_settings
    from tpcdi.incremental import build_flow
    from tpcdi.incremental.flow import SOURCE
    from tpcdi.incremental.reference import Reference

    settings = load_settings()
    schema = settings.migration.schema_name or SCHEMA
    # read-write: a warehouse file a killed serve left with a WAL is replayed, then closed before
    # the migrator opens it
    con = duckdb.connect(str(settings.warehouse_path))
    try:
        con.execute(f"SET schema = '{schema}'")
        reference = Reference.from_warehouse(lambda sql: arrow_of(con.sql(sql)))
    finally:
        con.close()
    flow = build_flow(reference).build()
    return bind(flow, **{SOURCE: StreamBinding(allowed_lateness_ms=None)})


def data_dir(cache: Path, sf: float, seed: int) -> Path:
    """Where ``streamdi tpcdi run --sf SF --seed SEED`` keeps its generated data set."""
    return cache / f"generated-sf{sf:g}-seed{seed}"


@dataclass
class TpcdiInput:
    """The workload's input: the offers, and the first offer of each batch."""

    offers: list[Offer]
    first_offer: dict[int, int]
    rejects: int

    def batch_of_offer(self, index: int) -> int:
        """The TPC-DI batch (2 or 3) offer ``index`` belongs to."""
        return max(b for b, first in self.first_offer.items() if first <= index)


def tpcdi_offers(data: Path, offer_size: int, batches: tuple[int, ...] = BATCHES) -> TpcdiInput:
    """The offers of ``batches`` of the staging area ``data`` (see the module docstring).
    Lines the readers reject have no event to offer; they are counted (DIGen and our generator
    write none)."""
    from etl_dataflows.types import POS
    from tpcdi.incremental.changes import ChangesSource

    offers: list[Offer] = []
    first_offer: dict[int, int] = {}
    rejects = 0
    pos = 0
    for batch in batches:
        source = ChangesSource(data / f"Batch{batch}", batch)
        pieces = []
        for chunk in source.read():
            rejects += len(chunk.rejects)
            if chunk.events.num_rows:
                pieces.append(chunk.events.drop_columns([POS]))
        events = pa.concat_tables(pieces).combine_chunks()
        first_offer[batch] = len(offers)
        for start in range(0, events.num_rows, offer_size):
            piece = events.slice(start, offer_size)
            offers.append(Offer(len(offers), pos, piece, note=f"Batch{batch}"))
            pos += piece.num_rows
    return TpcdiInput(offers, first_offer, rejects)


@dataclass
class Base:
    """The prepared starting point of every run: ``state`` (the run's files: warehouse, seeded
    staging, PostgreSQL's data directory) and the data set ``data``."""

    state: Path
    data: Path
    seconds: float

    @property
    def staging(self) -> Path:
        return self.state / "staging.duckdb"


def base_env(state: Path, cache: Path, dsn: str) -> dict[str, str]:
    """The environment of ``streamdi tpcdi run`` preparing the base."""
    from benchmarks.faults.run import run_env

    env = run_env(state, state / "staging.duckdb", 0, dsn)
    env.pop("API__PORT", None)
    env.update(TPCDI__CACHE_DIR=str(cache), STREAMDI__LOG_LEVEL="WARNING")
    return env


def prepare_base(
    folder: Path, sf: float, seed: int, cache: Path, log: Path, *, reuse: bool = False
) -> Base:
    """Generate (or reuse) the data set and load it up to the historical load into ``folder``
    (see the module docstring). With ``reuse``, a base an earlier campaign left in ``folder``
    for the same ``sf`` and ``seed`` is taken as it is. Raises RuntimeError when the load
    fails."""
    started = time.monotonic()
    marker = folder / "base.json"
    wanted = {"sf": sf, "seed": seed}
    if reuse and marker.is_file() and json.loads(marker.read_text()) == wanted:
        return Base(folder / "state", data_dir(cache, sf, seed), 0.0)
    shutil.rmtree(folder, ignore_errors=True)
    state = folder / "state"
    state.mkdir(parents=True)
    postgres = PostgresService(state / "postgres")
    try:
        dsn = postgres.start()
        code = run_command(
            [
                "tpcdi",
                "run",
                "--sf",
                f"{sf:g}",
                "--seed",
                str(seed),
                "--target",
                "both",
                "--workdir",
                str(state),
                "--stop-after",
                "historical",
                "--no-progress",
            ],
            base_env(state, cache, dsn),
            log,
            timeout_s=1800,
        )
    finally:
        postgres.close()
    if code != 0:
        raise RuntimeError(f"the historical load exited {code}; see {log}")
    marker.write_text(json.dumps(wanted))
    return Base(state, data_dir(cache, sf, seed), time.monotonic() - started)


def copy_base(base: Base, state: Path, staging: Path) -> None:
    """The base's files into a run's ``state`` folder, its staging files next to ``staging``
    (on the run's own disk when it fills disks); ``cp -a``: PostgreSQL's files keep their owner
    (it refuses a data directory it does not own)."""
    state.mkdir(parents=True, exist_ok=True)
    staging.parent.mkdir(parents=True, exist_ok=True)
    for source in sorted(base.state.iterdir()):
        if source.name in ("kafka", "collector", "spark"):
            continue
        if source.name.startswith("staging.duckdb"):
            target = staging.parent / source.name.replace("staging.duckdb", staging.name, 1)
        else:
            target = state / source.name
        done = subprocess.run(
            ["cp", "-a", str(source), str(target)], capture_output=True, text=True
        )
        if done.returncode != 0:
            raise RuntimeError(f"cannot copy {source} to {target}: {done.stderr.strip()}")


def audit_relations(audits: dict[str, dict[str, Any]]) -> compare.Snapshot:
    """Each warehouse's audit as a relation to compare: ``audit:<target>.checks`` with a row per
    check (its name, verdict and numbers; the numbers left out for :data:`TIMED_CHECKS`)."""
    out: compare.Snapshot = {}
    for target, result in sorted(audits.items()):
        rows = [
            (c["name"], bool(c["ok"]), "" if c["name"] in TIMED_CHECKS else str(c["detail"]))
            for c in result.get("checks", [])
        ]
        out[f"audit:{target}.checks"] = compare.Relation(["check", "ok", "detail"], sorted(rows))
    return out
