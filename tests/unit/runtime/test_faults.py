"""The crash points of ``--crash-at``: parsed strictly, routed to the hook of the protocol they
name, and a reached point kills the process with SIGKILL (a real child process, killed for real)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from runtime import faults
from runtime.faults import CRASH_PHASES, CrashAt, CrashAtFile, parse_crash_at, write_armed


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


def test_a_file_arms_disarms_and_rearms_a_running_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--crash-at @FILE``: the hooks handed out at the start follow the file as it is replaced
    (the campaign arms a live serve this way), and a count starts again at each arming."""
    kills: list[str] = []
    monkeypatch.setattr(faults, "kill_self", lambda: kills.append("killed"))
    path = tmp_path / "crash-at"
    armed = CrashAtFile(path)
    collector, checkpoint = armed.collector_hook("txns"), armed.checkpoint_hook()
    migration = armed.migration_hook()
    assert collector is not None and checkpoint is not None and migration is not None
    collector("flushed", 4)  # no file: not armed
    assert armed.armed() is None and armed.commit_hook(1, 9) is None
    write_armed(path, "collect-flushed:5")
    collector("flushed", 4)
    collector("sent", 5)
    assert not kills
    collector("flushed", 5)
    assert kills == ["killed"]
    write_armed(path, "checkpoint-written:2")
    checkpoint("written")
    write_armed(path, "checkpoint-written:2")  # armed again: counted from here
    checkpoint("written")
    assert len(kills) == 1
    checkpoint("written")
    assert len(kills) == 2
    write_armed(path, "commit-state:7")
    assert armed.commit_hook(1, 6) is None and armed.commit_hook(7, 8) is not None
    write_armed(path, None)  # disarmed
    collector("flushed", 5)
    migration("merge", "duckdb")
    assert armed.armed() is None and len(kills) == 2
    path.write_text("nowhere:1")  # what does not parse disarms
    assert armed.armed() is None


def test_a_point_armed_from_a_file_is_a_kill_9(tmp_path: Path) -> None:
    path = tmp_path / "crash-at"
    write_armed(path, "poll:3")
    assert (
        _dies(
            f"""
            from pathlib import Path
            from runtime.faults import CrashAtFile
            armed = CrashAtFile(Path({str(path)!r}))
            armed.before_execute(2)
            armed.before_execute(3)
            raise SystemExit(0)
            """
        )
        == -signal.SIGKILL
    )
