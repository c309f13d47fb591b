"""The crash points of ``--crash-at``: parsed strictly, routed to the hook of the protocol they
name, and a reached point kills the process with SIGKILL (a real child process, killed for real)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

from runtime.faults import CRASH_PHASES, CrashAt, parse_crash_at


def test_points_parse_strictly() -> None:
    assert parse_crash_at("commit-ledger:12") == ("commit-ledger", 12)
    assert parse_crash_at("migrate-committed-postgres:3") == ("migrate-committed-postgres", 3)
    for bad in ("commit", "nowhere:3", "commit-ledger:x", "migrate-committed-mysql:1", ""):
        with pytest.raises(ValueError, match="POINT:N"):
            parse_crash_at(bad)
    assert len(set(CRASH_PHASES)) == len(CRASH_PHASES)


def test_each_point_arms_only_its_own_hook() -> None:
    commit = CrashAt("commit-progress", 5)
    assert commit.commit_hook(1, 4) is None and commit.commit_hook(5, 7) is not None
    assert commit.collector_hook("txns") is None and commit.checkpoint_hook() is None
    assert commit.migration_hook() is None
    collector = CrashAt("collect-flushed", 9)
    assert collector.collector_hook("txns") is not None and collector.commit_hook(9, 9) is None
    migrate = CrashAt("migrate-merge-duckdb", 2)
    hook = migrate.migration_hook()
    assert hook is not None
    hook("merge", "postgres")  # another target: nothing
    hook("committed", "duckdb")  # another phase: nothing
    hook("merge", "duckdb")  # the first time of two: nothing
    assert CrashAt("commit", 3).phase == "commit-ledger"  # the older name


def _dies(body: str) -> int:
    code = textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", code], timeout=60).returncode


def test_a_reached_point_is_a_kill_9() -> None:
    assert (
        _dies(
            """
            from runtime.faults import CrashAt
            hook = CrashAt("checkpoint-written", 2).checkpoint_hook()
            hook("written")  # the first checkpoint lives
            hook("tables")
            print("alive after the first checkpoint", flush=True)
            hook("written")  # the second dies here
            raise SystemExit(0)
            """
        )
        == -signal.SIGKILL
    )
    assert (
        _dies(
            """
            from runtime.faults import CrashAt
            hook = CrashAt("migrate-committed-postgres", 1).migration_hook()
            hook("committed", "postgres")
            raise SystemExit(0)
            """
        )
        == -signal.SIGKILL
    )
