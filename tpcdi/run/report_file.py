"""The report of the last ``streamdi tpcdi run`` in its workdir: ``<workdir>/report.json``.

The run writes it when its report is made (whether or not ``--json`` asked for a copy elsewhere),
so ``--serve`` — of this invocation or of a later one on the same workdir — can show it
(``GET /console/report``). A new run removes the previous one's first (with the rest of the
earlier run's state), so the file always belongs to the run whose warehouse is in the workdir.
The write is atomic (a temporary file renamed over it).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

REPORT_FILE = "report.json"


def report_path(workdir: Path) -> Path:
    return Path(workdir) / REPORT_FILE


def save_report(workdir: Path, document: Mapping[str, Any]) -> Path:
    """Write ``document`` (the run's JSON report) to the workdir; returns its path."""
    path = report_path(workdir)
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(path.name + ".part")
    part.write_text(
        json.dumps(document, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8"
    )
    os.replace(part, path)
    return path


def load_report(workdir: Path) -> dict[str, Any] | None:
    """The report saved in ``workdir``, or None when there is none (or it cannot be read: then
    the reason is logged and the service serves no report)."""
    path = report_path(workdir)
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        logger.warning("run report not readable path=%s: %s", path, exc)
        return None
    if not isinstance(document, dict):
        logger.warning("run report is not a JSON object path=%s", path)
        return None
    return document


def forget_report(workdir: Path) -> None:
    """Remove the report of an earlier run (a new run starts)."""
    report_path(workdir).unlink(missing_ok=True)
