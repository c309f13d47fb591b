"""The query side of the TPC-DI run: batch validation, phase completion records, the answer keys,
the automated audit, the TPC_DI_RPS metric and the run report.

* :class:`~tpcdi.audit.connection.WarehouseConnection` — a DuckDB or PostgreSQL warehouse;
* :func:`~tpcdi.audit.ddl.ensure_audit_tables` — ``audit`` and ``dimessages`` when missing;
* :func:`~tpcdi.audit.validation.write_batch_validation` — the 24 Validation rows of a phase;
* :func:`~tpcdi.audit.pcr.write_pcr` — a phase's completion record (its CT);
* :func:`~tpcdi.audit.visibility.write_visibility` — the data visibility queries;
* :func:`~tpcdi.audit.keys.load_audit_files` — every ``*_audit.csv`` into ``audit``;
* :func:`~tpcdi.audit.checks.run_audit` / :func:`~tpcdi.audit.checks.format_audit`;
* :mod:`tpcdi.audit.metric` — TH, TI1, TI2, TPC_DI_RPS (clause 7.5, 7.6);
* :mod:`tpcdi.audit.report` — the run report: text, JSON, PNG chart.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tpcdi.audit.checks import AuditResult, CheckResult, format_audit, run_audit
    from tpcdi.audit.connection import WarehouseConnection
    from tpcdi.audit.ddl import ensure_audit_tables
    from tpcdi.audit.keys import load_audit_files
    from tpcdi.audit.pcr import write_pcr
    from tpcdi.audit.validation import ValidationRow, write_batch_validation
    from tpcdi.audit.visibility import write_visibility

#: Imported on first use, so ``streamdi --help`` (which imports :mod:`cli.tpcdi_audit`) does not
#: load pyarrow and the checks.
_EXPORTS = {
    "AuditResult": "tpcdi.audit.checks",
    "CheckResult": "tpcdi.audit.checks",
    "format_audit": "tpcdi.audit.checks",
    "run_audit": "tpcdi.audit.checks",
    "WarehouseConnection": "tpcdi.audit.connection",
    "ensure_audit_tables": "tpcdi.audit.ddl",
    "load_audit_files": "tpcdi.audit.keys",
    "write_pcr": "tpcdi.audit.pcr",
    "ValidationRow": "tpcdi.audit.validation",
    "write_batch_validation": "tpcdi.audit.validation",
    "write_visibility": "tpcdi.audit.visibility",
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'tpcdi.audit' has no attribute {name!r}")


__all__ = [
    "AuditResult",
    "CheckResult",
    "ValidationRow",
    "WarehouseConnection",
    "ensure_audit_tables",
    "format_audit",
    "load_audit_files",
    "run_audit",
    "write_batch_validation",
    "write_pcr",
    "write_visibility",
]
