"""``streamdi bench tpcdi``: how fast the TPC-DI generator writes and the readers read.

1. Generation: for each scale factor, generate a staging area into a temporary directory and
   report seconds, records, records per second and bytes (DIGen's measured rate on our 2 cores is
   about 190,000 records/s: the target to beat).
2. Reading: read every file of Batch1 (DIGen's SF=3 output when it is available, and the SF=3
   data this benchmark generated) into Arrow in a fresh process, and report seconds per file,
   the total and the process's peak memory (target: under 4 GiB).

Writes JSON and a Markdown report (default ``<STREAMDI__STATE_DIR>/reports/bench-tpcdi.*``).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import shutil
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from cli.commands import EXIT_OK, Commands
from streamdi.settings import StreamdiSettings

DIGEN_RATE = 190_000


def _tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def bench_generation(sf: float, seed: int, workdir: Path) -> dict[str, Any]:
    """Generate at ``sf`` into ``workdir`` (removed afterwards); the timing and volumes."""
    from tpcdi.generator import generate

    out = workdir / f"sf{sf:g}"
    report = generate(out, sf, seed=seed)
    result = report.as_dict()
    result["bytes"] = _tree_bytes(out)
    result.pop("files")
    result["files"] = {
        f"Batch{b}/{n}": c for (b, n), c in report.records.items() if "FINWIRE" not in n
    }
    return result


def _read_batch1(directory: str) -> dict[str, Any]:
    """Runs in a fresh process: read each Batch1 file, time it, report peak memory."""
    from tpcdi.readers import read_batch_finwire, read_file
    from tpcdi.readers.registry import SOURCE_FILES

    folder = Path(directory)
    files: dict[str, dict[str, float | int]] = {}
    started = time.perf_counter()
    for name, spec in SOURCE_FILES.items():
        if 1 not in spec.batches or name == "audit":
            continue
        t0 = time.perf_counter()
        if name == "FINWIRE":
            fw = read_batch_finwire(folder)
            rows, rejects = sum(t.num_rows for t in fw.tables.values()), fw.rejects.num_rows
            size = sum(p.stat().st_size for p in folder.glob("FINWIRE????Q?"))
        else:
            result = read_file(folder / name, batch=1)
            rows, rejects = result.num_rows, result.rejects.num_rows
            size = (folder / name).stat().st_size
        files[name] = {
            "seconds": round(time.perf_counter() - t0, 3),
            "rows": rows,
            "rejects": rejects,
            "megabytes": round(size / 2**20, 1),
        }
    total = time.perf_counter() - started
    return {
        "files": files,
        "seconds": round(total, 3),
        "peak_memory_mib": round(_peak_kib() / 1024, 1),
    }


def _peak_kib() -> int:
    """This process's peak resident memory. ``VmHWM`` belongs to the process image; ru_maxrss
    would include what the parent had resident when it forked this process."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:  # pragma: no cover - not Linux
        pass
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def bench_reading(batch1: Path) -> dict[str, Any]:
    """Read ``batch1`` in a new process (so its peak memory is the readers' alone)."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_read_batch1, str(batch1)).result()


def render(results: dict[str, Any]) -> str:
    """The Markdown report."""
    lines = [
        "# TPC-DI generator and readers",
        "",
        "## Generation",
        "",
        "| SF | seconds | records | records/s | x DIGen's 190k/s | MiB |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for g in results["generation"]:
        lines.append(
            f"| {g['sf']:g} | {g['seconds']:.2f} | {g['total_records']:,} | "
            f"{g['records_per_second']:,} | {g['records_per_second'] / DIGEN_RATE:.1f} | "
            f"{g['bytes'] / 2**20:,.0f} |"
        )
    for label, reading in results["reading"].items():
        lines += [
            "",
            f"## Reading Batch1 into Arrow: {label}",
            "",
            f"Total {reading['seconds']:.2f} s, peak memory {reading['peak_memory_mib']:,} MiB.",
            "",
            "| file | MiB | rows | rejects | seconds | rows/s |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for name, f in reading["files"].items():
            rate = f["rows"] / f["seconds"] if f["seconds"] else 0
            lines.append(
                f"| {name} | {f['megabytes']} | {f['rows']:,} | {f['rejects']} | "
                f"{f['seconds']:.3f} | {rate:,.0f} |"
            )
    return "\n".join(lines) + "\n"


def _run(args: argparse.Namespace, settings: StreamdiSettings) -> int:
    from tpcdi.datasets import locate_digen

    workdir = Path(tempfile.mkdtemp(prefix="bench-tpcdi-"))
    results: dict[str, Any] = {"generation": [], "reading": {}}
    try:
        for sf in args.sf:
            print(f"generating SF={sf:g} …", flush=True)
            results["generation"].append(bench_generation(sf, args.seed, workdir))
            if sf != 3:
                shutil.rmtree(workdir / f"sf{sf:g}", ignore_errors=True)
        digen = None if args.no_digen else locate_digen(settings.tpcdi)
        if digen is not None:
            print(f"reading DIGen SF=3 Batch1 from {digen} …", flush=True)
            results["reading"]["DIGen SF=3"] = bench_reading(digen / "Batch1")
        generated = workdir / "sf3" / "Batch1"
        if generated.is_dir():
            print("reading generated SF=3 Batch1 …", flush=True)
            results["reading"]["generated SF=3"] = bench_reading(generated)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    out = Path(args.out) if args.out else settings.streamdi.state_dir / "reports"
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench-tpcdi.json").write_text(json.dumps(results, indent=2) + "\n")
    report = render(results)
    (out / "bench-tpcdi.md").write_text(report)
    print(report)
    print(f"wrote {out / 'bench-tpcdi.json'} and {out / 'bench-tpcdi.md'}")
    return EXIT_OK


def register(benches: Commands) -> None:
    bench = benches.add_parser(
        "tpcdi",
        help="TPC-DI generator speed (records/s) and reader speed and memory",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    bench.add_argument("--sf", type=float, nargs="+", default=[3.0, 10.0], help="scale factors")
    bench.add_argument("--seed", type=int, default=0)
    bench.add_argument("--no-digen", action="store_true", help="skip reading DIGen's data")
    bench.add_argument("--out", help="report directory (default <state_dir>/reports)")
    bench.set_defaults(handler=_run)
