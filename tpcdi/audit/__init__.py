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

from tpcdi.audit.connection import WarehouseConnection

__all__ = ["WarehouseConnection"]
