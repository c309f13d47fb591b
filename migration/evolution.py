"""A warehouse target's switch to a new version of its dataflow, in one target transaction.

Staging switches first (:mod:`staging.upgrade`) and keeps the layout history
(:mod:`staging.history`); a target switches the next time it is opened
(:meth:`~migration.targets.base.BaseTarget.open`) and finds its stream recorded with the
fingerprint of an earlier version in that history. Batches it has not loaded yet are staged in
the new layout already (the staging upgrade converted them), so the target switches at its own
watermark ``w``, before loading anything more: its rows as of ``w`` converted by the same
:class:`~etl_dataflows.evolution.convert.RowConversion` staging used, then the converted batches
after ``w``: the same rows staging holds. :func:`upgrade_target`, in order:

1. BEGIN; take the stream's lock.
2. Read the stream's fingerprint again; if another process switched it meanwhile, ROLLBACK: done.
   Read the watermark ``w`` (the ledger).
3. Per state table whose rows change form: when the change only adds value columns, add them to
   the full and delta tables and fill them (the values computed by the conversion, bulk-loaded
   into a temporary table, set by one UPDATE per table); otherwise read its full and delta rows,
   convert them, drop and re-create both tables in the new layout, bulk-load the converted rows
   (COPY/Arrow).
4. Per sink whose columns change: add the new columns, widen the widened ones (the removed ones
   stay, null from now on). Create the tables of added state tables and sinks. Removed ones stay
   as they are (no longer written).
5. Set the stream's fingerprint; insert the new version in ``streamdi_migration.layouts`` with
   watermark ``w``.
6. COMMIT: the target is on the new layout with every row carried over, or (a crash or error
   before) on the old one, untouched; the next open switches it again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pyarrow as pa

from etl_dataflows.evolution.convert import ConversionError, RowConversion
from etl_dataflows.evolution.shape import DataflowShape
from etl_dataflows.types import META_COLUMNS
from migration.exceptions import TargetMismatch
from staging.history import LayoutVersion
from staging.layout import output_columns, q

if TYPE_CHECKING:
    from migration.schema import WarehouseLayout
    from migration.targets.base import BaseTarget

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TargetSwitch:
    """What :func:`upgrade_target` did (``version`` None: someone else had switched it)."""

    target: str
    version: int | None
    watermark: int
    rows: int
    seconds: float


def stored_version(history: Sequence[LayoutVersion], fingerprint: str) -> LayoutVersion | None:
    """The newest version of ``history`` whose layout fingerprint a target recorded as
    ``fingerprint`` (a target of a layout with plain sinks appends a suffix)."""
    base = fingerprint.split("-plain-", 1)[0]
    for entry in reversed(history):
        if entry.fingerprint == base:
            return entry
    return None


def upgrade_target(
    target: BaseTarget, stored: LayoutVersion, hook: Callable[[str], None] | None = None
) -> TargetSwitch:
    """Switch ``target`` from version ``stored`` to its layout's dataflow per the module
    docstring. Raises :class:`~migration.exceptions.TargetMismatch` when the stored rows cannot
    be converted (the target is left as it was). ``hook("target-switching")`` is called just
    before the COMMIT (kill -9 tests)."""
    layout = target.layout
    flow = layout.flow
    old: DataflowShape = stored.shape
    history = layout.history
    version = history[-1].version if history else stored.version + 1
    started = time.perf_counter()
    converted = 0
    # 1.
    target.begin()
    try:
        # 2.
        found = target.fetch(
            f"SELECT fingerprint FROM {layout.streams_name} WHERE stream = ?", [layout.stream]
        )
        if found and found[0][0] == layout.fingerprint:
            target.rollback()
            return TargetSwitch(target.name, None, 0, 0, 0.0)
        watermark = int(
            target.fetch(
                f"SELECT coalesce(max(batch_id), 0) FROM {layout.ledger_name} WHERE stream = ?",
                [layout.stream],
            )[0][0]
        )
        # 3.
        rebuilt: dict[str, tuple[pa.Table, pa.Table]] = {}
        for name, table in flow.tables.items():
            if name not in old.tables:
                continue
            conversion = RowConversion(
                old.tables[name],
                table,
                renames=composed_renames(history, stored.version, name),
                migrate=flow.migrations.get(name),
            )
            if conversion.identity:
                continue
            added = conversion.added_columns
            if added is not None:
                converted += _add_columns(target, name, conversion, added)
                continue
            full = target.driver.fetch_arrow(f"SELECT * FROM {layout.full_name(name)}")
            delta = target.driver.fetch_arrow(f"SELECT * FROM {layout.delta_name(name)}")
            rebuilt[name] = (
                conversion.convert(full),
                conversion.convert(delta, keep=("batch_id", "op")),
            )
        for name in rebuilt:
            target.execute(f"DROP TABLE {layout.full_name(name)}")
            target.execute(f"DROP TABLE {layout.delta_name(name)}")
        # 4.
        for sink in flow.sinks:
            before = old.sinks.get(sink)
            if before is None:
                continue
            for column, kind in output_columns(flow, sink).items():
                was = before.get(column)
                if was == kind or (sink in layout.plain and column in META_COLUMNS):
                    continue
                type_sql = target.sql_type(kind)
                for relation in _sink_relations(layout, sink):
                    if was is None:
                        target.execute(f"ALTER TABLE {relation} ADD COLUMN {q(column)} {type_sql}")
                    else:
                        target.execute(
                            f"ALTER TABLE {relation} ALTER COLUMN {q(column)} TYPE {type_sql}"
                        )
        target.create_missing_tables()
        for name, (full, delta) in rebuilt.items():
            if full.num_rows:
                target.bulk_insert(layout.full_name(name), full)
            if delta.num_rows:
                target.bulk_insert(layout.delta_name(name), delta)
            converted += full.num_rows + delta.num_rows
        # 5.
        target.execute(
            f"UPDATE {layout.streams_name} SET fingerprint = ? WHERE stream = ?",
            [layout.fingerprint, layout.stream],
        )
        record_target_version(target, version, watermark)
        if hook is not None:
            hook("target-switching")
        # 6.
        target.commit()
    except ConversionError as exc:
        target.rollback()
        raise TargetMismatch(
            target.name, f"its rows cannot be converted to the new layout: {exc}"
        ) from exc
    except BaseException:
        target.rollback()
        raise
    seconds = time.perf_counter() - started
    logger.info(
        "target upgraded target=%s version=%s after_batch=%s rows=%s seconds=%.2f",
        target.name,
        version,
        watermark,
        converted,
        seconds,
    )
    return TargetSwitch(target.name, version, watermark, converted, seconds)


def _add_columns(target: BaseTarget, name: str, conversion: RowConversion, added: list[str]) -> int:
    """Step 3 for a change that only adds value columns to state table ``name``: ALTER both
    tables, then fill the columns of the rows they hold. Returns the rows filled."""
    layout = target.layout
    types = conversion.new.image_columns()
    row_id = list(conversion.new.row_id())
    filled = 0
    for relation, keys in (
        (layout.full_name(name), row_id),
        (layout.delta_name(name), ["batch_id", *row_id]),
    ):
        for column in added:
            target.execute(
                f"ALTER TABLE {relation} ADD COLUMN {q(column)} {target.sql_type(types[column])}"
            )
        keep = ("batch_id",) if "batch_id" in keys else ()
        listed = ", ".join(q(c) for c in [*keep, *conversion.old.columns])
        rows = target.driver.fetch_arrow(f"SELECT {listed} FROM {relation}")
        if rows.num_rows == 0:
            continue
        new_rows = conversion.convert(rows, keep=keep).select([*keys, *added])
        if all(new_rows.column(c).null_count == new_rows.num_rows for c in added):
            continue  # nulls: what the added columns hold already
        temp = q(f"_streamdi_fill_{name}")
        target.execute(f"DROP TABLE IF EXISTS {temp}")
        columns_sql = ", ".join(
            f"{q(c)} {target.sql_type(types.get(c, 'int64'))}" for c in new_rows.column_names
        )
        target.execute(f"CREATE TEMPORARY TABLE {temp} ({columns_sql})")
        target.bulk_insert(temp, new_rows)
        sets = ", ".join(f"{q(c)} = t.{q(c)}" for c in added)
        match = " AND ".join(f"f.{q(k)} = t.{q(k)}" for k in keys)
        filled += target.execute(
            f"UPDATE {relation} AS f SET {sets} FROM {temp} AS t WHERE {match}"
        )
        target.execute(f"DROP TABLE {temp}")
    return filled


def composed_renames(history: Sequence[LayoutVersion], since: int, table: str) -> dict[str, str]:
    """``{column as of version since: its name now}`` for every column of ``table`` a version
    after ``since`` renamed (a target that skipped versions applies their renames in order)."""
    names: dict[str, str] = {}
    for entry in history:
        if entry.version <= since:
            continue
        for before, after in entry.shape.renames.get(table, {}).items():
            chained = [o for o, current in names.items() if current == before]
            for original in chained:
                names[original] = after
            if not chained:
                names[before] = after
    return {o: n for o, n in names.items() if o != n}


def _sink_relations(layout: WarehouseLayout, sink: str) -> list[str]:
    """A sink's full and delta tables (a plain sink's full table keeps its fixed columns)."""
    delta = layout.delta_name(sink)
    return [delta] if sink in layout.plain else [layout.full_name(sink), delta]


def record_target_version(target: BaseTarget, version: int, watermark: int) -> None:
    """Insert the layout history row of ``version`` (switched after ``watermark``) in the open
    transaction, unless the target has it."""
    layout = target.layout
    have = target.fetch(
        f"SELECT 1 FROM {layout.layouts_name} WHERE stream = ? AND version = ?",
        [layout.stream, version],
    )
    if have:
        return
    shape = layout.shape
    target.bulk_insert(
        layout.layouts_name,
        pa.table(
            {
                "stream": pa.array([layout.stream], pa.string()),
                "version": pa.array([version], pa.int64()),
                "fingerprint": pa.array([layout.fingerprint], pa.string()),
                "digest": pa.array([shape.digest()], pa.string()),
                "applied_at": pa.array(
                    [datetime.now(UTC).replace(tzinfo=None)], pa.timestamp("us")
                ),
                "watermark": pa.array([watermark], pa.int64()),
            }
        ),
    )
