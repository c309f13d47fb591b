"""The automated audit (clause 7.2.6): every rule of the specification a warehouse can be checked
against, written as SQL run in the warehouse, each check printing OK or FAIL with the numbers it
compared.

The official audit query (Appendix A) is not part of the specification's text; these checks are
written from the rules of clauses 3, 4 and 7 and the answer keys DIGen writes (clause 2.2.2.20),
one check per rule, named after it. Which clause each check enforces is listed in the docstrings
of :mod:`.messages` (Audit table, DImessages, batch validation, visibility), :mod:`.history`
(history tracking, on the five history-tracking dimensions), :mod:`.dimensions`, :mod:`.trade`,
:mod:`.facts` and :mod:`.other` (Financial, Prospect, static tables, NOT NULL columns); every
:class:`CheckResult` also carries its clause.

A check whose query fails (a table missing, a column of another type) or whose answer key or
Validation row is absent fails with that reason; the other checks still run.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from tpcdi.audit.checks import dimensions, facts, history, messages, other, trade
from tpcdi.audit.checks.base import AuditContext, Check, CheckResult, MissingInput
from tpcdi.audit.connection import WarehouseConnection
from warehouse.exceptions import WarehouseError, WarehouseUnavailable

logger = logging.getLogger(__name__)

ALL_CHECKS: tuple[Check, ...] = (
    *messages.CHECKS,
    *history.CHECKS,
    *dimensions.CHECKS,
    *trade.CHECKS,
    *facts.CHECKS,
    *other.CHECKS,
)


@dataclass(frozen=True)
class AuditResult:
    """The verdicts of one audit run, in check order; ``ok`` / ``fail`` count them."""

    checks: list[CheckResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> int:
        return sum(1 for c in self.checks if c.ok)

    @property
    def fail(self) -> int:
        return sum(1 for c in self.checks if not c.ok)

    @property
    def passed(self) -> bool:
        """Every check is OK (clause 7.2.6.7: a valid run reports OK for every test)."""
        return self.fail == 0 and bool(self.checks)

    def failed(self) -> list[CheckResult]:
        return [c for c in self.checks if not c.ok]

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "fail": self.fail,
            "seconds": round(self.seconds, 3),
            "checks": [
                {
                    "name": c.name,
                    "ok": c.ok,
                    "detail": c.detail,
                    "clause": c.clause,
                    "seconds": round(c.seconds, 4),
                }
                for c in self.checks
            ],
        }


def run_check(ctx: AuditContext, check: Check) -> CheckResult:
    """One check; its own failure to run is a FAIL with the reason, never an exception (except
    a warehouse that went away)."""
    started = time.perf_counter()
    try:
        with ctx.conn.attempt():
            ok, detail = check.run(ctx)
    except WarehouseUnavailable:
        raise
    except MissingInput as exc:
        ok, detail = False, str(exc)
    except WarehouseError as exc:
        ok, detail = False, f"query failed: {exc}"
    return CheckResult(check.name, ok, detail, check.clause, time.perf_counter() - started)


def run_audit(
    conn: WarehouseConnection,
    checks: tuple[Check, ...] = ALL_CHECKS,
    *,
    through: int | None = None,
) -> AuditResult:
    """Run every check against the warehouse (read only) and return their verdicts.

    The answer keys must be in ``audit`` (:func:`tpcdi.audit.keys.load_audit_files`). The audit
    covers batches 1..``through`` (default: the last batch the answer keys describe; DIGen's
    data: 3, a daily feed of N days: N + 1), so a run can be audited after any of its phases.
    Raises :class:`~warehouse.exceptions.WarehouseUnavailable` only if the connection is lost.
    """
    started = time.perf_counter()
    ctx = AuditContext(conn, through)
    results = [run_check(ctx, check) for check in checks]
    result = AuditResult(results, time.perf_counter() - started)
    logger.info("audit ok=%s fail=%s seconds=%.2f", result.ok, result.fail, result.seconds)
    return result


def format_audit(result: AuditResult, *, only_failures: bool = False) -> str:
    """One line per check, ``OK`` or ``FAIL``, its name and the numbers it compared; a summary."""
    width = max((len(c.name) for c in result.checks), default=10)
    lines = [
        f"{'OK  ' if c.ok else 'FAIL'}  {c.name:<{width}}  {c.detail}"
        for c in result.checks
        if not (only_failures and c.ok)
    ]
    verdict = "every check OK" if result.passed else f"{result.fail} FAILED"
    lines.append(
        f"audit: {result.ok} OK, {result.fail} FAIL of {len(result.checks)} checks "
        f"in {result.seconds:.1f} s — {verdict}"
    )
    return "\n".join(lines)


__all__ = [
    "ALL_CHECKS",
    "AuditResult",
    "Check",
    "CheckResult",
    "format_audit",
    "run_audit",
    "run_check",
]
