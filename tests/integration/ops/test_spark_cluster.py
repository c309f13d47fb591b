"""The compose stack's Spark master and worker, run for real without Docker: their entrypoint and
commands from docker-compose.yml against this environment's pyspark installation (the image's
SPARK_HOME), with the master's host and the ports rewritten. Their compose healthchecks pass, the
worker registers, and a job with a Python function runs on the worker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingest.broker import free_port
from streamdi.probe import probe
from tests.compose_file import command, load_compose

pytestmark = pytest.mark.spark


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def rewritten(args: list[str], ports: dict[str, str]) -> list[str]:
    out = []
    for arg in args:
        arg = arg.replace("spark://spark-master:", "spark://127.0.0.1:")
        for old, new in ports.items():
            arg = arg.replace(f":{old}", f":{new}") if arg.startswith("spark://") else arg
        out.append(ports.get(arg, "127.0.0.1" if arg == "spark-master" else arg))
    return out


def start(entrypoint: list[str], args: list[str], log: Path, work: Path) -> subprocess.Popen[bytes]:
    assert entrypoint[-1] == "spark-class"
    env = dict(os.environ, SPARK_HOME=str(spark_home()), SPARK_LOCAL_IP="127.0.0.1")
    with log.open("ab") as out:
        return subprocess.Popen(
            [str(spark_home() / "bin" / "spark-class"), *args],
            env=env,
            cwd=work,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # spark-class runs java as a child: stop the whole group
        )


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    else:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def healthy(test: list[str], ports: dict[str, str], timeout: float = 120) -> None:
    assert test[1:4] == ["python", "-m", "streamdi.probe"], test
    urls = list(test[4:])
    for old, new in ports.items():
        urls = [u.replace(f"127.0.0.1:{old}", f"127.0.0.1:{new}") for u in urls]
    deadline = time.monotonic() + timeout
    while True:
        problems = [p for p in (probe(u) for u in urls) if p is not None]
        if not problems:
            return
        assert time.monotonic() < deadline, problems
        time.sleep(0.5)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[str, str]]:
    services = load_compose()["services"]
    master, worker = services["spark-master"], services["spark-worker"]
    ports = {"7077": str(free_port()), "8080": str(free_port()), "8081": str(free_port())}
    processes = []
    try:
        processes.append(
            start(
                master["entrypoint"],
                rewritten(command(master), ports),
                tmp_path / "master.log",
                tmp_path,
            )
        )
        healthy(master["healthcheck"]["test"], ports)
        worker_args = rewritten(command(worker), ports)
        work_dir = worker_args.index("--work-dir") + 1
        worker_args[work_dir] = str(tmp_path / "spark-work")
        processes.append(
            start(worker["entrypoint"], worker_args, tmp_path / "worker.log", tmp_path)
        )
        healthy(worker["healthcheck"]["test"], ports)
        yield f"spark://127.0.0.1:{ports['7077']}", f"http://127.0.0.1:{ports['8080']}"
    finally:
        for process in reversed(processes):
            stop(process)


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
