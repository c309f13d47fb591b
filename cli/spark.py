"""``streamdi spark-cluster``: a standalone Spark cluster on this machine (a master and N
workers as native processes, :mod:`etl_dataflows.executors.spark.cluster`) until Ctrl-C, for
``--spark-master`` / ``SPARK__MASTER`` of the TPC-DI run and the ``spark`` executor."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from cli.commands import EXIT_OK, Commands
from streamdi.settings import StreamdiSettings


def _cluster(args: argparse.Namespace, settings: StreamdiSettings) -> int:
    from etl_dataflows.executors.spark.cluster import StandaloneCluster

    root = Path(args.dir) if args.dir else settings.streamdi.state_dir / "spark-cluster"
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    cluster = StandaloneCluster(root, workers=args.workers, cores=args.cores, memory=args.memory)
    with cluster:
        print(f"master  {cluster.url}  (web UI {cluster.ui})")
        for i, ui in enumerate(cluster.worker_uis(), start=1):
            print(f"worker {i} {ui}  ({args.cores} cores, {args.memory} for executors)")
        print(f"logs    {root}; Ctrl-C stops the cluster", flush=True)
        stop.wait()
        print("stopping the cluster", file=sys.stderr)
    return EXIT_OK


def register(commands: Commands) -> None:
    cluster = commands.add_parser(
        "spark-cluster",
        help="run a standalone Spark cluster here (a master and workers) until Ctrl-C",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    cluster.add_argument("--workers", type=int, default=2, help="workers (default 2)")
    cluster.add_argument("--cores", type=int, default=1, help="cores per worker (default 1)")
    cluster.add_argument("--memory", default="2g", help="executor memory per worker (default 2g)")
    cluster.add_argument("--dir", help="logs and work dirs (default <state_dir>/spark-cluster)")
    cluster.set_defaults(handler=_cluster)
