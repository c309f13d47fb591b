"""``python -m streamdi.probe``, the containers' healthcheck, against real sockets."""

from __future__ import annotations

import http.server
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from ingest.broker import free_port
from streamdi.probe import main, probe


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/ok" else 503)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[int]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_http_2xx_is_healthy_anything_else_is_not(server: int) -> None:
    assert probe(f"http://127.0.0.1:{server}/ok") is None
    assert probe(f"http://127.0.0.1:{server}/ready") == f"http://127.0.0.1:{server}/ready: HTTP 503"
    closed = free_port()
    assert "Connection refused" in (probe(f"http://127.0.0.1:{closed}/ok") or "")


def test_tcp_is_healthy_when_a_connection_opens(server: int) -> None:
    assert probe(f"tcp://127.0.0.1:{server}") is None
    assert probe(f"tcp://127.0.0.1:{free_port()}") is not None
    assert "expected" in (probe("udp://127.0.0.1:1") or "")
    assert "expected" in (probe("http://127.0.0.1/no-port") or "")


def test_exit_codes_of_the_module(server: int) -> None:
    assert main([f"tcp://127.0.0.1:{server}", f"http://127.0.0.1:{server}/ok"]) == 0
    assert main([f"tcp://127.0.0.1:{server}", f"http://127.0.0.1:{server}/bad"]) == 1
    assert main([]) == 2
    done = subprocess.run(
        [sys.executable, "-m", "streamdi.probe", f"tcp://127.0.0.1:{server}"], timeout=30
    )
    assert done.returncode == 0
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    done = subprocess.run(
        [sys.executable, "-m", "streamdi.probe", f"tcp://127.0.0.1:{port}"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 1 and "unhealthy" in done.stderr
