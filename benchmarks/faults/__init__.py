"""``streamdi bench faults``: exactly once, proven under faults.

A campaign runs a workload twice on this machine: once without faults (the reference) and once
under a seeded schedule of real faults on real processes — ``kill -9`` of ``streamdi serve``
at random moments and at the named points of every commit protocol, of ``streamdi migrate``,
of ``streamdi upgrade reprocess``, of the embedded Kafka and of PostgreSQL; PostgreSQL stopped
or frozen for a while; the disk under staging full — restarting what a supervisor would. Then
every relation of staging and of both warehouses is compared row for row with the reference's
(dead letters and aborts included). It writes JSON, Markdown and a PNG timeline, and passes only
with no difference and nothing else wrong.

Workloads (``--workload``): ``ledger``, a long ledger stream pushed over HTTP, and ``tpcdi``,
the TPC-DI incremental updates into both warehouses with each phase's bookkeeping and the audit
(compared too) done by ``streamdi tpcdi phase`` between serve's runs.

Modules: :mod:`~benchmarks.faults.kinds` (fault kinds, the schedule),
:mod:`~benchmarks.faults.ledger` (the ledger workload, the pushing client),
:mod:`~benchmarks.faults.tpcdi_workload` and :mod:`~benchmarks.faults.tpcdi_run` (the TPC-DI
workload and its run),
:mod:`~benchmarks.faults.processes` (the processes), :mod:`~benchmarks.faults.supervisor`
(restarts), :mod:`~benchmarks.faults.injector` (each fault), :mod:`~benchmarks.faults.run`
(one run), :mod:`~benchmarks.faults.compare` (row for row),
:mod:`~benchmarks.faults.campaign` (both runs and the verdict),
:mod:`~benchmarks.faults.report` (JSON, Markdown, PNG).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from cli.commands import EXIT_FAILED, EXIT_OK, Commands
from streamdi.errors import ConfigurationError
from streamdi.settings import StreamdiSettings


def _kinds(text: str | None) -> Any:
    from benchmarks.faults.kinds import FAULT_KINDS

    if not text:
        return FAULT_KINDS
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = [k for k in kinds if k not in FAULT_KINDS]
    if unknown:
        raise ConfigurationError([("--kinds", f"fault kinds among {', '.join(FAULT_KINDS)}")])
    return kinds


def _run(args: argparse.Namespace, settings: StreamdiSettings) -> int:
    from benchmarks.faults.campaign import CampaignOptions, run_campaign
    from benchmarks.faults.report import render, write

    if not args.verbose:
        logging.getLogger("kafka").setLevel(logging.WARNING)
    given = {
        "sf": args.sf,
        "seed": args.seed,
        "faults": args.faults,
        "offers": args.offers,
        "offer_size": args.offer_size,
        "rate": args.rate,
        "kinds": _kinds(args.kinds),
        "workdir": Path(args.workdir) if args.workdir else None,
        "keep": args.keep,
        "reuse_base": args.reuse_base or None,
    }
    if args.reprocess is not None:
        given["reprocess"] = args.reprocess
    given = {k: v for k, v in given.items() if v is not None}
    if args.workload == "ledger" and args.sf is not None:
        raise ConfigurationError([("--sf", "the scale factor of the tpcdi workload only")])
    make = CampaignOptions.quick_defaults if args.quick else CampaignOptions.defaults
    options = make(args.workload, **given)
    result = run_campaign(options)
    out = Path(args.out) if args.out else settings.streamdi.state_dir / "reports"
    paths = write(result, out)
    print(render(result.to_json()))
    print(f"wrote {paths['json']}, {paths['md']} and {paths['png']}")
    return EXIT_OK if result.passed else EXIT_FAILED


def register(benches: Commands) -> None:
    bench = benches.add_parser(
        "faults",
        help="exactly once under faults: a seeded campaign of kill -9s, outages, stalls and "
        "full disks against a fault-free run of the same input, compared row for row",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    bench.add_argument(
        "--workload",
        choices=("ledger", "tpcdi"),
        default="ledger",
        help="ledger: a long ledger stream pushed over HTTP (default); tpcdi: the TPC-DI "
        "incremental updates (Batch2, Batch3) into both warehouses, with the audit compared",
    )
    bench.add_argument("--quick", action="store_true", help="12 faults over 150 offers (CI)")
    bench.add_argument(
        "--sf", type=float, help="tpcdi: the data set's scale factor (default 1; quick 0.1)"
    )
    bench.add_argument("--seed", type=int, help="input and schedule seed (default 1)")
    bench.add_argument("--faults", type=int, help="faults to inject (default 100; quick 12)")
    bench.add_argument("--offers", type=int, help="HTTP offers (default 1,000; quick 150)")
    bench.add_argument(
        "--offer-size", type=int, help="events per offer (default 100; tpcdi 20, quick 9)"
    )
    bench.add_argument("--rate", type=float, help="offers per second at most (default 8)")
    bench.add_argument("--kinds", help="comma-separated fault kinds (default: all)")
    bench.add_argument(
        "--reprocess",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run (and kill once) an upgrade reprocess half-way (default: on; quick: off)",
    )
    bench.add_argument("--workdir", help="run folders here and keep them (default: a temp dir)")
    bench.add_argument("--keep", action="store_true", help="keep the temp dir for inspection")
    bench.add_argument(
        "--reuse-base",
        action="store_true",
        help="tpcdi, with --workdir: start from the historical load an earlier campaign with the "
        "same --sf and --seed left there",
    )
    bench.add_argument("--out", help="report directory (default <state_dir>/reports)")
    bench.set_defaults(handler=_run)
