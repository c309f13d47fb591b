"""``python -m benchmarks.fuzz_api``: see :mod:`benchmarks.fuzz_api`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks.fuzz_api.phases import fuzz
from benchmarks.fuzz_api.report import markdown, write_report
from benchmarks.fuzz_api.target import TOKEN, fuzz_target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.fuzz_api",
        description="Fuzz a fresh `streamdi serve` with schemathesis (every route, stateful "
        "links) and report requests per route and status; exit 1 on any finding.",
    )
    parser.add_argument("--requests", type=int, default=20_000, help="request budget")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-seconds", type=float, default=None, help="stop after this long")
    parser.add_argument(
        "--out", type=Path, default=Path("reports/fuzz-api"), help="report path (.json, .md)"
    )
    args = parser.parse_args(argv)
    with fuzz_target() as target:
        report = fuzz(
            target.url,
            token=TOKEN,
            requests=args.requests,
            seed=args.seed,
            max_seconds=args.max_seconds,
            log=target.log,
        )
    json_path, md_path = write_report(report, args.out, budget=args.requests)
    print(markdown(report, budget=args.requests))
    print(f"reports: {json_path} {md_path}", file=sys.stderr)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
