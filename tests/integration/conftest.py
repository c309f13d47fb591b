"""Integration fixtures: a real embedded broker (Apache Kafka, its own process, its log in a
temporary state directory) kept alive for the module, and helpers to run ``streamdi`` as real
child processes."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from ingest.broker import EmbeddedKafka

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedKafka]:
    embedded = EmbeddedKafka(tmp_path_factory.mktemp("broker"))
    embedded.start()  # a broker that cannot start fails the test; it is never skipped
    try:
        yield embedded
    finally:
        embedded.stop()


def streamdi_env(broker: EmbeddedKafka, state: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("KAFKA__", "STAGING__", "INGEST__", "ENGINE__", "STREAMDI__"))
    }
    env.update(
        KAFKA__BOOTSTRAP_SERVERS=broker.bootstrap_servers,
        STREAMDI__STATE_DIR=str(state),
        STREAMDI__LOG_LEVEL="WARNING",
        PYTHONPATH=str(REPO),
    )
    env.update(extra)
    return env


def start_streamdi(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    handle = log.open("ab")
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "cli.main", "-q", *args],
            cwd=REPO,
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
    finally:
        handle.close()


def run_streamdi(args: list[str], env: dict[str, str], log: Path, timeout: float = 180) -> int:
    process = start_streamdi(args, env, log)
    try:
        return process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise AssertionError(f"streamdi {args} did not finish in {timeout} s; see {log}") from None


def staged_watermark(path: Path) -> int:
    """The last batch id committed to the staging file at ``path`` (0: no file, no batch)."""
    if not path.exists():
        return 0
    con = duckdb.connect(str(path), read_only=True)
    try:
        return int(
            con.execute("SELECT coalesce(max(batch_id), 0) FROM streamdi.batches").fetchall()[0][0]
        )
    finally:
        con.close()
