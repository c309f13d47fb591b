"""Every call the run makes into the audit side (:mod:`tpcdi.audit`), in one module.

* :func:`connection` — a :class:`~tpcdi.audit.connection.WarehouseConnection` on one target,
  opened on a connection of its own (a DuckDB cursor of the warehouse's database, or a new
  psycopg2 connection), so the audit side's commits never touch the load's transactions;
* :func:`batch_complete` — the end of a phase: the 24 Validation rows, then the PCR (CT_n);
* :class:`VisibilityWriter` — the data visibility queries of clause 7.3 during the incremental
  updates, on a thread and a connection of their own;
* :func:`audit_phase` — the answer keys into Audit, then the automated audit;
* :func:`metric` — TPC_DI_RPS from the PCR times and the batches' source rows;
* :func:`report` — the run report (text, JSON, PNG) by the audit side's writer.

Timestamps are the local wall clock (``datetime.datetime.now()``), as the audit side writes its
own rows: CT_n, the Validation rows and the visibility rows must compare on one clock.
"""

from __future__ import annotations

import datetime
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from tpcdi.run.record import RunRecord
from tpcdi.warehouse.warehouse import Target, Warehouse

if TYPE_CHECKING:
    from tpcdi.audit.checks import AuditResult
    from tpcdi.audit.connection import WarehouseConnection
    from tpcdi.audit.metric import Metric

logger = logging.getLogger(__name__)

#: Clause 7.3.4: a visibility query at least every 5 minutes; we run one far more often, so a
#: short run still has one between the first Visibility_1 and CT3.
VISIBILITY_INTERVAL_S = 30.0


def now() -> datetime.datetime:
    """The run's clock (local wall time, as the audit side's rows use)."""
    return datetime.datetime.now()


def connection(warehouse: Warehouse, target: Target) -> WarehouseConnection:
    """A ``WarehouseConnection`` on ``target`` over a connection of its own (closed by its
    ``close``), naming the DW schema."""
    from tpcdi.audit.connection import WarehouseConnection

    if target == "duckdb":
        return WarehouseConnection(
            warehouse.duckdb().cursor(), "duckdb", warehouse.schema, owned=True
        )
    assert warehouse.postgres_dsn is not None
    return WarehouseConnection.postgres(warehouse.postgres_dsn, schema=warehouse.schema)


@contextmanager
def _connections(warehouse: Warehouse) -> Iterator[list[WarehouseConnection]]:
    opened = [connection(warehouse, t) for t in warehouse.targets]
    try:
        yield opened
    finally:
        for conn in opened:
            conn.close()


def recorded(conn: WarehouseConnection, batch_id: int, message_type: str) -> bool:
    """Whether ``conn``'s DImessages holds a ``message_type`` row of ``batch_id``."""
    return bool(
        conn.scalar(
            "SELECT count(*) FROM {dimessages} WHERE batchid = ? AND messagetype = ?",
            [batch_id, message_type],
        )
    )


def complete_phase(
    conn: WarehouseConnection, batch_id: int, hook: Callable[[str], None] | None = None
) -> datetime.datetime:
    """The end of phase ``batch_id`` in one target: its batch validation, then its PCR, each
    written once (see :func:`batch_complete`); ``hook`` is told ``validation`` once the 24 rows
    are there. Returns CT_batch_id."""
    from tpcdi.audit.pcr import PCR, completion_times, write_pcr
    from tpcdi.audit.validation import VALIDATION, write_batch_validation

    if not recorded(conn, batch_id, VALIDATION):
        write_batch_validation(conn, batch_id)
    if hook is not None:
        hook("validation")
    if recorded(conn, batch_id, PCR):
        return completion_times(conn)[batch_id]
    return write_pcr(conn, batch_id)


def batch_complete(warehouse: Warehouse, batch_id: int) -> datetime.datetime:
    """The end of a phase (clauses 7.2.3.5, 7.2.4.2, 7.2.5.3) in every target, the targets at
    once (a thread each, each on its own connection): the batch validation query's 24 rows, then
    the PCR. Returns CT_batch_id (of the last target).

    Written once per phase and target, so a phase end run again after a crash completes it
    exactly once: the 24 rows are one statement in one transaction (a target has all of them or
    none) and are written only when the target has none of the phase; the PCR, its own
    transaction after them, only when the target has none (its CT is then the one recorded)."""
    from concurrent.futures import ThreadPoolExecutor

    def complete(conn: WarehouseConnection) -> datetime.datetime:
        return complete_phase(conn, batch_id)

    with _connections(warehouse) as conns:
        if len(conns) == 1:
            return complete(conns[0])
        with ThreadPoolExecutor(max_workers=len(conns)) as pool:
            stamps = list(pool.map(complete, conns))
    return stamps[-1]


class VisibilityWriter:
    """The visibility queries of clause 7.3 while the incremental updates run.

    :meth:`start` (after CT1) writes Visibility_1 at once, then a thread writes Visibility_2 every
    ``interval_s``; :meth:`stop` (before the last phase's validation) writes a last Visibility_2
    and joins the thread. :func:`final_visibility` writes the Visibility_1 after CT3. Each runs on
    connections of its own, never the load's. A failed visibility query is logged and the run
    goes on: the audit reports the gap in the schedule.
    """

    def __init__(self, warehouse: Warehouse, interval_s: float = VISIBILITY_INTERVAL_S) -> None:
        self.warehouse = warehouse
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.written = 0

    def write(self, query: int, batch_id: int) -> None:
        """Write visibility query ``query`` (1 or 2) for ``batch_id`` into every target, on
        connections of its own; a failure is logged, never raised."""
        from tpcdi.audit.visibility import write_visibility

        try:
            with _connections(self.warehouse) as conns:
                for conn in conns:
                    write_visibility(conn, query, batch_id)  # type: ignore[arg-type]
            self.written += 1
        except Exception as exc:  # a missed visibility query shows in the audit, not a crash
            logger.warning("visibility query=%s batch_id=%s failed: %s", query, batch_id, exc)

    def start(self, batch_id: int = 2) -> None:
        self.batch_id = batch_id
        self.write(1, batch_id)
        self._thread = threading.Thread(target=self._loop, name="tpcdi-visibility", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.write(2, self.batch_id)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            self.write(2, self.batch_id)

    def __enter__(self) -> VisibilityWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None


def final_visibility(warehouse: Warehouse, batch_id: int = 3) -> None:
    """Visibility_1 at the start of the audit phase (clause 7.2.6.5)."""
    VisibilityWriter(warehouse).write(1, batch_id)


def audit_phase(
    warehouse: Warehouse, data_dir: Path, through: int | None = None
) -> dict[str, AuditResult]:
    """The automated audit phase (clause 7.2.6) on each target: load the answer keys into Audit,
    run the audit. Returns each target's ``AuditResult``. With ``through``, the audit of a run
    after its phase of BatchID ``through`` (a sampled day of a daily feed): the keys of batches
    1..``through`` only, and the checks over those batches."""
    from tpcdi.audit.checks import run_audit
    from tpcdi.audit.keys import load_audit_files

    results: dict[str, AuditResult] = {}
    with _connections(warehouse) as conns:
        for target, conn in zip(warehouse.targets, conns, strict=True):
            load_audit_files(conn, data_dir, through)
            conn.commit()
            result = run_audit(conn, through=through)
            logger.info("audit target=%s ok=%s fail=%s", target, result.ok, result.fail)
            results[target] = result
    return results


def metric(warehouse: Warehouse, record: RunRecord) -> Metric | None:
    """TPC_DI_RPS (clause 7.6.1) from the first target's PCR times and the batches' source rows;
    None when a PCR or a row count is missing (the reason is logged)."""
    from tpcdi.audit.metric import metric_from_warehouse

    rows = record.batch_rows
    if any(b not in rows for b in (1, 2, 3)):
        logger.warning("no metric: source rows known for batches %s only", sorted(rows))
        return None
    conn = connection(warehouse, warehouse.targets[0])
    try:
        return metric_from_warehouse(conn, rows[1], rows[2], rows[3])
    except ValueError as exc:
        logger.warning("no metric: %s", exc)
        return None
    finally:
        conn.close()


def report(
    record: RunRecord, json_path: str | None, png_path: str | None, out: TextIO
) -> dict[str, Any]:
    """The run report (text on ``out``, JSON unless ``json_path`` is ``-``, PNG chart) by the
    audit side's writer; returns the JSON document."""
    from tpcdi.audit.report import write_run_report

    return write_run_report(
        record.figures(),
        json_path=None if json_path is None or json_path == "-" else Path(json_path),
        png_path=None if png_path is None else Path(png_path),
        stream=out,
    )
