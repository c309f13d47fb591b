"""No code switches on the warehouse layer's classes: callers ask a target or driver what it is
(``dialect``, ``reader()``) instead of ``isinstance``. (What the layer may import is the
import-linter contract in pyproject.toml; private attributes across modules, ruff's SLF rule.)"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
CLASSES = {"DuckDBTarget", "PostgresTarget", "DuckDBDriver", "PostgresDriver"}
CALLERS = ("api", "migration", "tpcdi", "benchmarks", "ingest", "staging", "runtime", "cli")


def _isinstance_switches(source: str, name: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source, name)):
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "id", None) == "isinstance"
            and len(node.args) == 2
            and {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)} & CLASSES
        ):
            found.append(f"{name}:{node.lineno}")
    return found


def test_no_isinstance_switch_on_targets_or_drivers_outside_the_layer() -> None:
    found = []
    for package in CALLERS:
        for path in sorted((REPO / package).rglob("*.py")):
            if path.is_relative_to(REPO / "migration" / "targets"):
                continue
            found += _isinstance_switches(path.read_text(), str(path.relative_to(REPO)))
    assert not found, found


def test_the_check_sees_a_switch() -> None:
    """The check finds what it looks for (a check that cannot fail is no check)."""
    source = "if isinstance(t, (DuckDBTarget, Other)):\n    pass\nisinstance(t, str)\n"
    assert _isinstance_switches(source, "sample.py") == ["sample.py:1"]
