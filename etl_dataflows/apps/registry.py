"""The benchmark apps by name."""

from __future__ import annotations

from etl_dataflows.apps.common import App
from etl_dataflows.apps.streaming_ledger import APP as STREAMING_LEDGER

APPS: dict[str, App] = {a.name: a for a in (STREAMING_LEDGER,)}


def app(name: str) -> App:
    """The app called ``name``; ``KeyError`` lists the known ones."""
    try:
        return APPS[name]
    except KeyError:
        raise KeyError(f"no app named {name!r}; known: {', '.join(APPS)}") from None
