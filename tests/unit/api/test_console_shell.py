"""The console's static shell (no browser, no server): ``/`` and ``/console/assets/*`` are
served from the package data with the contract's headers, they (and nothing else, however
spelled) pass the token gate, and every file the page loads is shipped."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.console import ASSET_PREFIX, ConsoleAssets
from api.console.shell import ASSET_DIR, SECURITY_HEADERS
from api.middleware import BearerAuth, is_public
from tests.unit.api.harness import ShopStage, shop_service, shop_settings

TOKEN = "console-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
REPO = Path(__file__).resolve().parents[3]
SOURCE = REPO / "api" / "console" / ASSET_DIR
CSP = "default-src 'self'; img-src 'self' data:; style-src 'self'"


@pytest.fixture(scope="module")
def assets() -> ConsoleAssets:
    return ConsoleAssets.load()


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    stage = ShopStage(tmp_path / "staging.duckdb")
    stage.stage_range(1, 1)
    settings = shop_settings(tmp_path, token=TOKEN)
    service, _ = shop_service(stage, settings)
    with TestClient(create_app(service, settings), raise_server_exceptions=False) as client:
        yield client
    service.close()
    stage.store.close()


def test_importlib_resources_finds_every_shipped_file(assets: ConsoleAssets) -> None:
    on_disk = {
        p.relative_to(SOURCE).as_posix()
        for p in SOURCE.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert set(assets.files) == on_disk
    assert {"index.html", "app.js", "console.css", "pages/overview.js"} <= on_disk


def test_a_build_carries_the_assets(tmp_path: Path) -> None:
    """What a non-editable install gets: setuptools' build of the packages (a wheel's content)."""
    built = tmp_path / "lib"
    setup = "from setuptools import setup; setup()"
    done = subprocess.run(
        [sys.executable, "-c", setup, "-q", "build_py", "--build-lib", str(built)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    shipped = {
        p.relative_to(built / "api" / "console" / ASSET_DIR).as_posix()
        for p in (built / "api" / "console" / ASSET_DIR).rglob("*")
        if p.is_file()
    }
    assert shipped == set(ConsoleAssets.load().files)


def test_every_module_and_link_the_page_loads_is_shipped(assets: ConsoleAssets) -> None:
    index = assets.files["index.html"].body.decode()
    linked = re.findall(r'(?:src|href)="/console/assets/([^"]+)"', index)
    assert {"app.js", "console.css", "icon.svg"} <= set(linked)
    missing = [name for name in linked if name not in assets.files]
    for name, asset in assets.files.items():
        if not name.endswith(".js"):
            continue
        text = asset.body.decode()
        base = name.rpartition("/")[0]
        for target in re.findall(r'(?:from|import\()\s*"(\.{1,2}/[^"]+)"', text):
            resolved = Path(base, target).as_posix()
            parts: list[str] = []
            for part in resolved.split("/"):
                if part == "..":
                    parts.pop()
                elif part not in (".", ""):
                    parts.append(part)
            if "/".join(parts) not in assets.files:
                missing.append(f"{name} -> {target}")
    assert not missing, missing


def test_the_page_runs_no_inline_script_or_style_and_builds_no_markup(
    assets: ConsoleAssets,
) -> None:
    """The CSP forbids inline script and style; data reaches the page as text only."""
    index = assets.files["index.html"].body.decode()
    assert all("src=" in tag for tag in re.findall(r"<script[^>]*>", index))
    assert not re.search(r"\sstyle=|\son[a-z]+=", index)
    for name, asset in assets.files.items():
        if name.endswith(".js"):
            text = asset.body.decode()
            for forbidden in ("innerHTML", "outerHTML", "insertAdjacentHTML", "eval(", "Function("):
                assert forbidden not in text, f"{name} uses {forbidden}"
            assert "http://" not in text.replace("http://www.w3.org/2000/svg", "")
            assert "https://" not in text, f"{name} names another origin"


def test_the_shell_is_served_without_the_token_with_its_headers(
    client: TestClient, assets: ConsoleAssets
) -> None:
    page = client.get("/")
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert page.headers["content-security-policy"] == CSP
    assert page.headers["x-content-type-options"] == "nosniff"
    assert page.content == assets.files["index.html"].body
    for name, asset in assets.files.items():
        answer = client.get(ASSET_PREFIX + name)
        assert answer.status_code == 200, name
        assert answer.content == asset.body
        assert answer.headers["content-type"] == asset.media_type
        for header, value in SECURITY_HEADERS.items():
            assert answer.headers[header] == value, (name, header)
    assert client.get(ASSET_PREFIX + "app.js").headers["content-type"].startswith("text/javascript")


def test_an_unchanged_asset_is_not_sent_again(client: TestClient) -> None:
    first = client.get(ASSET_PREFIX + "app.js")
    again = client.get(ASSET_PREFIX + "app.js", headers={"If-None-Match": first.headers["etag"]})
    assert again.status_code == 304 and again.content == b""
    other = client.get(ASSET_PREFIX + "app.js", headers={"If-None-Match": '"something-else"'})
    assert other.status_code == 200


def test_the_json_routes_still_want_the_token(client: TestClient) -> None:
    for path in ("/status", "/tables", "/batches", "/migration", "/deadletters", "/metrics"):
        assert client.get(path).status_code == 401, path
        assert client.get(path, headers=AUTH).status_code == 200, path
    for path in ("/docs", "/openapi.json", "/console/overview", "/console/report"):
        assert client.get(path).status_code == 401, path
    assert client.post("/", json={}).status_code == 401
    assert client.post("/", json={}, headers=AUTH).status_code == 405


def test_an_unknown_asset_is_401_without_the_token_and_404_with_it(client: TestClient) -> None:
    assert client.get(ASSET_PREFIX + "nope.js").status_code == 401
    missing = client.get(ASSET_PREFIX + "nope.js", headers=AUTH)
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"


# -- the allowlist, spelled every way a client can ---------------------------------------------

PUBLIC = frozenset({"/", "/console/assets/app.js", "/console/assets/pages/overview.js"})


async def _reached(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"reached"})


def raw_request(app: Any, raw_path: bytes, method: str = "GET", **scope: Any) -> int:
    """The status ``app`` answers for a request line with ``raw_path`` as sent, with the scope a
    server builds from it (the path percent-decoded, nothing else normalized)."""
    target, _, query = raw_path.partition(b"?")
    full = {
        "type": "http",
        "method": method,
        "path": unquote(target.decode("ascii")),
        "raw_path": target,
        "query_string": query,
        "root_path": "",
        "headers": [(b"host", b"testserver")],
        **scope,
    }
    statuses: list[int] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    asyncio.run(app(full, receive, send))
    return statuses[0]


@pytest.mark.parametrize(
    "raw",
    [b"/", b"/?x=1", b"/console/assets/app.js", b"/console/assets/pages/overview.js?v=2"],
)
def test_exactly_the_shell_passes_without_a_token(raw: bytes) -> None:
    guard = BearerAuth(_reached, token=TOKEN, public_paths=PUBLIC)
    assert raw_request(guard, raw) == 200


@pytest.mark.parametrize(
    "raw",
    [
        b"/status",
        b"/console/assets/../status",
        b"/console/assets/./app.js",
        b"/console/assets/app.js/../../status",
        b"/console/assets/%2e%2e/status",
        b"/console/assets/..%2fstatus",
        b"/console/assets%2Fapp.js",
        b"/console/assets/app%2ejs",
        b"/%2F",
        b"//",
        b"/console/assets//app.js",
        b"/console/assets/",
        b"/console/assets",
        b"/console/assets/nope.js",
        b"/console/assets/APP.JS",
        b"/index.html",
        b"/console/overview",
        b"/console/report",
        b"/docs",
        b"/openapi.json",
        b"/%00",
        b"/console/assets/app.js%00",
    ],
)
def test_nothing_else_passes_however_it_is_spelled(raw: bytes) -> None:
    guard = BearerAuth(_reached, token=TOKEN, public_paths=PUBLIC)
    assert raw_request(guard, raw) == 401, raw


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH"])
def test_only_a_get_of_the_shell_passes(method: str) -> None:
    guard = BearerAuth(_reached, token=TOKEN, public_paths=PUBLIC)
    assert raw_request(guard, b"/", method=method) == 401
    assert raw_request(guard, b"/console/assets/app.js", method=method) == 401


def test_a_root_path_in_front_is_not_the_shell() -> None:
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/",
        "raw_path": b"/",
        "root_path": "/mounted",
    }
    assert not is_public(scope, PUBLIC)
    assert is_public({**scope, "root_path": ""}, PUBLIC)


def test_the_real_app_routes_a_dot_segment_to_no_data(client: TestClient) -> None:
    """Through the whole app (its router too): a path that names a JSON route behind the asset
    prefix is refused, never served."""
    app: Any = client.app
    for raw in (b"/console/assets/../status", b"/console/assets/%2e%2e/tables"):
        assert raw_request(app, raw) == 401, raw
    assert raw_request(app, b"/console/assets/app.js") == 200
