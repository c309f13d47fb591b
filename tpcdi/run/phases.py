"""Every call the run makes into the audit side (``tpcdi.audit``, written on another branch).

The contract (both sides keep it): ``WarehouseConnection`` wraps a DuckDB or psycopg2 connection
(``.dialect`` is ``duckdb`` or ``postgres``); ``write_batch_validation(conn, batch_id)`` inserts the
24 Validation rows of a batch; ``write_pcr(conn, batch_id, when)`` its phase completion record;
``load_audit_files(conn, data_dir)`` loads every ``*_audit.csv`` into Audit; ``run_audit(conn)``
returns an ``AuditResult`` (``.ok``, ``.fail``, ``.checks``); ``tpc_di_rps(...)`` is clause 7's
metric; ``write_run_report(run, json_path, png_path, stream)`` writes the report and the chart.

They are all called from here, so wiring them after the merge touches one module. When the audit
package is not installed the calls are skipped with a warning and the run says so in its notes
(no Validation or PCR rows are then written, and no audit result exists) — a missing audit is
reported, never faked.
"""

from __future__ import annotations

import datetime
import logging
from pathlib import Path
from typing import Any, TextIO

from tpcdi.run.record import RunRecord
from tpcdi.warehouse.warehouse import Target, Warehouse

logger = logging.getLogger(__name__)

MISSING = "the audit package (tpcdi.audit) is not installed: no batch validation, PCR or audit"


def _audit() -> Any:
    try:
        import tpcdi.audit as audit  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    return audit


def available() -> bool:
    """Whether the audit side is installed."""
    return _audit() is not None


def connection(warehouse: Warehouse, target: Target) -> Any:
    """A ``WarehouseConnection`` on ``target`` with the DW schema as the default schema."""
    from tpcdi.audit.connection import (  # type: ignore[import-not-found,unused-ignore]
        WarehouseConnection,
    )

    if target == "duckdb":
        raw = warehouse.duckdb().cursor()
        raw.execute(f"SET search_path = '{warehouse.schema}'")
    else:
        raw = warehouse.postgres()
        with raw.cursor() as cur:
            cur.execute(f'SET search_path TO "{warehouse.schema}", public')
        raw.commit()
    return WarehouseConnection(raw, target)


def batch_complete(warehouse: Warehouse, batch_id: int, when: datetime.datetime) -> bool:
    """The end of a phase (clauses 7.2.3.5, 7.2.4.2, 7.2.5.3) in every target: the batch
    validation query's 24 rows, then the PCR. Returns whether they were written."""
    audit = _audit()
    if audit is None:
        logger.warning("%s (batch_id=%s)", MISSING, batch_id)
        return False
    from tpcdi.audit.pcr import write_pcr  # type: ignore[import-not-found,unused-ignore]
    from tpcdi.audit.validation import (  # type: ignore[import-not-found,unused-ignore]
        write_batch_validation,
    )

    for target in warehouse.targets:
        conn = connection(warehouse, target)
        write_batch_validation(conn, batch_id)
        write_pcr(conn, batch_id, when)
    return True


def audit_phase(warehouse: Warehouse, data_dir: Path) -> Any:
    """The automated audit phase (clause 7.2.6) on each target: load the answer keys into Audit,
    run the audit. Returns the first target's ``AuditResult`` (the others are logged), or None
    when the audit side is missing."""
    audit = _audit()
    if audit is None:
        logger.warning(MISSING)
        return None
    from tpcdi.audit.checks import run_audit  # type: ignore[import-not-found,unused-ignore]
    from tpcdi.audit.keys import load_audit_files  # type: ignore[import-not-found,unused-ignore]

    results = []
    for target in warehouse.targets:
        conn = connection(warehouse, target)
        load_audit_files(conn, data_dir)
        result = run_audit(conn)
        logger.info("audit target=%s ok=%s fail=%s", target, result.ok, result.fail)
        results.append(result)
    return results[0]


def metric(warehouse: Warehouse, record: RunRecord) -> float | None:
    """TPC_DI_RPS (clause 7.6.1) from the PCR times and the batches' row counts, or None."""
    audit = _audit()
    if audit is None:
        return None
    from tpcdi.audit.metric import tpc_di_rps  # type: ignore[import-not-found,unused-ignore]

    value = tpc_di_rps(connection(warehouse, warehouse.targets[0]), record.batch_rows)
    return None if value is None else float(value)


def report(record: RunRecord, json_path: str | None, png_path: str | None, out: TextIO) -> bool:
    """The run report (text on ``out``, JSON, PNG chart) by the audit side's writer; returns
    whether it was written (the run writes its own JSON otherwise)."""
    audit = _audit()
    if audit is None:
        return False
    from tpcdi.audit.report import write_run_report  # type: ignore[import-not-found,unused-ignore]

    write_run_report(record, json_path, png_path, out)
    return True
