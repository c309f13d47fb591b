"""The warehouse layer's boundaries, checked over the source: it imports no stage above it, and
the code that uses it drives drivers and targets through their public interfaces only."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

#: What the warehouse layer may import of our own packages (and of the base, only these modules).
ALLOWED = {"warehouse", "etl_dataflows"}
BASE = {"streamdi.errors", "streamdi.settings", "streamdi.logs", "streamdi.watchdog"}
FIRST_PARTY = {
    "api",
    "benchmarks",
    "cli",
    "etl_dataflows",
    "ingest",
    "migration",
    "runtime",
    "staging",
    "streamdi",
    "tpcdi",
    "warehouse",
}

#: The code that uses the warehouse layer, held to its public interfaces (ruff's SLF001 rule).
USERS = [
    "warehouse",
    "migration",
    "tpcdi/audit/connection.py",
    "tpcdi/warehouse",
    "tpcdi/run/phases.py",
    "api/service.py",
    "api/union.py",
    "benchmarks/migration.py",
    "benchmarks/union.py",
]


def _files(*parts: str) -> list[Path]:
    found: list[Path] = []
    for part in parts:
        path = REPO / part
        found.extend(sorted(path.rglob("*.py")) if path.is_dir() else [path])
    return found


def _imports(path: Path) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module)
    return modules


@pytest.mark.parametrize("path", _files("warehouse"), ids=lambda p: p.name)
def test_the_warehouse_layer_imports_nothing_above_it(path: Path) -> None:
    ours = {m for m in _imports(path) if m.split(".")[0] in FIRST_PARTY}
    wrong = {
        m
        for m in ours
        if m.split(".")[0] not in ALLOWED and not any(m == b or m.startswith(b + ".") for b in BASE)
    }
    assert not wrong, f"{path.relative_to(REPO)} imports {sorted(wrong)}"


def _private_uses(path: Path) -> list[str]:
    return _private_uses_in(path.read_text(), str(path.relative_to(REPO)))


def _private_uses_in(source: str, name: str) -> list[str]:
    """``obj._name`` where ``obj`` is not ``self``, ``cls`` or ``super()`` (ruff's SLF001)."""
    found = []
    for node in ast.walk(ast.parse(source, name)):
        if not isinstance(node, ast.Attribute):
            continue
        attr = node.attr
        if not attr.startswith("_") or (attr.startswith("__") and attr.endswith("__")):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
            continue
        if isinstance(owner, ast.Call) and getattr(owner.func, "id", None) == "super":
            continue
        found.append(f"{name}:{node.lineno} .{node.attr}")
    return found


def test_drivers_and_targets_are_used_through_public_interfaces() -> None:
    found = [use for path in _files(*USERS) for use in _private_uses(path)]
    assert not found, found


def test_no_isinstance_switch_on_targets_or_drivers_outside_the_layer() -> None:
    names = {"DuckDBTarget", "PostgresTarget", "DuckDBDriver", "PostgresDriver"}
    found = []
    for path in _files("api", "migration", "tpcdi", "benchmarks", "ingest", "staging"):
        if path.is_relative_to(REPO / "migration" / "targets"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == "isinstance"
                and len(node.args) == 2
                and {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)} & names
            ):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not found, found


def test_the_checks_see_a_violation() -> None:
    """The checks above find what they look for (a check that cannot fail is no check)."""
    assert "warehouse.base" in _imports(REPO / "warehouse" / "duckdb.py")
    source = "target._begin()\nself._ok()\ncls._ok()\nsuper()._ok()\nx.__class__\n"
    assert _private_uses_in(source, "sample.py") == ["sample.py:1 ._begin"]
