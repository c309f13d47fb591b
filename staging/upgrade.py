"""An upgrade of a staging file to a new version of its dataflow, at a batch boundary, atomically.

:func:`upgrade_staging` runs while no process has the file open for writing (``streamdi upgrade
apply``, or ``streamdi run --upgrade`` before the pipeline starts): the last committed batch
``W`` is the boundary. It plans the change against the file's recorded version
(:mod:`staging.history`, :func:`~etl_dataflows.evolution.plan.plan_upgrade`) and refuses a plan
that cannot apply in place (:class:`~staging.exceptions.StagingUpgradeRefused`). The protocol:

1. Open the file; read ``W``, the recorded version and the registered segments; plan. An empty
   plan ends here (a re-run after a crash that committed step 5 finds nothing to do).
2. Per state table whose stored rows change form, read its rows as of ``W`` (the ``state`` view:
   the folded rows plus the deltas since) and convert them
   (:class:`~etl_dataflows.evolution.convert.RowConversion`, the conversion every warehouse
   applies too).
3. Per such table, and per sink whose columns change, write every registered segment file again,
   converted to the new schema, as new files (unregistered: orphans until step 5 commits).
4. In a transaction on the state file (:mod:`staging.state_file`), write each changed table's
   converted rows into a new table, and create a new table per added state table; COMMIT.
   Nothing reads them yet: the staging file's map still names the old tables.
5. BEGIN on the staging file. Map each changed and added table to its new table (their
   ``state`` views are dropped); drop the removed tables' views and segment registrations; swap
   the registrations of the rewritten segments; set the fingerprint; record the new version
   with watermark ``W``.
6. COMMIT. The file is on the new layout with every row carried over, or (a crash before) on the
   old one, untouched: the files of step 3 and the tables of step 4 are orphans the next open
   deletes.
7. Drop the state file's tables the map no longer names, delete the replaced segment files and
   write the new schemas' anchors. The next :class:`~staging.store.StagingStore` open defines the
   views over the new layout (it deletes orphans before it binds them, so a crash before this
   step leaves nothing in the way).

The folded rows of a changed table are rebuilt through ``W``; ``state_folded_through`` stays, so
the view still overlays the (converted) deltas after it, which changes nothing: applying a
batch's newest delta per row again gives the same rows. A file of a layout before 8 (its folded
rows still in the staging file) is refused: opening it once with the dataflow that wrote it
moves them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from etl_dataflows.dataflow import CompiledDataflow, Dataflow
from etl_dataflows.evolution.convert import ConversionError, RowConversion
from etl_dataflows.evolution.plan import UpgradePlan, plan_upgrade
from staging import state_file
from staging.exceptions import (
    StagingInUse,
    StagingMismatch,
    StagingMissing,
    StagingUpgradeRefused,
)
from staging.history import LayoutVersion, read_history, record_version
from staging.layout import (
    DELTA,
    OUTPUTS,
    STATE,
    SYSTEM,
    arrow_of,
    outputs_schema,
    qualified,
    segment_schemas,
    state_base_ddl,
)
from staging.segments import Segment, SegmentFolder, conform

logger = logging.getLogger(__name__)

#: ``hook(phase)`` at the protocol's dangerous points (kill -9 tests): ``converted`` (step 3
#: done), ``switching`` (step 5 done, before COMMIT), ``switched`` (after step 7).
UpgradeHook = Callable[[str], None]


@dataclass(frozen=True)
class StagingSwitch:
    """What :func:`upgrade_staging` did: the plan, the version now recorded (None when the plan
    was empty), the batch boundary, rows converted and how long the switch held the file."""

    plan: UpgradePlan
    version: LayoutVersion | None
    watermark: int
    rows: int
    segments: int
    seconds: float


def plan_staging(
    path: Path | str, flow: Dataflow | CompiledDataflow, *, allow_drop: bool = False
) -> tuple[UpgradePlan, LayoutVersion]:
    """The plan of upgrading the staging file at ``path`` to ``flow``, and its recorded version
    (read-only). Raises :class:`~staging.exceptions.StagingMissing` when there is no file,
    :class:`~staging.exceptions.StagingInUse` when a pipeline holds it."""
    compiled = flow.build() if isinstance(flow, Dataflow) else flow
    path = Path(path)
    if not path.exists():
        raise StagingMissing(path)
    try:
        con = duckdb.connect(str(path), read_only=True)
    except (duckdb.IOException, duckdb.ConnectionException) as exc:
        raise StagingInUse(path, str(exc).splitlines()[0]) from exc
    try:
        latest = _latest(con, path, compiled)
    finally:
        con.close()
    return plan_upgrade(latest.shape, compiled, allow_drop=allow_drop), latest


def _latest(con: duckdb.DuckDBPyConnection, path: Path, flow: CompiledDataflow) -> LayoutVersion:
    history = read_history(con)
    if not history:
        raise StagingMismatch(
            path,
            "it has no layout history (it was written before streamdi kept one, or it is not a "
            "staging file): open it once with the dataflow that wrote it, then upgrade",
        )
    name = history[-1].shape.name
    if name != flow.name:
        raise StagingMismatch(path, f"it holds dataflow {name!r}, not {flow.name!r}")
    return history[-1]


def upgrade_staging(
    path: Path | str,
    flow: Dataflow | CompiledDataflow,
    *,
    allow_drop: bool = False,
    memory_limit: str | None = None,
    hook: UpgradeHook | None = None,
) -> StagingSwitch:
    """Upgrade the staging file at ``path`` to ``flow`` per the module docstring."""
    compiled = flow.build() if isinstance(flow, Dataflow) else flow
    path = Path(path)
    config: dict[str, str | bool | int | float | list[str]] = (
        {"memory_limit": memory_limit} if memory_limit else {}
    )
    try:
        con = duckdb.connect(str(path), config=config)
    except (duckdb.IOException, duckdb.ConnectionException) as exc:
        raise StagingInUse(path, str(exc).splitlines()[0]) from exc
    try:
        tables = _state_map(con)
        if tables is None:
            raise StagingMismatch(
                path,
                "its layout is older than this streamdi's (its folded state is still in the "
                "file): open it once with the dataflow that wrote it, then upgrade",
            )
        try:
            state_file.attach(con, path)
        except duckdb.Error as exc:
            raise StagingInUse(state_file.state_path(path), str(exc).splitlines()[0]) from exc
        return _upgrade(con, path, compiled, tables, allow_drop, hook)
    finally:
        con.close()


def _state_map(con: duckdb.DuckDBPyConnection) -> dict[str, str] | None:
    """The state tables' map of the staging file on ``con``; None for a file of a layout that
    kept its folded rows in the file (or no layout at all: :func:`_latest` says so)."""
    try:
        rows = dict(con.execute(f"SELECT key, value FROM {qualified(SYSTEM, 'meta')}").fetchall())
    except duckdb.CatalogException:
        return {}
    if state_file.STATE_TABLES not in rows and "layout_version" in rows:
        return None
    return state_file.read_map(rows)


def _upgrade(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    flow: CompiledDataflow,
    tables: dict[str, str],
    allow_drop: bool,
    hook: UpgradeHook | None,
) -> StagingSwitch:
    started = time.perf_counter()
    # 1.
    latest = _latest(con, path, flow)
    plan = plan_upgrade(latest.shape, flow, allow_drop=allow_drop)
    watermark = int(
        con.execute(
            f"SELECT coalesce(max(batch_id), 0) FROM {qualified(SYSTEM, 'batches')}"
        ).fetchall()[0][0]
    )
    if plan.empty:
        return StagingSwitch(plan, None, watermark, 0, 0, 0.0)
    if not plan.applicable:
        raise StagingUpgradeRefused(path, plan)
    folder = SegmentFolder(Path(f"{path}.segments"))
    segments = _registered(con)
    # 2.
    conversions = {
        name: RowConversion(
            latest.shape.tables[name],
            table,
            renames=flow.renames.get(name),
            migrate=flow.migrations.get(name),
        )
        for name, table in flow.tables.items()
        if name in latest.shape.tables
    }
    changed = {name: c for name, c in conversions.items() if not c.identity}
    rows: dict[str, pa.Table] = {}
    try:
        for name, conversion in changed.items():
            rows[name] = conversion.convert(
                arrow_of(con.sql(f"SELECT * FROM {qualified(STATE, name)}"))
            )
        # 3.
        rewritten: list[tuple[Segment, Segment]] = []
        changed_sinks = {
            s
            for s in flow.sinks
            if s in latest.shape.sinks and dict(latest.shape.sinks[s]) != _sink_columns(flow, s)
        }
        for segment in segments:
            if segment.relation == DELTA and segment.name in changed:
                data = pq.read_table(folder.path(segment))
                new = changed[segment.name].convert(data, keep=("batch_id", "op"))
            elif segment.relation == OUTPUTS and segment.name in changed_sinks:
                new = conform(
                    pq.read_table(folder.path(segment)), outputs_schema(flow, segment.name)
                )
            else:
                continue
            written = folder.write(
                segment.relation,
                segment.name,
                new,
                segment.first_batch,
                segment.last_batch,
                segment.level,
            )
            rewritten.append((segment, written))
    except ConversionError as exc:
        raise StagingUpgradeRefused(path, plan, str(exc)) from exc
    if rewritten:
        folder.sync()
    if hook is not None:
        hook("converted")
    # 4.
    meta = qualified(SYSTEM, "meta")
    next_version = latest.version + 1
    new_tables = {name: table for name, table in tables.items() if name in flow.tables}
    added = [name for name in flow.tables if name not in latest.shape.tables]
    try:
        taken = state_file.existing_tables(con)
        con.execute("BEGIN TRANSACTION")
        for name in [*rows, *added]:
            new_tables[name] = state_file.new_table_name(name, taken, next_version)
            taken.add(new_tables[name])
            target = state_file.table_ref(new_tables[name])
            con.execute(state_base_ddl(flow, name, target))
            if name in rows:
                con.register("_upgraded", rows[name])
                try:
                    con.execute(f"INSERT INTO {target} SELECT * FROM _upgraded")
                finally:
                    con.unregister("_upgraded")
        con.execute("COMMIT")
    except BaseException:
        with suppress(duckdb.Error):
            con.execute("ROLLBACK")
        folder.discard(new for _, new in rewritten)
        raise
    # 5.
    con.execute("BEGIN TRANSACTION")
    try:
        for name in [*rows, *added]:
            con.execute(f"DROP VIEW IF EXISTS {qualified(STATE, name)}")
        state_file.write_map(con, meta, new_tables)
        registry = qualified(SYSTEM, "segments")
        for name in latest.shape.tables:
            if name not in flow.tables:
                con.execute(f"DROP VIEW IF EXISTS {qualified(STATE, name)}")
                con.execute(f"DROP VIEW IF EXISTS {qualified(DELTA, name)}")
                con.execute(
                    f"DELETE FROM {registry} WHERE relation = ? AND name = ?", [DELTA, name]
                )
        for sink in latest.shape.sinks:
            if sink not in flow.sinks:
                con.execute(f"DROP VIEW IF EXISTS {qualified(OUTPUTS, sink)}")
                con.execute(
                    f"DELETE FROM {registry} WHERE relation = ? AND name = ?", [OUTPUTS, sink]
                )
        for old, new in rewritten:
            con.execute(f"DELETE FROM {registry} WHERE file = ?", [old.file])
            con.execute(
                f"INSERT INTO {registry} VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    new.relation,
                    new.name,
                    new.file,
                    new.first_batch,
                    new.last_batch,
                    new.rows,
                    new.level,
                ],
            )
        shape = plan.new
        con.execute(
            f"INSERT OR REPLACE INTO {meta} VALUES ('fingerprint', ?)", [shape.fingerprint()]
        )
        version = record_version(con, next_version, shape, watermark)
        if hook is not None:
            hook("switching")
        # 6.
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        folder.discard(new for _, new in rewritten)
        raise
    # 7.
    con.execute("BEGIN TRANSACTION")
    try:
        state_file.drop_orphans(con, new_tables.values())
        con.execute("COMMIT")
    except duckdb.Error as exc:  # the switch stands; the next opening drops them
        with suppress(duckdb.Error):
            con.execute("ROLLBACK")
        logger.warning("state tables the upgrade replaced not dropped: %s", exc)
    folder.discard(old for old, _ in rewritten)
    schemas = segment_schemas(flow)
    for key in {(new.relation, new.name) for _, new in rewritten} | set(schemas):
        if key in schemas:
            folder.ensure_anchor(key[0], key[1], schemas[key])
    if hook is not None:
        hook("switched")
    seconds = time.perf_counter() - started
    converted = sum(t.num_rows for t in rows.values())
    logger.info(
        "staging upgraded version=%s after_batch=%s rows=%s segments=%s seconds=%.2f",
        version.version,
        watermark,
        converted,
        len(rewritten),
        seconds,
    )
    return StagingSwitch(plan, version, watermark, converted, len(rewritten), seconds)


def _registered(con: duckdb.DuckDBPyConnection) -> list[Segment]:
    rows = con.execute(
        "SELECT relation, name, file, first_batch, last_batch, rows, level "
        f"FROM {qualified(SYSTEM, 'segments')} ORDER BY first_batch"
    ).fetchall()
    return [
        Segment(str(r), str(n), str(f), int(a), int(b), int(c), int(lv))
        for r, n, f, a, b, c, lv in rows
    ]


def _sink_columns(flow: CompiledDataflow, sink: str) -> dict[str, object]:
    from staging.layout import output_columns

    return dict(output_columns(flow, sink))
