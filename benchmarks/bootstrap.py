"""``streamdi bench bootstrap``: a warehouse added later, bootstrapped from TPC-DI state, against a
raw bulk load of the same rows into the same kind of warehouse, side by side in one run.

1. **State**: a TPC-DI run into a DuckDB warehouse (``streamdi tpcdi run``: DIGen's SF=3 data by
   default, ``--sf N`` a generated data set, ``--data DIR`` other files; ``--state DIR`` reuses
   the work directory of a finished run). Staging then holds the engine's state tables (seeded by
   the historical load with its working set, changed by the two incremental updates) and has
   released every batch into the DuckDB warehouse, which holds the sinks (FactHoldings,
   FactMarketHistory, DImessages) and every row of the dimensions and facts (the seed left out
   closed versions, completed trades...): exactly the situation of a warehouse added later. The
   bootstrap therefore copies the state tables from the DuckDB warehouse too (staging was
   seeded), and the sinks. ``--peer postgres``: from a PostgreSQL database loaded from that
   warehouse beforehand (untimed) instead, the case of a configured service that adds a DuckDB
   warehouse (``MIGRATION__TARGETS`` names one DuckDB file, so its other warehouse is
   PostgreSQL): a DuckDB target then takes the rows path.
2. Per repetition (``--repeat``, default 3) and per new warehouse (``--targets``: PostgreSQL, a
   fresh database on a throw-away embedded server or ``POSTGRES__DSN``; DuckDB, a fresh file),
   taking turns which runs first:

   * **bootstrap**: :meth:`migration.bootstrap.Bootstrap.run` into the empty warehouse (its
     layout created beforehand, untimed), as the migrator runs it (``method='auto'``), through
     the path it takes, which the report names: a new DuckDB file takes the *file* path (the
     peer's file copied, checkpointed and held still, rewritten for the new target: the
     relations TPC-DI's run left beside the dataflow's dropped, ledger, merges and record
     rewritten; then swapped in: :mod:`migration.bootstrap.file_copy`); PostgreSQL the *rows*
     path (staging's snapshot and the DuckDB peer read in bounded pieces, read ahead across
     relations, bulk-loaded with COPY, one transaction and resume marker per relation, the
     ledger row). The peer is open throughout, as the migrator holds every configured target
     open (the bootstrap's reader joins its DuckDB instance);
   * **rows**: for a warehouse whose bootstrap takes the file path (DuckDB), the same bootstrap
     held to the rows path (``method='rows'``: the Arrow path, the fallback), so both paths are
     measured against the same raw load (``--no-rows`` leaves it out);
   * **raw**: the same rows, read into memory beforehand (untimed), bulk-loaded into an empty
     copy of the same layout in another fresh database or file, in one transaction, in the same
     pieces (``bulk_insert``: COPY / Arrow), the connection closed (a bootstrap closes its
     target too; DuckDB checkpoints the file then): the ceiling of the bulk path;
   * **export**: the same rows read from the same sources (timed), then loaded as *raw*: a copy
     without the bootstrap's protocol (snapshots, per-relation transactions and marks, ledger).

3. Reported per warehouse: rows, the path the bootstrap took, seconds of each repetition, their
   median and spread (min-max), rows/s, and per repetition the ratios raw seconds / bootstrap
   seconds (1.0: the bootstrap is as fast as a raw load of its rows; the goal is at least 0.8),
   raw seconds / rows-path seconds, and export seconds / bootstrap seconds (what the protocol
   costs), with the load average before and after (and, per repetition, the one-minute load
   average as it began). JSON and Markdown go to ``--out`` (default
   ``<STREAMDI__STATE_DIR>/reports/bench-bootstrap.*``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa

from benchmarks.postgres import bench_postgres
from cli.commands import EXIT_FAILED, EXIT_OK, Commands
from migration.bootstrap import Bootstrap, BootstrapMethod, BootstrapProgress
from migration.bootstrap.pieces import pieces
from migration.bootstrap.sources import open_peer
from migration.schema import WarehouseLayout
from migration.targets.base import BaseTarget
from migration.targets.duckdb_file import DuckDBTarget
from migration.targets.postgres import PostgresTarget
from staging.handoff import StagedDeltas
from staging.snapshot import open_snapshot
from staging.store import StagingStore
from streamdi.settings import StreamdiSettings
from warehouse.postgres import PostgresDriver

#: The TPC-DI run's DuckDB warehouse, the peer of every bootstrap here.
PEER = "tpcdi-run"

#: DIGen's SF=3 data set beside the repository (docs/tpcdi.md).
DIGEN_SF3 = Path(__file__).resolve().parents[1].parent / "shared" / "tpcdi" / "digen-sf3.tar.xz"


# -- 1. the state ----------------------------------------------------------------------------------


def build_state(args: argparse.Namespace, settings: StreamdiSettings, root: Path) -> Path:
    """The work directory of a TPC-DI run into DuckDB (run here unless ``--state`` names one)."""
    if args.state:
        workdir = Path(args.state)
        for name in ("staging.duckdb", "warehouse.duckdb"):
            if not (workdir / name).exists():
                raise SystemExit(f"--state {workdir}: no {name} (not a TPC-DI run's directory)")
        return workdir
    from tpcdi.run.job import RunOptions, run_tpcdi

    workdir = root / "tpcdi"
    data = None if args.sf is not None else Path(args.data) if args.data else DIGEN_SF3
    print(f"building TPC-DI state (a run into DuckDB) in {workdir} …", flush=True)
    started = time.perf_counter()
    record = run_tpcdi(
        RunOptions(sf=args.sf, data=data, targets=("duckdb",), workdir=workdir, progress=False),
        settings,
    )
    failed = sum(a.fail for a in record.audits.values())
    print(f"  run done in {time.perf_counter() - started:.0f} s (audit failures: {failed})")
    return workdir


# -- 2. the two loads ------------------------------------------------------------------------------


class Warehouses:
    """Fresh, empty warehouses of one kind: PostgreSQL databases on ``dsn`` or DuckDB files under
    ``root``, each with ``layout`` created (untimed)."""

    def __init__(self, kind: str, layout: WarehouseLayout, root: Path, dsn: str | None) -> None:
        self.kind = kind
        self.layout = layout
        self.root = root
        self.dsn = dsn
        self.made: list[str] = []
        self.files: list[Path] = []

    def fresh(self, label: str, layout: WarehouseLayout | None = None) -> BaseTarget:
        name = f"bench_{label}_{uuid.uuid4().hex[:8]}"
        chosen = layout or self.layout
        target: BaseTarget
        if self.kind == "duckdb":
            path = self.root / f"{name}.duckdb"
            self.files += [path, path.with_name(path.name + ".wal")]
            target = DuckDBTarget(chosen, path, memory_limit="4GB")
        else:
            assert self.dsn is not None
            admin = PostgresDriver(self.dsn)
            admin.connect()
            admin.raw.autocommit = True
            admin.execute(f"CREATE DATABASE {name}")
            admin.close()
            self.made.append(name)
            target = PostgresTarget(chosen, self.dsn, {"dbname": name})
        target.open()
        return target

    def drop_all(self) -> None:
        """Delete every warehouse made (databases, files)."""
        for path in self.files:
            path.unlink(missing_ok=True)
        self.files = []
        if self.kind != "postgres" or not self.made or self.dsn is None:
            return
        admin = PostgresDriver(self.dsn)
        admin.connect()
        admin.raw.autocommit = True
        for name in self.made:
            admin.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.close()
        self.made = []


def read_rows(store: StagingStore, peer: BaseTarget) -> dict[str, list[pa.Table]]:
    """Every row a bootstrap copies, per relation, in its pieces: the state tables (staging's;
    the peer's when staging was seeded, as after a TPC-DI run), the peer's sinks (and staging's
    outputs above the peer: none after a TPC-DI run, whose peer holds every batch)."""
    layout = peer.layout
    out: dict[str, list[pa.Table]] = {}
    with ExitStack() as stack:
        snap_peer = open_peer({PEER: peer}, 0)
        assert snap_peer is not None
        stack.callback(snap_peer.close)
        snap = stack.enter_context(open_snapshot(store))
        if snap_peer.watermark != snap.watermark:
            raise SystemExit("the TPC-DI run's warehouse is behind its staging: run it again")
        for name, table in layout.tables.items():
            if table.kind == "state" and store.seeded:
                batches: Iterator[pa.RecordBatch] = snap_peer.table_batches(name)
            elif table.kind == "state":
                batches = snap.table_batches(name)
            else:
                batches = iter(
                    [
                        *snap_peer.sink_batches(name),
                        *snap.output_batches(
                            name, after=snap_peer.watermark, columns=list(table.columns)
                        ),
                    ]
                )
            out[name] = [p.select(list(table.columns)) for p in pieces(batches)]
    return out


def raw_load(target: BaseTarget, rows: dict[str, list[pa.Table]]) -> float:
    """Seconds to bulk-load ``rows`` into ``target``'s empty full tables in one transaction and
    close it (as a bootstrap closes its target: DuckDB checkpoints the file then)."""
    layout = target.layout
    started = time.perf_counter()
    target.begin()
    for name, parts in rows.items():
        for part in parts:
            target.bulk_insert(layout.full_name(name), part)
    target.commit()
    target.close()
    return time.perf_counter() - started


def bootstrap_load(
    target: BaseTarget, store: StagingStore, peer: BaseTarget, method: BootstrapMethod = "auto"
) -> tuple[float, BootstrapProgress]:
    """Seconds to bootstrap the empty ``target`` (opened already) from staging and the peer;
    its progress says which path it took."""
    progress = BootstrapProgress(target.name)
    copy = Bootstrap(target, StagedDeltas(store), {PEER: peer}, progress, method=method)
    started = time.perf_counter()
    copy.run()
    return time.perf_counter() - started, progress


def _check(target: BaseTarget, rows: dict[str, list[pa.Table]]) -> None:
    """The bootstrapped target holds as many rows per relation as the raw load had."""
    target.open()
    for name, parts in rows.items():
        got = int(target.fetch(f"SELECT count(*) FROM {target.layout.full_name(name)}")[0][0])
        want = sum(p.num_rows for p in parts)
        if got != want:
            raise RuntimeError(f"bootstrap of {target.name}.{name}: {got} rows, expected {want}")
    target.close()


def measure(
    places: Warehouses,
    raw_layout: WarehouseLayout,
    store: StagingStore,
    peer: BaseTarget,
    rows: dict[str, list[pa.Table]],
    repeat: int,
    *,
    rows_too: bool = True,
) -> dict[str, Any]:
    """``repeat`` repetitions of the loads into fresh warehouses of one kind, their order
    rotating: **raw** (the rows in memory, bulk-loaded), **export** (the same rows read from
    staging and the peer first, then bulk-loaded: a copy without the bootstrap's protocol),
    **bootstrap** (the path it takes), and for DuckDB with a DuckDB ``peer`` (its bootstrap
    takes the file path) when ``rows_too``, **rows** (the bootstrap held to the rows path)."""
    modes = ["raw", "export", "bootstrap"]
    if rows_too and places.kind == "duckdb" and peer.whole_file() is not None:
        modes.append("rows")
    seconds: dict[str, list[float]] = {m: [] for m in ("raw", "export", "bootstrap", "rows")}
    paths: list[str] = []
    loads: list[float] = []
    total = sum(p.num_rows for parts in rows.values() for p in parts)
    for rep in range(repeat):
        loads.append(os.getloadavg()[0])
        turn = rep % len(modes)
        for mode in modes[turn:] + modes[:turn]:
            if mode == "raw":
                seconds[mode].append(raw_load(places.fresh("raw", raw_layout), rows))
            elif mode == "export":
                started = time.perf_counter()
                read = read_rows(store, peer)
                raw_load(places.fresh("export", raw_layout), read)
                seconds[mode].append(time.perf_counter() - started)
                del read
            else:
                method: BootstrapMethod = "auto" if mode == "bootstrap" else "rows"
                target = places.fresh("boot" if mode == "bootstrap" else "rows")
                took, progress = bootstrap_load(target, store, peer, method)
                seconds[mode].append(took)
                if mode == "bootstrap":
                    paths.append(progress.method)
                elif progress.method != "rows":
                    raise RuntimeError(f"a bootstrap held to the rows path took {progress.method}")
                _check(target, rows)
        s = {m: v[-1] for m, v in seconds.items() if v}
        line = (
            f"  {places.kind} repetition {rep + 1} (load {loads[-1]:.1f}): raw {s['raw']:.2f} s, "
            f"export {s['export']:.2f} s, bootstrap ({paths[-1]} path) {s['bootstrap']:.2f} s, "
            f"ratio {s['raw'] / s['bootstrap']:.2f} (to export {s['export'] / s['bootstrap']:.2f})"
        )
        if "rows" in s:
            line += f"; rows path {s['rows']:.2f} s, ratio {s['raw'] / s['rows']:.2f}"
        print(line, flush=True)
        places.drop_all()
    out: dict[str, Any] = {
        "rows": total,
        "bulk_path": "COPY FROM STDIN (csv)" if places.kind == "postgres" else "Arrow insert",
        "bootstrap_paths": paths,
        "load_average_1m": loads,
    }
    for mode, values in seconds.items():
        if not values:
            continue
        out[f"{mode}_s"] = values
        out[f"{mode}_rows_per_s"] = total / statistics.median(values)
    for base, over in (("raw", "bootstrap"), ("export", "bootstrap"), ("raw", "rows")):
        if not seconds[over]:
            continue
        ratios = [r / b for r, b in zip(seconds[base], seconds[over], strict=True)]
        key = f"ratio_to_{base}" if over == "bootstrap" else f"rows_ratio_to_{base}"
        out[key] = {
            "values": ratios,
            "median": statistics.median(ratios),
            "min": min(ratios),
            "max": max(ratios),
        }
    return out


def postgres_peer(
    store: StagingStore, tpcdi: DuckDBTarget, layout: WarehouseLayout, places: Warehouses
) -> BaseTarget:
    """A PostgreSQL warehouse holding what the TPC-DI run's DuckDB warehouse holds (bootstrapped
    from it, untimed), opened: the peer of a DuckDB warehouse added to a configured service
    (``MIGRATION__TARGETS`` names one DuckDB file: its other warehouse is PostgreSQL)."""
    peer = places.fresh("peer", layout)
    started = time.perf_counter()
    bootstrap_load(peer, store, tpcdi)
    peer.open()
    print(f"  PostgreSQL peer loaded in {time.perf_counter() - started:.0f} s", flush=True)
    return peer


@contextmanager
def _postgres(settings: StreamdiSettings, root: Path, wanted: bool) -> Iterator[str | None]:
    if not wanted:
        yield None
        return
    with bench_postgres(settings, root) as dsn:
        yield dsn


def run_bench(args: argparse.Namespace, settings: StreamdiSettings) -> dict[str, Any]:
    from tpcdi.incremental import build_flow

    load_before = os.getloadavg()
    kinds = [t.strip() for t in args.targets.split(",") if t.strip()]
    root = Path(tempfile.mkdtemp(prefix="streamdi-bench-bootstrap-"))
    workdir = build_state(args, settings, root)
    flow = build_flow().build()
    layout = WarehouseLayout(flow, "tpcdi")
    raw_layout = WarehouseLayout(flow, "tpcdi_raw")
    store = StagingStore(workdir / "staging.duckdb", flow, memory_limit="4GB", threads=2)
    peer = DuckDBTarget(layout, workdir / "warehouse.duckdb", memory_limit="4GB")
    results: dict[str, Any] = {}
    try:
        # open, as the migrator holds every configured target open: a bootstrap's reader joins
        # the peer's DuckDB instance rather than opening the file and closing it again
        peer.open()
        staged = StagedDeltas(store)
        released, watermark, seeded = staged.released_through(), store.watermark, store.seeded
        rows = read_rows(store, peer)
        counts = {n: sum(p.num_rows for p in parts) for n, parts in rows.items()}
        total = sum(counts.values())
        print(
            f"state: staging at batch {watermark} (released through {released}); "
            f"{total:,} rows in {len(counts)} relations",
            flush=True,
        )
        with _postgres(settings, root, "postgres" in kinds or args.peer == "postgres") as dsn:
            peers = Warehouses("postgres", layout, root, dsn)
            try:
                source: BaseTarget = peer
                if args.peer == "postgres":
                    source = postgres_peer(store, peer, layout, peers)
                for kind in kinds:
                    places = Warehouses(kind, layout, root, dsn)
                    try:
                        results[kind] = measure(
                            places, raw_layout, store, source, rows, args.repeat, rows_too=args.rows
                        )
                    finally:
                        places.drop_all()
            finally:
                if source is not peer:
                    source.close()
                peers.drop_all()
    finally:
        peer.close()
        store.close()
        if args.state:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"the TPC-DI state stays in {workdir} (--state {workdir} reuses it)")
    return {
        "bench": "bootstrap",
        "state": str(workdir),
        "staged_watermark": watermark,
        "released_through": released,
        "relations": counts,
        "seeded_staging": seeded,
        "peer": args.peer,
        "repeat": args.repeat,
        "results": results,
        "load_average": {"before": list(load_before), "after": list(os.getloadavg())},
    }


# -- 3. the report ---------------------------------------------------------------------------------


def markdown(data: dict[str, Any]) -> str:
    total = sum(data["relations"].values())
    lines = [
        "# streamdi bench bootstrap",
        "",
        f"A warehouse added after staging released batches 1..{data['released_through']}, "
        f"bootstrapped from TPC-DI state ({total:,} rows in {len(data['relations'])} relations, "
        f"{(data['seeded_staging'] and 'state tables and ') or 'state tables from staging, '}"
        f"sinks from {_PEERS[data.get('peer', 'duckdb')]}), against a raw bulk load of the "
        "same rows, "
        f"{data['repeat']} repetitions taking turns. Load average "
        f"{_load(data['load_average']['before'])} before, "
        f"{_load(data['load_average']['after'])} after.",
        "",
        "| new warehouse | bootstrap path | raw s | export s | bootstrap s | bootstrap rows/s "
        "| raw / bootstrap | export / bootstrap | rows path s | raw / rows path |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for kind, r in data["results"].items():
        taken = "/".join(sorted(set(r.get("bootstrap_paths", [])))) or "?"
        path = f"{taken} ({r['bulk_path']})" if taken == "rows" else taken
        rows_s = _spread(r["rows_s"]) if "rows_s" in r else "-"
        rows_ratio = _ratio(r["rows_ratio_to_raw"]) if "rows_ratio_to_raw" in r else "-"
        lines.append(
            f"| {kind} | {path} | {_spread(r['raw_s'])} | {_spread(r['export_s'])} "
            f"| {_spread(r['bootstrap_s'])} | {r['bootstrap_rows_per_s']:,.0f} "
            f"| {_ratio(r['ratio_to_raw'])} | {_ratio(r['ratio_to_export'])} "
            f"| {rows_s} | {rows_ratio} |"
        )
    lines += [
        "",
        "Seconds: median (min-max). Ratios per repetition, median (min-max); 1.0 = as fast. "
        "*raw*: the rows already in memory, bulk-loaded (Arrow / COPY) into an empty layout in "
        "one transaction, then the connection closed; *export*: read from staging and the peer, "
        "then loaded as raw (no bootstrap protocol); *bootstrap*: as the migrator runs it, by "
        "the path named (*file*: a copy of the peer's DuckDB file rewritten and swapped in; "
        "*rows*: the relations read and bulk-loaded); *rows path*: the same bootstrap held to "
        "the rows path.",
    ]
    lines += ["", "Rows per relation:", ""]
    lines += [f"- {n}: {c:,}" for n, c in sorted(data["relations"].items())]
    return "\n".join(lines) + "\n"


#: The peer as the report names it.
_PEERS = {
    "duckdb": "the TPC-DI run's DuckDB warehouse",
    "postgres": "a PostgreSQL peer (loaded from the TPC-DI run's DuckDB warehouse beforehand)",
}


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def _ratio(r: dict[str, Any]) -> str:
    return f"{r['median']:.2f} ({r['min']:.2f}-{r['max']:.2f})"


def _load(values: list[float]) -> str:
    return "/".join(f"{v:.1f}" for v in values)


def _run(args: argparse.Namespace, settings: StreamdiSettings) -> int:
    data = run_bench(args, settings)
    out = Path(args.out) if args.out else settings.streamdi.state_dir / "reports"
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench-bootstrap.json").write_text(json.dumps(data, indent=2) + "\n")
    report = markdown(data)
    (out / "bench-bootstrap.md").write_text(report)
    print(report)
    print(f"wrote {out / 'bench-bootstrap.json'} and {out / 'bench-bootstrap.md'}")
    return EXIT_OK if data["results"] else EXIT_FAILED


def register(benches: Commands) -> None:
    bench = benches.add_parser(
        "bootstrap",
        help="a warehouse added later, bootstrapped from TPC-DI state, vs a raw bulk load",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = bench.add_mutually_exclusive_group()
    source.add_argument("--sf", type=float, help="generate a TPC-DI data set at this scale factor")
    source.add_argument("--data", help=f"TPC-DI files to run (default {DIGEN_SF3})")
    source.add_argument("--state", help="the work directory of a finished TPC-DI run (DuckDB)")
    bench.add_argument(
        "--targets", default="postgres,duckdb", help="new warehouses to bootstrap (comma-separated)"
    )
    bench.add_argument("--repeat", type=int, default=3, help="repetitions (default 3)")
    bench.add_argument(
        "--peer",
        choices=("duckdb", "postgres"),
        default="duckdb",
        help="the warehouse the bootstraps copy from: the TPC-DI run's DuckDB file (default), or "
        "a PostgreSQL database loaded from it beforehand (a configured service adding DuckDB)",
    )
    bench.add_argument(
        "--no-rows",
        dest="rows",
        action="store_false",
        help="do not also measure the rows path where the bootstrap takes the file path",
    )
    bench.add_argument("--out", help="report directory (default <state_dir>/reports)")
    bench.set_defaults(handler=_run)
