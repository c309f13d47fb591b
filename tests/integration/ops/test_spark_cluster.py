"""The compose stack's Spark master and worker, run for real without Docker: their entrypoint and
commands from docker-compose.yml against this environment's pyspark installation (the image's
SPARK_HOME), with the master's host and the ports rewritten (tests/integration/compose/native.py).
Their compose healthchecks pass, the worker registers, and a job with a Python function runs on
the worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.compose.native import NativeStack

pytestmark = pytest.mark.spark


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """The compose ``spark-master`` and ``spark-worker`` services, natively, each healthy."""
    stack = NativeStack(tmp_path / "compose")
    try:
        stack.up("spark-worker")  # depends_on: the master first, healthy
        yield f"spark://{stack.address('spark-master', 7077)}", stack.url("spark-master", 8080)
    finally:
        stack.down()


def test_the_compose_spark_cluster_runs_python_tasks(
    cluster: tuple[str, str], tmp_path: Path
) -> None:
    master_url, web = cluster
    deadline = time.monotonic() + 60
    while True:
        with urllib.request.urlopen(f"{web}/json/", timeout=5) as response:
            state = json.loads(response.read())
        if state["status"] == "ALIVE" and state["aliveworkers"] == 1:
            break
        assert time.monotonic() < deadline, state
        time.sleep(0.5)
    job = (
        "import sys\n"
        "from pyspark.sql import SparkSession\n"
        f"s = SparkSession.builder.master({master_url!r}).appName('compose-check')"
        ".config('spark.driver.host', '127.0.0.1').config('spark.executor.memory', '512m')"
        ".config('spark.ui.enabled', 'false').getOrCreate()\n"
        "import streamdi\n"
        "got = s.sparkContext.parallelize(range(100), 4)"
        ".map(lambda x: (x * 2, __import__('streamdi').__version__)).collect()\n"
        "assert sum(v for v, _ in got) == 9900, got\n"
        "assert {n for _, n in got} == {streamdi.__version__}\n"
        "print('ok', len(got))\n"
        "s.stop()\n"
    )
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    done = subprocess.run(
        [sys.executable, "-c", job],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and "ok 100" in done.stdout, done.stderr[-3000:]


ENGINE_JOB = """
import sys
from etl_dataflows.executors.spark import SparkConfig, SparkExecutor, configure_spark, spark_session
from etl_dataflows.testing import WorkloadSpec, assert_same_results, ledger_workload, run_in_memory
from etl_dataflows.testing.harness import RunResult, TestingSink

master = sys.argv[1]
configure_spark(SparkConfig(master=master, partitions=2, min_transactions=0, max_supersteps=4))
session = spark_session()
assert session.sparkContext.master == master, session.sparkContext.master
for placement, seed in (("spark", 3), ("supersteps", 4)):
    spec = WorkloadSpec(keys=400, batch_size=600, batches=2, cross_key_ratio=0.3, seed=seed)
    workload = ledger_workload(spec)
    oracle = run_in_memory(workload.flow, workload.batches, state=workload.state)
    runner = SparkExecutor(workload.flow, workload.state, placement=placement)
    sink, results = TestingSink(), []
    for batch in workload.batches:
        result = runner.run_batch(batch)
        sink.collect(result)
        results.append(result)
    got = RunResult("spark", results, sink, runner.state_image())
    runner.close()
    decisions = [d for r in results for d in r.decisions]
    assert all(d.figures["passes"] >= 1 and d.figures["spark_transactions"] > 0 for d in decisions), decisions
    assert_same_results(oracle, got)
    print("ok", placement, sum(d.figures["spark_transactions"] for d in decisions))
"""


def test_the_spark_executor_runs_on_the_compose_cluster(
    cluster: tuple[str, str], tmp_path: Path
) -> None:
    """Issue 10: ``spark://`` masters work: the engine's ``spark`` executor sends its passes to
    the compose stack's master and worker and ends with the serial oracle's results."""
    master_url, _ = cluster
    env = dict(
        os.environ,
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_SUBMIT_ARGS="--executor-memory 512m pyspark-shell",
        PYTHONPATH=str(Path(__file__).resolve().parents[3]),
    )
    done = subprocess.run(
        [sys.executable, "-c", ENGINE_JOB, master_url],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "ok spark" in done.stdout and "ok supersteps" in done.stdout, done.stdout
