"""``streamdi bench tpcdi``: how fast the TPC-DI generator writes and the readers read.

1. Generation: for each scale factor, ``--repeat`` times, generate a staging area into a
   temporary directory (``--workdir``) in a fresh process and report seconds, records, records
   per second, CPU seconds, peak memory, bytes and the load average when it started; the median
   and the spread of the repeats (DIGen's measured rate on our 2 cores is about 190,000
   records/s; issue 22's target is 1,000,000 at SF 100). ``--check`` recounts the answer keys of
   the last repeat from its files (``tpcdi check``'s recount) and reports how many differ.
2. Reading: read every file of Batch1 (DIGen's SF=3 output when it is available, and the SF=3
   data this benchmark generated) into Arrow in a fresh process, and report seconds per file,
   the total and the process's peak memory (target: under 4 GiB). ``--no-reading`` skips it.

Writes JSON and a Markdown report (default ``<STREAMDI__STATE_DIR>/reports/bench-tpcdi.*``).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import shutil
import statistics
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


TARGET_RATE = 1_000_000


def _generate_here(sf: float, seed: int, out: str) -> dict[str, Any]:
    """Runs in a fresh process: generate at ``sf`` into ``out``; the report, the process's CPU
    seconds and its peak memory."""
    import os

    from tpcdi.generator import generate

    load = os.getloadavg()
    before = os.times()
    report = generate(Path(out), sf, seed=seed)
    after = os.times()
    result = report.as_dict()
    result["cpu_seconds"] = round(after.user - before.user + after.system - before.system, 2)
    result["peak_memory_mib"] = round(_peak_kib() / 1024, 1)
    result["load_average"] = [round(x, 2) for x in load]
    return result


def bench_generation(sf: float, seed: int, workdir: Path) -> dict[str, Any]:
    """Generate at ``sf`` into ``workdir`` in a fresh process (so its memory and imports are
    its own): the timing, volumes, CPU seconds, peak memory and the load average."""
    out = workdir / f"sf{sf:g}"
    shutil.rmtree(out, ignore_errors=True)
    started = time.perf_counter()
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        result = pool.submit(_generate_here, sf, seed, str(out)).result()
    result["process_seconds"] = round(time.perf_counter() - started, 3)
    result["bytes"] = _tree_bytes(out)
    files = result.pop("files")
    result["files"] = {n: c for n, c in files.items() if "FINWIRE" not in n}
    return result


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median and spread of repeated generations at one scale factor."""
    rates = sorted(r["records_per_second"] for r in runs)
    seconds = sorted(r["seconds"] for r in runs)
    return {
        "sf": runs[0]["sf"],
        "repeats": len(runs),
        "total_records": runs[0]["total_records"],
        "median_seconds": statistics.median(seconds),
        "median_records_per_second": round(statistics.median(rates)),
        "min_records_per_second": rates[0],
        "max_records_per_second": rates[-1],
        "load_averages": [r["load_average"][0] for r in runs],
        "peak_memory_mib": max(r["peak_memory_mib"] for r in runs),
        "bytes": runs[0]["bytes"],
        "met_target": statistics.median(rates) >= TARGET_RATE,
    }


def check_answer_keys(root: Path) -> dict[str, Any]:
    """Recount the answer keys of a generated staging area from its files (streaming)."""
    from tpcdi.verify import mismatches

    started = time.perf_counter()
    wrong = mismatches(root)
    return {
        "differing": len(wrong),
        "examples": [f"{k}: key {e}, files {a}" for k, (e, a) in sorted(wrong.items())[:5]],
        "seconds": round(time.perf_counter() - started, 1),
    }


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
        "Each run in a fresh process; *seconds* is `generate()`'s own time (the process adds its",
        "imports); *load* is the 1-minute load average when the run started.",
        "",
        "| SF | run | seconds | records | records/s | CPU s | peak MiB | MiB written | load |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for g in results["generation"]:
        lines.append(
            f"| {g['sf']:g} | {g.get('run', 1)} | {g['seconds']:.2f} | {g['total_records']:,} | "
            f"{g['records_per_second']:,} | {g.get('cpu_seconds', 0):.1f} | "
            f"{g.get('peak_memory_mib', 0):,.0f} | {g['bytes'] / 2**20:,.0f} | "
            f"{g.get('load_average', [0])[0]:.2f} |"
        )
    if results.get("summary"):
        lines += [
            "",
            f"| SF | repeats | median records/s | spread | x DIGen's 190k/s | >= {TARGET_RATE:,}/s"
            " | loads | answer keys |",
            "|---:|---:|---:|---:|---:|---|---|---|",
        ]
        for s in results["summary"]:
            check = s.get("check")
            keys = "not checked" if check is None else f"{check['differing']} differ"
            loads = ", ".join(f"{x:.1f}" for x in s["load_averages"])
            lines.append(
                f"| {s['sf']:g} | {s['repeats']} | {s['median_records_per_second']:,} | "
                f"{s['min_records_per_second']:,}-{s['max_records_per_second']:,} | "
                f"{s['median_records_per_second'] / DIGEN_RATE:.1f} | "
                f"{'yes' if s['met_target'] else 'no'} | {loads} | {keys} |"
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

    workdir = Path(tempfile.mkdtemp(prefix="bench-tpcdi-", dir=args.workdir))
    results: dict[str, Any] = {"generation": [], "summary": [], "reading": {}}
    try:
        for sf in args.sf:
            runs = []
            for run in range(1, args.repeat + 1):
                print(f"generating SF={sf:g} (run {run} of {args.repeat}) …", flush=True)
                result = bench_generation(sf, args.seed, workdir)
                result["run"] = run
                print(
                    f"  {result['total_records']:,} records in {result['seconds']} s: "
                    f"{result['records_per_second']:,} records/s "
                    f"(load average {result['load_average'][0]})",
                    flush=True,
                )
                runs.append(result)
            results["generation"] += runs
            summary = summarize(runs)
            if args.check:
                print(f"recounting the answer keys of SF={sf:g} …", flush=True)
                summary["check"] = check_answer_keys(workdir / f"sf{sf:g}")
            results["summary"].append(summary)
            if sf != 3 or args.no_reading:
                shutil.rmtree(workdir / f"sf{sf:g}", ignore_errors=True)
        digen = None if args.no_digen or args.no_reading else locate_digen(settings.tpcdi)
        if digen is not None:
            print(f"reading DIGen SF=3 Batch1 from {digen} …", flush=True)
            results["reading"]["DIGen SF=3"] = bench_reading(digen / "Batch1")
        generated = workdir / "sf3" / "Batch1"
        if generated.is_dir() and not args.no_reading:
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
    bench.add_argument("--repeat", type=int, default=1, help="generations per scale factor")
    bench.add_argument(
        "--check", action="store_true", help="recount the answer keys of each scale factor's data"
    )
    bench.add_argument(
        "--workdir", help="where the data is generated (default the system's temporary directory)"
    )
    bench.add_argument("--no-reading", action="store_true", help="generation only")
    bench.add_argument("--no-digen", action="store_true", help="skip reading DIGen's data")
    bench.add_argument("--out", help="report directory (default <state_dir>/reports)")
    bench.set_defaults(handler=_run)
