"""``streamdi tpcdi``: generate a TPC-DI staging area, and check one.

* ``streamdi tpcdi generate --sf N --out DIR [--seed S] [--days D]`` writes Batch1..Batch3 and
  the answer keys (DIGen's layout), or with ``--days D`` a daily feed of D incremental batches
  (Batch2..Batch<D+1>), with a progress bar, and prints what it wrote.
* ``streamdi tpcdi check DIR`` reads every file, then reports rejected lines, answer keys that
  differ from a recount of the files, and breaks of the data rules; exit code 1 if any.
* ``streamdi tpcdi audit`` runs the automated audit against a warehouse (:mod:`cli.tpcdi_audit`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cli.commands import EXIT_FAILED, EXIT_OK, EXIT_USAGE, Commands, write_json
from streamdi.settings import StreamdiSettings


def _generate(args: argparse.Namespace, settings: StreamdiSettings) -> int:
    from tpcdi.generator import generate

    out = Path(args.out)
    if out.exists() and any(out.iterdir()) and not args.force:
        print(f"streamdi tpcdi generate: {out} is not empty (use --force)", file=sys.stderr)
        return EXIT_USAGE
    if not args.sf > 0:
        print(f"streamdi tpcdi generate: --sf must be > 0, got {args.sf}", file=sys.stderr)
        return EXIT_USAGE
    from tpcdi.generator.scale import MAX_DAYS

    if not 1 <= args.days <= MAX_DAYS:
        print(f"streamdi tpcdi generate: --days must be within 1..{MAX_DAYS}", file=sys.stderr)
        return EXIT_USAGE
    report = generate(out, args.sf, seed=args.seed, days=args.days, progress=not args.no_progress)
    summary = report.as_dict()
    if args.json:
        write_json(summary, args.json)
    if args.json != "-":
        print(
            f"wrote {summary['total_records']:,} records to {out} in {summary['seconds']} s "
            f"({summary['records_per_second']:,} records/s); per batch: "
            + _per_batch(summary["batches"])  # type: ignore[arg-type]
        )
    return EXIT_OK


def _per_batch(batches: dict[int, int]) -> str:
    """``Batch1 n, Batch2 n, ...``; a long feed shows its first and last days only."""
    items = [f"Batch{b} {n:,}" for b, n in batches.items()]
    if len(items) > 6:
        items = [*items[:3], f"... ({len(items) - 5} more)", *items[-2:]]
    return ", ".join(items)


def _check(args: argparse.Namespace, settings: StreamdiSettings) -> int:
    from tpcdi.exceptions import SourceNotFound
    from tpcdi.readers import read_batch, staging_batches
    from tpcdi.verify import mismatches, rule_violations

    root = Path(args.directory)
    problems = 0
    try:
        batches = staging_batches(root)
    except SourceNotFound as exc:
        print(f"streamdi tpcdi check: {exc}", file=sys.stderr)
        return EXIT_FAILED
    for batch in batches:
        data = read_batch(root / f"Batch{batch}", batch=batch)
        rows = sum(r.num_rows for r in data.files.values())
        rejects = data.rejects
        problems += rejects.num_rows
        print(f"Batch{batch}: {rows:,} rows read, {rejects.num_rows} rejected lines")
        for reject in rejects.slice(0, args.show).to_pylist():
            print(f"  {reject['file']}:{reject['line']}: {reject['reason']}")
    wrong = mismatches(root)
    problems += len(wrong)
    print(f"answer keys: {len(wrong)} differ from a recount of the files")
    for (dataset, batch, attribute), (expected, actual) in sorted(wrong.items())[: args.show]:
        print(f"  {dataset} batch {batch} {attribute}: key {expected}, files {actual}")
    broken = rule_violations(root)
    problems += len(broken)
    print(f"data rules: {len(broken)} broken")
    for rule, count in broken.items():
        print(f"  {rule}: {count}")
    return EXIT_FAILED if problems else EXIT_OK


def register(commands: Commands) -> None:
    tpcdi = commands.add_parser(
        "tpcdi", help="the TPC-DI workload: run (the main job), stream, audit, generate, check"
    )
    sub = tpcdi.add_subparsers(dest="tpcdi_command", metavar="SUBCOMMAND")
    gen = sub.add_parser(
        "generate",
        help="write a TPC-DI staging area (Batch1..3 and answer keys) at a scale factor",
        description="Generate DIGen's files and answer keys at any scale factor (fractions "
        "allowed), deterministically by seed; --days N writes a daily feed of N incremental "
        "batches instead of DIGen's two.",
    )
    gen.add_argument("--sf", type=float, required=True, help="scale factor (DIGen's: 3, 5, 10…)")
    gen.add_argument("--out", required=True, help="output directory (the staging area)")
    gen.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    gen.add_argument(
        "--days",
        type=int,
        default=2,
        help="incremental batches, one day each (default 2: DIGen's Batch2 and Batch3)",
    )
    gen.add_argument("--force", action="store_true", help="write into a non-empty directory")
    gen.add_argument("--no-progress", action="store_true", help="no progress bar")
    gen.add_argument("--json", metavar="PATH", help="also write the summary as JSON ('-': stdout)")
    gen.set_defaults(handler=_generate)
    check = sub.add_parser(
        "check",
        help="read a staging area; report rejects, answer-key mismatches and data-rule breaks",
    )
    check.add_argument("directory", help="the staging area (holding Batch1..BatchN)")
    check.add_argument("--show", type=int, default=10, help="examples to print per kind")
    check.set_defaults(handler=_check)
    from cli.tpcdi_run import register as register_run

    register_run(sub)

    from cli.tpcdi_audit import register_audit

    register_audit(sub)
