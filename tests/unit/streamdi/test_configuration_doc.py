"""The tables of docs/configuration.md list every setting the settings tree reads, and nothing it
does not."""

from __future__ import annotations

import re

from streamdi.environment import setting_names
from tests.compose_file import REPO

CONFIGURATION = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
TABLE_ROWS = "\n".join(line for line in CONFIGURATION.splitlines() if line.startswith("| `"))
NAMES = set(re.findall(r"`([A-Z][A-Z0-9]*__[A-Z0-9_]+\*?)`", TABLE_ROWS))


def covered(name: str) -> bool:
    return name in NAMES or any(n.endswith("*") and name.startswith(n[:-1]) for n in NAMES)


def test_every_setting_is_documented() -> None:
    missing = sorted(name for name in setting_names() if not covered(name))
    assert not missing, f"docs/configuration.md does not list {missing}"


def test_every_documented_variable_is_a_setting() -> None:
    known = setting_names()
    stale = sorted(
        n
        for n in NAMES
        if not (n in known or (n.endswith("*") and any(k.startswith(n[:-1]) for k in known)))
    )
    assert not stale, f"docs/configuration.md lists variables no setting reads: {stale}"
