"""The console kept open in a real browser while a benchmark measures: headless Chromium on a page.

:class:`OpenConsole` starts Debian's Chromium (``STREAMDI_CHROMIUM`` or ``chromium`` on the
``PATH``) headless on a URL, with a fresh profile and the flags our closed network needs, and
stops it again; the page's scripts run as in a user's browser (the console polls the service
once a second while it is open). :func:`console_requests` counts, from the service's
``/metrics``, the requests the console's routes answered, so a benchmark can show the console
really was watching.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType

#: The flags every Chromium here starts with, headless or driven by Playwright (no sandbox: we
#: run as root; the background networking flags keep it from reaching for hosts our network
#: refuses). The console's browser tests launch with these too.
CLOSED_NETWORK_FLAGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
)

#: How :class:`OpenConsole` starts it: headless, kept up with its page until it is stopped.
CHROMIUM_FLAGS = ("--headless", *CLOSED_NETWORK_FLAGS, "--remote-debugging-port=0")

#: The console's JSON routes, which only the open page calls (the benchmark's own clients call
#: ``/query`` and ``/streams``; the page's assets are loaded once and not counted).
CONSOLE_ROUTE = re.compile(
    r'^streamdi_http_requests_total\{[^}]*route="/console/(?!assets/)[^"]*"[^}]*\} (\S+)$'
)


def chromium_path() -> str | None:
    """The Chromium binary to start, or None when the machine has none."""
    chosen = os.environ.get("STREAMDI_CHROMIUM")
    if chosen:
        return chosen if Path(chosen).exists() else None
    return shutil.which("chromium") or shutil.which("chromium-browser")


def console_requests(metrics_text: str) -> int:
    """Requests the console's routes answered, from a ``/metrics`` scrape."""
    total = 0.0
    for line in metrics_text.splitlines():
        match = CONSOLE_ROUTE.match(line)
        if match:
            total += float(match.group(1))
    return int(total)


def tree_cpu_seconds(pid: int | None) -> float:
    """CPU seconds (user + system) the process ``pid`` and its live descendants have used; 0.0
    when there is no such process. Children that already exited are not counted."""
    import psutil

    if pid is None:
        return 0.0
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


class OpenConsole:
    """Headless Chromium showing ``url`` from :meth:`open` to :meth:`close` (a context manager)."""

    def __init__(self, url: str, binary: str) -> None:
        self.url = url
        self.binary = binary
        self._process: subprocess.Popen[bytes] | None = None
        self._profile: tempfile.TemporaryDirectory[str] | None = None

    def open(self) -> None:
        self._profile = tempfile.TemporaryDirectory(prefix="streamdi-console-profile-")
        self._process = subprocess.Popen(
            [self.binary, *CHROMIUM_FLAGS, f"--user-data-dir={self._profile.name}", self.url],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its renderer and GPU children go with it
        )

    @property
    def pid(self) -> int | None:
        """The browser's process id while it is open (its renderers are its descendants)."""
        return self._process.pid if self._process is not None else None

    def close(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            try:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            except ProcessLookupError:
                process.wait()
        if self._profile is not None:
            self._profile.cleanup()
            self._profile = None

    def __enter__(self) -> OpenConsole:
        self.open()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()
