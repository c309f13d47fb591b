"""The console's static shell: ``GET /`` (the page) and ``GET /console/assets/<name>`` (its
scripts, styles and icon), served from the package data under ``api/console/assets/``.

Contract:

* The files are read once, when the app is created (:meth:`ConsoleAssets.load`), through
  :mod:`importlib.resources`, so an installed wheel serves what it carries. A request is
  answered from that table by its exact name; no request path ever reaches the file system.
* Only the suffixes of :data:`MEDIA_TYPES` are shipped; a file of another kind under
  ``assets/`` fails :meth:`ConsoleAssets.load` (a packaging mistake, found at startup; hidden
  files are skipped).
* Every answer carries :data:`SECURITY_HEADERS`: the page may run only its own scripts and
  styles (no inline script or style, nothing from another origin), its types are not sniffed,
  it is not framed. An ``ETag`` lets the browser revalidate instead of downloading again.
* These paths hold no data, so :class:`api.middleware.BearerAuth` lets ``GET`` requests for
  exactly them (:meth:`ConsoleAssets.public_paths`) through without the token; every JSON
  route still wants it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Annotated

from fastapi import APIRouter, Header, Path
from fastapi.responses import Response

from api.handlers import Refusal

#: Where the assets are served (the page's ``<script>`` and ``<link>`` point here).
ASSET_PREFIX = "/console/assets/"

#: The package and directory holding the assets.
ASSET_PACKAGE = "api.console"
ASSET_DIR = "assets"

#: The page itself, served at ``/``.
INDEX = "index.html"

MEDIA_TYPES: dict[str, str] = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}

#: The headers of every shell answer (the console contract's CSP, exactly).
SECURITY_HEADERS: dict[str, str] = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


@dataclass(frozen=True)
class Asset:
    """One shipped file: its bytes, media type and entity tag."""

    body: bytes
    media_type: str
    etag: str


class ConsoleAssets:
    """The shipped files by name (``"app.js"``, ``"pages/overview.js"``), read once."""

    def __init__(self, files: dict[str, Asset]) -> None:
        if INDEX not in files:
            raise FileNotFoundError(f"the console's {INDEX} is not in {ASSET_PACKAGE}/{ASSET_DIR}")
        self.files = files

    @classmethod
    def load(cls) -> ConsoleAssets:
        """Every file under ``api/console/assets/`` of the installed package. Raises
        ``ValueError`` for a file whose kind :data:`MEDIA_TYPES` does not know and
        ``FileNotFoundError`` when ``index.html`` is missing."""
        files: dict[str, Asset] = {}
        pending: list[tuple[str, Traversable]] = [
            ("", resources.files(ASSET_PACKAGE).joinpath(ASSET_DIR))
        ]
        while pending:
            prefix, folder = pending.pop()
            for entry in folder.iterdir():
                name = prefix + entry.name
                if entry.name.startswith("."):  # an editor's swap file, never shipped
                    continue
                if entry.is_dir():
                    if entry.name != "__pycache__":
                        pending.append((name + "/", entry))
                    continue
                suffix = "." + entry.name.rpartition(".")[2]
                if suffix not in MEDIA_TYPES:
                    raise ValueError(f"console asset {name!r}: no media type for {suffix!r}")
                body = entry.read_bytes()
                etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
                files[name] = Asset(body, MEDIA_TYPES[suffix], etag)
        return cls(files)

    def public_paths(self) -> frozenset[str]:
        """The request paths that need no token: ``/`` and each shipped asset's path."""
        return frozenset({"/", *(ASSET_PREFIX + name for name in self.files)})

    def answer(self, name: str, if_none_match: str | None) -> Response:
        """The asset ``name`` (304 when the browser's copy is current); 404 ``not_found``
        for a name that is not shipped."""
        asset = self.files.get(name)
        if asset is None:
            raise Refusal(404, "not_found", f"no console asset {name[:200]!r}")
        headers = {**SECURITY_HEADERS, "ETag": asset.etag}
        if if_none_match is not None and asset.etag in (
            tag.strip() for tag in if_none_match.split(",")
        ):
            return Response(status_code=304, headers=headers)
        return Response(asset.body, media_type=asset.media_type, headers=headers)


def console_router(assets: ConsoleAssets) -> APIRouter:
    """The two routes of the shell, serving ``assets``; not in the OpenAPI description (they
    are not JSON)."""
    router = APIRouter(tags=["console"], include_in_schema=False)

    @router.get("/")
    def page(if_none_match: Annotated[str | None, Header()] = None) -> Response:
        return assets.answer(INDEX, if_none_match)

    @router.get(ASSET_PREFIX + "{name:path}")
    def asset(
        name: Annotated[str, Path(max_length=256)],
        if_none_match: Annotated[str | None, Header()] = None,
    ) -> Response:
        return assets.answer(name, if_none_match)

    return router
