"""The TPC-DI historical load on a real standalone Spark cluster: a master and two workers as
native processes (as the compose stack runs them), the driver held to 1 GiB. The same data set
is loaded once in local mode and once on the cluster (each a child process: one Spark session per
process), and then:

* the two warehouses are identical, table by table (order-free fingerprints of every row), and
  so is the engine's seed;
* the Spark event log of the cluster run shows finished tasks on both workers' executors, and
  none in the driver.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from etl_dataflows.executors.spark.cluster import (
    StandaloneCluster,
    event_log_conf,
    event_logs,
    tasks_by_worker,
)
from tests.integration.conftest import REPO
from tpcdi.generator import generate
from tpcdi.warehouse.fingerprint import differences, warehouse_fingerprint

pytestmark = [pytest.mark.spark]

SF = 0.1


def load(data: Path, out: Path, master: str, **conf: str) -> dict[str, object]:
    """The historical load of ``data`` on ``master`` in a child process, into ``out/dw.duckdb``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK__", "STREAMDI__"))}
    env.update(
        SPARK__MASTER=master,
        SPARK__DRIVER_MEMORY="1g",
        SPARK__CONF=json.dumps(conf),
        STREAMDI__STATE_DIR=str(out / "state"),
        STREAMDI__LOG_LEVEL="WARNING",
        PYTHONPATH=str(REPO),
    )
    out.mkdir(parents=True)
    done = subprocess.run(
        [sys.executable, "-m", "tests.integration.tpcdi.historical_child", str(data),
         str(out / "dw.duckdb"), str(out / "work")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    report: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def test_the_cluster_loads_the_same_warehouse_with_tasks_on_both_workers(tmp_path: Path) -> None:
    data = tmp_path / "data"
    generate(data, SF, seed=3)
    events = tmp_path / "events"
    events.mkdir()
    cluster = StandaloneCluster(tmp_path / "cluster", workers=2, cores=1, memory="1g")
    try:
        # the cluster's daemons boot while the local-mode load runs (they run no job meanwhile)
        with ThreadPoolExecutor(1) as pool:
            booting = pool.submit(cluster.start)
            try:
                local = load(data, tmp_path / "local", "local[2]")
            finally:
                booting.result()
        assert len(cluster.alive_workers()) == 2
        remote = load(
            data,
            tmp_path / "remote",
            cluster.url,
            **event_log_conf(events),
            **{"spark.executor.memory": "1g"},
        )
    finally:
        cluster.stop()
    assert remote["counts"] == local["counts"]
    counts = remote["counts"]
    assert isinstance(counts, dict) and counts["dimtrade"] > 0 and counts["factmarkethistory"] > 0
    for schema in ("tpcdi", "seed"):
        left = warehouse_fingerprint(str(tmp_path / "local" / "dw.duckdb"), schema)
        right = warehouse_fingerprint(str(tmp_path / "remote" / "dw.duckdb"), schema)
        assert len(left) >= (20 if schema == "tpcdi" else 10)
        assert differences(left, right) == {}, schema
    [log] = event_logs(events).values()
    placement = tasks_by_worker(log)
    workers = {f"127.0.0.1:{port}" for port in cluster.worker_ui_ports}
    assert set(placement.by_worker) == workers, placement
    assert all(placement.by_worker[w] > 0 for w in workers), placement
    assert placement.total > 20
