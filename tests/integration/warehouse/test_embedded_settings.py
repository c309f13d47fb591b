"""The embedded PostgreSQL server's parameters (``warehouse.embedded``): the defaults and
``POSTGRES__SERVER_SETTINGS`` reach a real server, one that needs a restart gets it, the server
still stops with the last process using it, and a wrong name or value fails at start naming it.

Each case runs in a child process so that the wheel stops the server when the child exits, as
it does for ``streamdi serve`` or ``tpcdi run``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from warehouse.embedded import EMBEDDED_SERVER_DEFAULTS

pytestmark = pytest.mark.postgres

_CHILD = """
import json, sys
from pathlib import Path
import psycopg2
from warehouse.embedded import embedded_postgres_dsn
from warehouse.exceptions import EmbeddedPostgresFailed
try:
    uri = embedded_postgres_dsn(Path(sys.argv[1]), server_settings=json.loads(sys.argv[2]))
except EmbeddedPostgresFailed as exc:
    print(json.dumps({"error": str(exc)}))
    sys.exit(0)
con = psycopg2.connect(uri)
with con.cursor() as cur:
    cur.execute("SELECT name, setting, unit, pending_restart FROM pg_settings WHERE name = ANY(%s)",
                (json.loads(sys.argv[3]),))
    rows = {n: [s, u, p] for n, s, u, p in cur.fetchall()}
con.close()
print(json.dumps({"settings": rows}))
"""


def _start(data_dir: Path, settings: dict[str, str], names: list[str]) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(data_dir), json.dumps(settings), json.dumps(names)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _stopped(data_dir: Path) -> bool:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if not (data_dir / "postmaster.pid").exists():
            return True
        time.sleep(0.2)
    return False


def test_the_defaults_and_overrides_reach_the_server_and_a_restart_only_when_needed(
    tmp_path: Path,
) -> None:
    data = tmp_path / "pg"
    names = ["shared_buffers", "wal_buffers", "max_wal_size", "checkpoint_timeout", "work_mem"]

    first = _start(data, {"work_mem": "16MB"}, names)
    got = first["settings"]
    # shared_buffers and wal_buffers take effect only at a start: the restart happened
    assert got["shared_buffers"][:2] == ["131072", "8kB"]  # 1GB
    assert got["wal_buffers"][:2] == ["8192", "8kB"]  # 64MB
    assert got["max_wal_size"][:2] == ["4096", "MB"]
    assert got["checkpoint_timeout"][:2] == ["900", "s"]
    assert got["work_mem"][:2] == ["16384", "kB"]
    assert not any(row[2] for row in got.values()), "a setting still waits for a restart"
    assert _stopped(data), "the server outlived the process after its restart"

    # the same settings again: the server comes back with them as they were
    again = _start(data, {"work_mem": "16MB"}, names)
    assert again["settings"] == got

    # a changed restart-only parameter over the defaults: applied, the rest kept
    changed = _start(data, {"shared_buffers": "256MB"}, names)
    assert changed["settings"]["shared_buffers"][:2] == ["32768", "8kB"]
    assert changed["settings"]["max_wal_size"][:2] == ["4096", "MB"]
    assert _stopped(data)
    assert set(EMBEDDED_SERVER_DEFAULTS) <= set(names)


@pytest.mark.parametrize(
    ("settings", "named"),
    [({"shared_bufers": "1GB"}, "shared_bufers"), ({"shared_buffers": "lots"}, "lots")],
)
def test_a_wrong_parameter_fails_at_start_naming_it(
    tmp_path: Path, settings: dict[str, str], named: str
) -> None:
    out = _start(tmp_path / "pg", settings, [])
    assert "POSTGRES__SERVER_SETTINGS" in out["error"]
    assert named in out["error"]
    assert _stopped(tmp_path / "pg")
