"""The automated audit on a hand-built DuckDB warehouse: every check OK on the correct one, and
each injected defect fails exactly the checks guarding against it, with the numbers compared."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.tpcdi.audit.defects import DEFECTS, Defect
from tests.unit.tpcdi.audit.tiny_dw import build
from tpcdi.audit.checks import ALL_CHECKS, AuditResult, facts, format_audit, run_audit
from tpcdi.audit.connection import WarehouseConnection


def audit(
    tmp_path: Path, defect: Defect | None = None, schema: str | None = None, *, file: bool = False
) -> AuditResult:
    """Build the tiny warehouse (in memory unless ``file``: a DuckDB file named like the schema,
    which DuckDB then sees as a catalog of the same name) with ``defect``, and audit it."""
    where = str(tmp_path / "dw.duckdb") if file else ":memory:"
    with WarehouseConnection.duckdb(where, schema=schema) as conn:
        build(conn, tmp_path / "keys", mutate=defect.mutate if defect else None)
        return run_audit(conn)


def failing(result: AuditResult) -> set[str]:
    return {c.name for c in result.checks if not c.ok}


@pytest.mark.parametrize(("schema", "file"), [(None, False), ("dw", True)])
def test_every_check_is_ok_on_a_correct_warehouse(
    tmp_path: Path, schema: str | None, file: bool
) -> None:
    result = audit(tmp_path, schema=schema, file=file)
    assert result.fail == 0, format_audit(result, only_failures=True)
    assert result.ok == len(ALL_CHECKS) == len(result.checks)
    assert result.passed
    text = format_audit(result)
    assert text.count("\nOK  ") + text.startswith("OK  ") == len(ALL_CHECKS)
    assert f"audit: {len(ALL_CHECKS)} OK, 0 FAIL" in text


def test_check_names_are_unique_and_name_a_clause() -> None:
    names = [c.name for c in ALL_CHECKS]
    assert len(names) == len(set(names))
    assert all(c.clause for c in ALL_CHECKS)


@pytest.mark.parametrize("defect", DEFECTS, ids=[d.id for d in DEFECTS])
def test_a_defect_fails_exactly_its_checks(tmp_path: Path, defect: Defect) -> None:
    result = audit(tmp_path, defect)
    assert failing(result) == set(defect.fails), format_audit(result, only_failures=True)
    details = {c.name: c.detail for c in result.checks}
    for name, numbers in defect.details:
        assert numbers in details[name], details[name]
    assert f"FAIL  {sorted(defect.fails)[0]}" in format_audit(result)


def test_every_check_is_exercised_by_a_defect_or_listed_here() -> None:
    """Checks no single-defect test breaks on its own are named here, with the reason."""
    covered = {name for d in DEFECTS for name in d.fails}
    untested = {c.name for c in ALL_CHECKS} - covered
    # the generic history-tracking and NOT NULL checks are tested on one table each; their SQL
    # is the same template for every table
    generic = {
        n
        for n in untested
        if n.endswith(
            (
                "distinct surrogate keys", "EndDate alignment", "end of time", "IsCurrent",
                "one current version", "no overlapping versions", "consolidation",
                "BatchID values", "EffectiveDate window", "required fields",
            )
        )
    }  # fmt: skip
    assert len(untested - generic) < len(ALL_CHECKS) // 2, sorted(untested - generic)


@pytest.mark.parametrize("broken", [False, True])
def test_the_52_week_values_check_judged_in_parts_finds_what_one_piece_finds(
    tmp_path: Path, broken: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    defect = next(d for d in DEFECTS if d.id == "fifty_two_week_high_wrong_day")
    monkeypatch.setattr(facts, "SECURITY_DAYS_PART_ROWS", 2)  # a part per two rows
    result = audit(tmp_path, defect if broken else None)
    check = next(c for c in result.checks if c.name == "FactMarketHistory 52-week values")
    assert check.ok is not broken, check.detail
    assert check.detail.startswith("1 rows" if broken else "0 rows"), check.detail
    parts = int(check.detail.rsplit("; ", 1)[1].split()[0])
    assert parts > 1, check.detail
