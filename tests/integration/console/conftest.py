"""The console in a real browser: headless Chromium (Debian's ``chromium``, driven by
Playwright's bundled driver; no browser is ever downloaded) against a real ``streamdi serve``
(its own embedded broker, embedded PostgreSQL and DuckDB warehouses, the kv dataflow fed over
HTTP, ``API__TOKEN`` set), one stack for the module.

The tests skip, with the reason, where Chromium or Playwright is missing (``make test`` installs
Chromium where it can: root with apt-get). Screenshots go to a directory under pytest's temporary
directory and, when ``STREAMDI_ARTIFACTS`` is set, are copied to ``$STREAMDI_ARTIFACTS/console``.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.integration.api.conftest import ServedService
from tests.integration.console.browser import browser_missing, chromium

TOKEN = "console-browser-token"
WIDE = {"width": 1280, "height": 800}
NARROW = {"width": 390, "height": 844}


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    reason = browser_missing()
    if reason is not None:
        pytest.skip(reason)
    with chromium() as launched:
        yield launched


@pytest.fixture(scope="module")
def stack(browser: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedService]:
    """``streamdi serve`` with a token; its client sends the token."""
    service = ServedService(
        tmp_path_factory.mktemp("console") / "state",
        API__TOKEN=TOKEN,
        MIGRATION__TARGETS="duckdb,postgres",
        MIGRATION__PUSH_BATCHES="4",
        MIGRATION__PUSH_MS="300",
        MIGRATION__MERGE_MS="1500",
        ENGINE__BATCH_TIMEOUT_MS="50",
        INGEST__ALLOWED_LATENESS_MS="",
    )
    service.client.headers["Authorization"] = f"Bearer {TOKEN}"
    try:
        service.wait_ready()
        yield service
    finally:
        if service.process.poll() is None:
            service.stop()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Any, str], Path]:
    """``shots(page, name)`` saves a full-page PNG as a test artifact and returns its path."""
    folder = tmp_path_factory.mktemp("console-screenshots")
    artifacts = os.environ.get("STREAMDI_ARTIFACTS")

    def save(page: Any, name: str) -> Path:
        path = folder / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        if artifacts:
            target = Path(artifacts) / "console"
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target / path.name)
        return path

    return save


class ConsoleTab:
    """One browser tab (its own context: no token kept) on the console of ``stack``, collecting
    every console error and uncaught exception of its page, and every answer it got."""

    def __init__(self, browser: Any, stack: ServedService, viewport: dict[str, int]) -> None:
        self.stack = stack
        self.context = browser.new_context(viewport=viewport)
        self.page = self.context.new_page()
        self.page.set_default_timeout(30_000)
        self.errors: list[str] = []
        self.answers: list[tuple[str, int]] = []
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda exc: self.errors.append(f"uncaught: {exc}"))
        self.page.on("response", lambda r: self.answers.append((urlsplit(r.url).path, r.status)))

    def _console(self, message: Any) -> None:
        if message.type == "error":  # a failed request (any 4xx or 5xx) is one too
            self.errors.append(f"{message.text} ({message.location.get('url')})")

    def open(self, fragment: str = "") -> None:
        self.page.goto(f"{self.stack.url}/{fragment}")

    def sign_in(self, token: str = TOKEN) -> None:
        """Open the console and give the token through its form; waits for the overview."""
        self.open()
        self.page.get_by_label("API token").fill(token)
        self.page.get_by_role("button", name="Open the console").click()
        self.page.locator('[data-field="pipeline"]').wait_for()
        self.errors.clear()  # the 401s that brought the form are expected; see test_token_gate

    def go(self, link: str, heading: str) -> None:
        self.page.get_by_role("navigation").get_by_role("link", name=link, exact=True).click()
        self.page.get_by_role("heading", level=1, name=heading).wait_for()

    def value(self, field: str) -> str:
        value: str = self.page.locator(f'[data-field="{field}"]').first.get_attribute("data-value")
        return value

    def number(self, field: str) -> float:
        text = self.value(field)
        return float(text) if text not in ("", None) else float("nan")

    def until(self, check: Callable[[], bool], what: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            assert time.monotonic() < deadline, f"{what} (page errors: {self.errors})"
            time.sleep(0.1)

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def tab(browser: Any, stack: ServedService) -> Iterator[ConsoleTab]:
    opened = ConsoleTab(browser, stack, WIDE)
    try:
        yield opened
    finally:
        opened.close()
