"""The operations guide (docs/operations.md) says what the code does: the metrics table lists
exactly the metrics the service exports, and the exit-code table matches the constants."""

from __future__ import annotations

import re

from api.metrics import METRIC_NAMES
from cli.commands import EXIT_FAILED, EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE
from tests.compose_file import REPO

OPERATIONS = (REPO / "docs" / "operations.md").read_text(encoding="utf-8")


def section(title: str) -> str:
    start = OPERATIONS.index(title)
    end = OPERATIONS.find("\n## ", start + 1)
    return OPERATIONS[start : end if end > 0 else None]


def test_the_metrics_table_lists_every_exported_metric() -> None:
    ops = section("## Operating the service")
    table = ops[ops.index("| Metric |") :]
    listed = set(re.findall(r"`(streamdi_[a-z_]+)", table))
    assert listed == set(METRIC_NAMES)


def test_the_exit_code_table_matches_the_constants() -> None:
    ops = section("## Operating the service")
    codes = dict(re.findall(r"^\| (\d) \| (.+) \|$", ops, re.MULTILINE))
    assert set(codes) == {str(c) for c in (EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNAVAILABLE)}
    assert "configuration" in codes[str(EXIT_USAGE)]
    assert "does not answer" in codes[str(EXIT_UNAVAILABLE)]
