"""The console: a browser page at ``/`` that watches and operates the service (issue 19).

The page is hand-written HTML, CSS and ES-module JavaScript under ``api/console/assets/``,
shipped as package data and served as they are (:mod:`api.console.shell`): no build step, no
CDN, nothing fetched from the network at run time. It holds no data: everything it shows comes
from the service's JSON routes, with the bearer token when ``API__TOKEN`` is set (see
``docs/console.md``).
"""

from api.console.shell import ASSET_PREFIX, ConsoleAssets, console_router

__all__ = ["ASSET_PREFIX", "ConsoleAssets", "console_router"]
