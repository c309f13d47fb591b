"""Headless Chromium for the tests: Debian's ``chromium`` (``STREAMDI_CHROMIUM`` names another)
driven by Playwright's bundled driver, never a browser a tool downloads; a fresh profile per
launch (Playwright's temporary user data directory) and the flags our closed network needs."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.console_watch import CLOSED_NETWORK_FLAGS

CHROMIUM = Path(os.environ.get("STREAMDI_CHROMIUM", "/usr/bin/chromium"))
LAUNCH_ARGS = list(CLOSED_NETWORK_FLAGS)


def browser_missing() -> str | None:
    """Why a browser test cannot run here, or None."""
    if importlib.util.find_spec("playwright") is None:
        return "playwright is not installed: make install-dev"
    if not CHROMIUM.exists():
        return (
            f"Chromium is not installed at {CHROMIUM}: `make browser` (as root) installs Debian's "
            "chromium; STREAMDI_CHROMIUM names another"
        )
    return None


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium (a Playwright ``Browser``), closed on exit."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=LAUNCH_ARGS
        )
        try:
            yield launched
        finally:
            launched.close()
