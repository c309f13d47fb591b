"""The browser that keeps the console open during ``streamdi bench freshness --console``."""

from __future__ import annotations

import argparse
import http.server
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from benchmarks.console_watch import (
    OpenConsole,
    chromium_path,
    console_requests,
    tree_cpu_seconds,
)
from benchmarks.freshness import _watching
from streamdi.errors import ConfigurationError

PAGE = b"""<!doctype html><title>poll</title>
<script src="/poll.js"></script>"""
SCRIPT = b"setInterval(() => fetch('/ping'), 100);"


class _Pinged(http.server.ThreadingHTTPServer):
    pings = 0


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Pinged

    def do_GET(self) -> None:
        body, kind = {
            "/": (PAGE, "text/html"),
            "/poll.js": (SCRIPT, "text/javascript"),
        }.get(self.path, (b"", "text/plain"))
        if self.path == "/ping":
            self.server.pings += 1
        self.send_response(200)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt: str, *args: object) -> None:
        pass


@pytest.fixture
def page() -> Iterator[_Pinged]:
    server = _Pinged(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_console_requests_counts_only_the_console_routes() -> None:
    text = "\n".join(
        [
            "# TYPE streamdi_http_requests_total counter",
            'streamdi_http_requests_total{method="GET",route="/console/overview",status="200"} 12.0',
            'streamdi_http_requests_total{method="GET",route="/console/batches",status="401"} 2.0',
            'streamdi_http_requests_total{method="POST",route="/query",status="200"} 900.0',
            'streamdi_http_requests_total{method="GET",route="/status",status="200"} 3.0',
            'streamdi_http_requests_total{method="GET",route="/console/assets/{name:path}",'
            'status="200"} 9.0',
        ]
    )
    assert console_requests(text) == 14
    assert console_requests("") == 0


@pytest.mark.skipif(
    chromium_path() is None,
    reason="no Chromium on this machine (make test installs it where it can)",
)
def test_an_open_console_runs_its_page_until_closed(page: _Pinged) -> None:
    binary = chromium_path()
    assert binary is not None
    console = OpenConsole(f"http://127.0.0.1:{page.server_address[1]}/", binary)
    with console:
        deadline = time.monotonic() + 30
        while page.pings < 10 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert page.pings >= 10, "the page's script did not poll"
        assert tree_cpu_seconds(console.pid) > 0  # the browser and its renderers worked
    assert console.pid is None
    closed_at = page.pings
    time.sleep(1.0)
    assert page.pings <= closed_at + 1, "the browser kept polling after close()"


def test_the_console_part_without_a_browser_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STREAMDI_CHROMIUM", "/nonexistent/chromium")
    args = argparse.Namespace(console=True, quick=True, console_rounds=4)
    with pytest.raises(ConfigurationError, match=r"--console.*chromium"):
        _watching(args)
    assert _watching(argparse.Namespace(console=False, quick=True, console_rounds=4)) is None


def test_tree_cpu_seconds_counts_the_children_too() -> None:
    """A parent that only waits on a child that burns CPU: the tree's figure is the child's."""
    burn = "while True: pass"
    wait = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {burn!r}])"
    parent = subprocess.Popen([sys.executable, "-c", wait], start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while tree_cpu_seconds(parent.pid) < 0.5 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert tree_cpu_seconds(parent.pid) >= 0.5  # the parent alone uses ~0.05 s
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait()
    assert tree_cpu_seconds(parent.pid) == 0.0  # gone: nothing to count
    assert tree_cpu_seconds(None) == 0.0
