"""The benchmark apps by name."""

from __future__ import annotations

from etl_dataflows.apps.common import App
from etl_dataflows.apps.grep_sum import APP as GREP_SUM
from etl_dataflows.apps.online_bidding import APP as ONLINE_BIDDING
from etl_dataflows.apps.streaming_ledger import APP as STREAMING_LEDGER
from etl_dataflows.apps.toll_processing import APP as TOLL_PROCESSING

APPS: dict[str, App] = {
    a.name: a for a in (STREAMING_LEDGER, GREP_SUM, TOLL_PROCESSING, ONLINE_BIDDING)
}


def app(name: str) -> App:
    """The app called ``name``; ``KeyError`` lists the known ones."""
    try:
        return APPS[name]
    except KeyError:
        raise KeyError(f"no app named {name!r}; known: {', '.join(APPS)}") from None
