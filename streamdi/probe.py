"""``python -m streamdi.probe URL...``: the healthcheck of the containers built from the streamdi
image (no curl in a slim image; Python is there anyway).

Each URL is ``tcp://host:port`` (healthy when a TCP connection opens) or ``http://host:port/path``
(healthy on a 2xx answer). Exit 0 when every URL is healthy, 1 otherwise, naming the first
failure on stderr. The compose checks read the ports from these URLs, so a healthcheck always
probes a port its service listens on.
"""

from __future__ import annotations

import socket
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from urllib.parse import urlsplit


def probe(url: str, timeout_s: float = 3.0) -> str | None:
    """None when ``url`` answers as healthy, else why not."""
    parts = urlsplit(url)
    if parts.scheme not in ("tcp", "http") or not parts.hostname or parts.port is None:
        return f"{url}: expected tcp://host:port or http://host:port/path"
    if parts.scheme == "tcp":
        try:
            with socket.create_connection((parts.hostname, parts.port), timeout_s):
                return None
        except OSError as exc:
            return f"{url}: {exc}"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            status: int = response.status
    except urllib.error.HTTPError as exc:
        return f"{url}: HTTP {exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        return f"{url}: {exc}"
    return None if 200 <= status < 300 else f"{url}: HTTP {status}"


def main(argv: Sequence[str] | None = None) -> int:
    urls = list(sys.argv[1:] if argv is None else argv)
    if not urls:
        print("usage: python -m streamdi.probe URL [URL...]", file=sys.stderr)
        return 2
    for url in urls:
        problem = probe(url)
        if problem is not None:
            print(f"unhealthy: {problem}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
