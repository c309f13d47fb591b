"""A child process for the file path's kill tests: one migration round from the shop's staging
file into two DuckDB files, ``old`` (the peer) and ``new`` (bootstrapped by a copy of ``old``'s
file), killing itself with SIGKILL the first time ``new`` reaches ``--crash-at PHASE``.
``--chunk BYTES`` makes the file copy's steps smaller (its hook runs after the first one), so a
kill at ``bootstrap-file-copy`` lands in the middle of the copy. Prints what the round said of
``new``'s bootstrap as JSON.

    python -m tests.integration.migration.bootstrap_file_run STAGING DIR [--crash-at PHASE]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path

import warehouse.duckdb
from migration.migrator import Migrator
from migration.schema import WarehouseLayout
from migration.targets.base import BaseTarget
from migration.targets.duckdb_file import DuckDBTarget
from staging.handoff import StagedDeltas
from staging.store import StagingStore
from streamdi.settings import MigrationSettings
from tests.migration_shop import shop_dataflow


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("staging")
    parser.add_argument("dir")
    parser.add_argument("--crash-at")
    parser.add_argument("--chunk", type=int)
    args = parser.parse_args(argv)
    if args.chunk:
        warehouse.duckdb.COPY_CHUNK = args.chunk

    def hook(phase: str, target: str) -> None:
        if phase == args.crash_at and target == "new":
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)

    flow = shop_dataflow().build()
    store = StagingStore(Path(args.staging), flow)
    layout = WarehouseLayout(flow)
    targets: dict[str, BaseTarget] = {
        name: DuckDBTarget(layout, Path(args.dir) / f"{name}.duckdb") for name in ("old", "new")
    }
    settings = MigrationSettings(targets="duckdb", max_batches_per_load=4, release_ms=0)
    migrator = Migrator(StagedDeltas(store), targets, settings, hook=hook)
    try:
        report = migrator.migrate(merge="force")
        boot = report.targets["new"].bootstrap
        print(json.dumps(None if boot is None else boot.as_dict()))
    finally:
        migrator.close()
        store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
