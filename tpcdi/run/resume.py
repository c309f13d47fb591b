"""The phases of the incremental updates as steps a supervisor drives, each safe to run again
after a ``kill -9`` (``streamdi tpcdi phase``).

``streamdi tpcdi run`` does everything in one process; killed, it starts over. When the
incremental updates run instead under ``streamdi serve`` (the pipeline, the migration and the
DuckDB warehouse in one process that a supervisor restarts; the changes pushed over HTTP with
``expect_pos``), what is left is each phase's bookkeeping in the warehouse. It runs while serve
is stopped (the DuckDB warehouse has one writing process), after ``streamdi migrate push
--merge`` folded every delta, as these steps (``B``: the phase's BatchID):

* :func:`end_phase` ``B`` — the end of phase B, in every target, target after target:

  1. the three Prospect Status messages of clause 4.6.14.2 (incremental phases);
  2. a ``Visibility_2`` (incremental phases): the last one before the PCR (7.3.6);
  3. the 24 batch validation rows (7.4);
  4. the PCR (CT_B).

  ``end 1`` completes the historical load of ``streamdi tpcdi run --stop-after historical``
  (steps 3 and 4 only) when the updates are about to start.
* :func:`begin_phase` ``B`` — the ``Phase started`` Status row of phase B and, for the first
  incremental phase, the ``Visibility_1`` of clause 7.3.3.
* :func:`visibility` ``B`` — a ``Visibility_2`` during phase B (clause 7.3.4: at most five
  minutes apart), at a planned stop of serve.
* :func:`final_audit` ``B`` — the ``Visibility_1`` at the start of the audit (7.2.6.5), the
  answer keys of batches 1..B into Audit, and the audit of every target.

**Once per phase and target.** Status rows, Prospect messages, validation rows and PCRs are each
written only if the target does not hold them yet, each in one statement or one transaction
(:func:`tpcdi.run.feed.status_row`, :func:`tpcdi.run.phases.batch_complete`); Prospect's count
before the phase comes from the previous phase's validation, not from a count taken at the
phase's start that a kill would lose. A step killed anywhere and run again completes what the
killed one left, without a second row. Visibility rows are the exception: a rerun adds another
one, which is what a periodic query does (the audit checks their counts never decrease and
their spacing, both of which one more keeps).

**Crash points** (the hidden ``--crash-at POINT``, for the fault campaign): the process kills
itself with SIGKILL right after POINT's write in the first target, before the next target's:
``begin``, ``prospects``, ``visibility``, ``validation``, ``pcr``, ``audit``.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from tpcdi.audit.connection import WarehouseConnection
from tpcdi.audit.pcr import PCR
from tpcdi.audit.visibility import write_visibility
from tpcdi.readers import read_batch_date
from tpcdi.run import phases
from tpcdi.run.feed import phase_name, prospect_status, status_row
from tpcdi.warehouse.warehouse import Target, Warehouse

logger = logging.getLogger(__name__)

PhaseAction = Literal["begin", "end", "visibility", "audit"]
PHASE_ACTIONS: tuple[PhaseAction, ...] = ("begin", "end", "visibility", "audit")
#: The points ``--crash-at`` may name (see the module docstring).
CRASH_POINTS = ("begin", "prospects", "visibility", "validation", "pcr", "audit")
#: ``hook(point)``: called after each point's write in the first target.
Hook = Callable[[str], None]


def crash_hook(point: str | None) -> Hook:
    """A hook that kills this process (SIGKILL: nothing flushed, nothing closed) at ``point``."""
    if point is not None and point not in CRASH_POINTS:
        raise ValueError(f"crash point {point!r} is not one of {', '.join(CRASH_POINTS)}")

    def hook(reached: str) -> None:
        if reached == point:
            logger.warning("crash point %s reached: kill -9", point)
            os.kill(os.getpid(), signal.SIGKILL)

    return hook


def _noop(point: str) -> None:
    return None


def begin_phase(warehouse: Warehouse, batch_id: int, hook: Hook = _noop) -> None:
    """The start of incremental phase ``batch_id`` (see the module docstring), once per target:
    its Status row only if the target has none, the first Visibility_1 only if the target has
    none of the phase."""
    name = phase_name(batch_id)
    for i, target in enumerate(warehouse.targets):
        status_row(warehouse, batch_id, "Phase started", name, target)
        if batch_id == 2:  # Incremental Update 1: the first Visibility_1 follows CT1 (7.3.3)
            with _connection(warehouse, target) as conn:
                if not phases.recorded(conn, batch_id, "Visibility_1"):
                    write_visibility(conn, 1, batch_id)
        if i == 0:
            hook("begin")


def end_phase(warehouse: Warehouse, data: Path, batch_id: int, hook: Hook = _noop) -> None:
    """Steps 1-4 of the end of phase ``batch_id`` in every target (see the module docstring);
    a target whose PCR of the phase is there already is left as it is. The update must be
    merged into every target (``streamdi migrate push --merge``)."""
    day = (
        read_batch_date(Path(data) / f"Batch{batch_id}" / "BatchDate.txt")
        if batch_id >= 2
        else None
    )
    for i, target in enumerate(warehouse.targets):
        point = hook if i == 0 else _noop
        with _connection(warehouse, target) as conn:
            if phases.recorded(conn, batch_id, PCR):
                continue
            if day is not None:
                # 1.
                prospect_status(warehouse, batch_id, day, target=target)
                point("prospects")
                # 2.
                write_visibility(conn, 2, batch_id)
                point("visibility")
            # 3. and 4.
            phases.complete_phase(conn, batch_id, point)
        point("pcr")
    logger.info("phase ended batch_id=%s targets=%s", batch_id, ",".join(warehouse.targets))


def visibility(warehouse: Warehouse, batch_id: int, hook: Hook = _noop) -> None:
    """A ``Visibility_2`` of phase ``batch_id`` in every target."""
    for i, target in enumerate(warehouse.targets):
        with _connection(warehouse, target) as conn:
            write_visibility(conn, 2, batch_id)
        if i == 0:
            hook("visibility")


def final_audit(
    warehouse: Warehouse, data: Path, batch_id: int, hook: Hook = _noop
) -> dict[str, dict[str, Any]]:
    """The audit phase after phase ``batch_id``: the final ``Visibility_1``, then in every target
    the answer keys of batches 1..``batch_id`` and the audit. Returns each target's verdicts
    (:meth:`~tpcdi.audit.checks.AuditResult.as_dict`)."""
    from tpcdi.audit.checks import run_audit
    from tpcdi.audit.keys import load_audit_files

    out: dict[str, dict[str, Any]] = {}
    for i, target in enumerate(warehouse.targets):
        with _connection(warehouse, target) as conn:
            write_visibility(conn, 1, batch_id)
            load_audit_files(conn, Path(data), batch_id)
            conn.commit()
            result = run_audit(conn, through=batch_id)
        logger.info("audit target=%s ok=%s fail=%s", target, result.ok, result.fail)
        out[target] = result.as_dict()
        if i == 0:
            hook("audit")
    return out


@contextmanager
def _connection(warehouse: Warehouse, target: Target) -> Iterator[WarehouseConnection]:
    conn = phases.connection(warehouse, target)
    try:
        yield conn
    finally:
        conn.close()


def run_phase_step(
    action: PhaseAction,
    batch_id: int,
    settings: Any,
    workdir: Path,
    targets: tuple[str, ...],
    *,
    data: Path | None = None,
    crash_at: str | None = None,
) -> dict[str, dict[str, Any]] | None:
    """``streamdi tpcdi phase ACTION BATCH``: one step on the warehouse of the run in
    ``workdir`` (its DuckDB file and schema as ``streamdi tpcdi run`` laid them out; PostgreSQL
    at ``POSTGRES__DSN``). ``data``: the staging area (``end`` of an incremental phase reads its
    BatchDate, ``audit`` its answer keys). Returns the audit's verdicts per target for
    ``audit``."""
    from migration.schema import WarehouseLayout
    from tpcdi.incremental import build_flow
    from tpcdi.run.exceptions import RunFailed
    from tpcdi.run.job import open_warehouse
    from tpcdi.run.settings import run_settings

    if action not in PHASE_ACTIONS:
        raise ValueError(f"phase step {action!r} is not one of {', '.join(PHASE_ACTIONS)}")
    if data is None and (action == "audit" or (action == "end" and batch_id >= 2)):
        raise RunFailed(f"streamdi tpcdi phase {action} {batch_id} needs --data")
    hook = crash_hook(crash_at)
    served = run_settings(settings, workdir, targets)
    layout = WarehouseLayout(build_flow().build(), served.migration.schema_name)
    with open_warehouse(served, layout, targets) as warehouse:
        if action == "begin":
            begin_phase(warehouse, batch_id, hook)
        elif action == "end":
            end_phase(warehouse, Path(data or "."), batch_id, hook)
        elif action == "visibility":
            visibility(warehouse, batch_id, hook)
        else:
            assert data is not None
            return final_audit(warehouse, data, batch_id, hook)
    return None
