"""``streamdi tpcdi run --serve``: keep the query API up over the run's warehouse.

HOOK(query-service): the REST service is built on the ``query-service`` branch. Once merged, wire
it here: start it on the run's settings (``tpcdi.run.settings.run_settings``: the run's staging
file and warehouse(s), schema ``tpcdi``) and block until interrupted. Until then ``--serve`` says
it is not available and exits with the usage code, after the run itself has completed.
"""

from __future__ import annotations

import sys
from typing import Any

from streamdi.commands import EXIT_USAGE
from streamdi.settings import StreamdiSettings


def serve(settings: StreamdiSettings, options: Any) -> int:
    try:
        import api.serve  # type: ignore[import-not-found,unused-ignore]  # noqa: F401
    except ImportError:
        print(
            "streamdi tpcdi run --serve: the query service is not part of this build yet",
            file=sys.stderr,
        )
        return EXIT_USAGE
    print(
        "streamdi tpcdi run --serve: wire tpcdi.run.serve.serve to api.serve (HOOK)",
        file=sys.stderr,
    )
    return EXIT_USAGE
