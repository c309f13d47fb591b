"""An upgrade plan: every difference between a stored dataflow shape and a new definition, typed,
with what an upgrade does about it.

:func:`plan_upgrade` compares the :class:`~etl_dataflows.evolution.shape.DataflowShape` a store
holds with a new :class:`~etl_dataflows.dataflow.CompiledDataflow` and lists each change
(:data:`ChangeKind`) with its :data:`Action`:

* ``in_place`` — an upgrade applies it at a batch boundary and keeps every row: a table, sink,
  source or step added or removed (a removed table or column only with ``allow_drop``); a value
  column added (its stored rows take the column's fill expression, else its default, else null);
  a type widened (:data:`WIDENINGS`); a column renamed by a declared mapping
  (:meth:`~etl_dataflows.dataflow.Dataflow.rename_column`); a default or a step's logic changed
  (they apply to the batches after the switch); a change of a table with a declared migration
  function (:meth:`~etl_dataflows.dataflow.Dataflow.migrate`), which rewrites its rows.
* ``reprocess`` — the stored rows cannot be carried over by themselves (a key or a table's kind
  changed, a type narrowed, a generated column added): only a migration function, or recomputing
  the table from retained input, can fill the new form. An in-place upgrade refuses these until a
  migration function is declared; or the table is declared under a new name, which an upgrade
  adds empty and ``streamdi upgrade reprocess`` then fills from the retained input.
* ``refused`` — nothing an upgrade can do keeps the data right (a source column's type narrowed:
  events already in Kafka would no longer parse); or a drop without ``allow_drop``.

Every change that is not ``in_place`` carries ``way_out``: what to declare or run instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from etl_dataflows.dataflow import CompiledDataflow
from etl_dataflows.evolution.shape import WIDENINGS, DataflowShape, TableShape, describe_flow
from etl_dataflows.types import ColumnType

Action = Literal["in_place", "reprocess", "refused"]
ChangeKind = Literal[
    "table_added",
    "table_removed",
    "table_kind_changed",
    "column_added",
    "column_removed",
    "column_renamed",
    "type_widened",
    "type_narrowed",
    "key_changed",
    "default_changed",
    "fill_changed",
    "options_changed",
    "sink_added",
    "sink_removed",
    "sink_column_added",
    "sink_column_removed",
    "sink_type_changed",
    "source_added",
    "source_removed",
    "source_column_added",
    "source_column_removed",
    "source_type_widened",
    "source_type_narrowed",
    "step_added",
    "step_removed",
    "step_logic_changed",
]


@dataclass(frozen=True)
class Change:
    """One difference and what an upgrade does about it (see the module docstring)."""

    kind: ChangeKind
    subject: str
    """What changed: ``accounts``, ``accounts.balance``, ``source transfers.amount``, ..."""
    detail: str
    action: Action
    reason: str
    way_out: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "subject": self.subject,
            "detail": self.detail,
            "action": self.action,
            "reason": self.reason,
            "way_out": self.way_out,
        }


@dataclass
class UpgradePlan:
    """What an upgrade from ``old`` (the stored shape) to ``new`` changes."""

    flow: str
    old: DataflowShape
    new: DataflowShape
    changes: list[Change] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        """True when the new definition is the stored one (digests equal)."""
        return self.old.digest() == self.new.digest()

    @property
    def layout_changed(self) -> bool:
        """Whether the stores' layout changes (else only step logic or defaults do)."""
        return self.old.fingerprint() != self.new.fingerprint()

    @property
    def blocking(self) -> list[Change]:
        """The changes an in-place upgrade cannot make (reprocess or refused)."""
        return [c for c in self.changes if c.action != "in_place"]

    @property
    def applicable(self) -> bool:
        """Whether ``upgrade apply`` can make every change in place."""
        return not self.blocking

    def changed_tables(self) -> list[str]:
        """State tables present before and after whose stored rows change form."""
        kinds = {
            "column_added",
            "column_removed",
            "column_renamed",
            "type_widened",
            "type_narrowed",
            "key_changed",
            "table_kind_changed",
        }
        names = {c.subject.split(".", 1)[0] for c in self.changes if c.kind in kinds}
        return sorted(n for n in names if n in self.old.tables and n in self.new.tables)

    def to_json(self) -> dict[str, Any]:
        return {
            "dataflow": self.flow,
            "from": {"fingerprint": self.old.fingerprint(), "digest": self.old.digest()},
            "to": {"fingerprint": self.new.fingerprint(), "digest": self.new.digest()},
            "applicable": self.applicable,
            "changes": [c.to_json() for c in self.changes],
        }

    def render(self, *, advice: bool = True) -> str:
        """The plan as text: one line per change, then what to run (without ``advice``: the
        changes only, for a plan already applied)."""
        if self.empty:
            return f"dataflow {self.flow!r}: no changes (digest {self.new.digest()})"
        lines = [
            f"dataflow {self.flow!r}: {len(self.changes)} change(s) "
            f"(digest {self.old.digest()} -> {self.new.digest()})"
        ]
        width = max((len(c.kind) for c in self.changes), default=0)
        for c in self.changes:
            label = {"in_place": "in place", "reprocess": "REPROCESS", "refused": "REFUSED"}
            lines.append(
                f"  {label[c.action]:<9} {c.kind:<{width}}  {c.subject}"
                + (f" ({c.detail})" if c.detail else "")
            )
            lines.append(f"            {c.reason}")
            if c.way_out:
                lines.append(f"            way out: {c.way_out}")
        if advice and self.applicable:
            lines.append(
                "every change applies in place: run `streamdi upgrade apply <module:attribute>` "
                "(or `streamdi run --upgrade`)"
            )
        elif advice:
            lines.append(
                f"{len(self.blocking)} change(s) cannot apply in place; see each way out above"
            )
        return "\n".join(lines)


def plan_upgrade(
    old: DataflowShape, new: CompiledDataflow, *, allow_drop: bool = False
) -> UpgradePlan:
    """Compare the stored shape ``old`` with ``new``; see the module docstring."""
    shape = describe_flow(new)
    plan = UpgradePlan(new.name, old, shape)
    changes = plan.changes
    for name in sorted(set(old.tables) | set(shape.tables)):
        before, after = old.tables.get(name), shape.tables.get(name)
        if before is None and after is not None:
            changes.append(
                Change(
                    "table_added",
                    name,
                    after.kind,
                    "in_place",
                    "created empty at the switch (`streamdi upgrade reprocess` can then fill "
                    "it from the retained input)",
                )
            )
        elif after is None and before is not None:
            changes.append(_drop("table_removed", name, before.kind, allow_drop))
        elif before is not None and after is not None:
            changes.extend(
                _table_changes(
                    before,
                    after,
                    new.renames.get(name, {}),
                    name in new.migrations,
                    allow_drop,
                )
            )
    changes.extend(_sink_changes(old.sinks, shape.sinks))
    changes.extend(_source_changes(old.sources, shape.sources))
    for step in sorted(set(old.steps) | set(shape.steps)):
        was, now = old.steps.get(step), shape.steps.get(step)
        either = was if was is not None else now
        if either is not None and either.kind in ("source", "sink"):
            continue  # listed as a source or sink change
        if was is None and now is not None:
            changes.append(
                Change("step_added", step, now.kind, "in_place", "runs from the first batch after")
            )
        elif now is None and was is not None:
            changes.append(
                Change(
                    "step_removed", step, was.kind, "in_place", "no longer runs after the switch"
                )
            )
        elif (
            was is not None
            and now is not None
            and (was.logic, was.kind, was.inputs)
            != (
                now.logic,
                now.kind,
                now.inputs,
            )
        ):
            changes.append(
                Change(
                    "step_logic_changed",
                    step,
                    f"{was.logic or was.kind} -> {now.logic or now.kind}",
                    "in_place",
                    "state is kept; batches after the switch run the new code; to recompute "
                    "the rows stored before, run `streamdi upgrade reprocess "
                    "<module:attribute> TABLE...` after the upgrade",
                )
            )
    return plan


def _drop(kind: ChangeKind, subject: str, detail: str, allow_drop: bool) -> Change:
    if allow_drop:
        return Change(
            kind,
            subject,
            detail,
            "in_place",
            "dropped from staging at the switch; the warehouses keep what they hold",
        )
    return Change(
        kind,
        subject,
        detail,
        "refused",
        "its stored values would be lost",
        "run `streamdi upgrade apply --allow-drop` to drop them, or declare "
        "`flow.rename_column(...)` if it was renamed",
    )


def _table_changes(
    before: TableShape,
    after: TableShape,
    renames: Mapping[str, str],
    migrated: bool,
    allow_drop: bool,
) -> list[Change]:
    name = after.name
    out: list[Change] = []
    migration_note = "the declared migration function rewrites its rows"
    if before.kind != after.kind or before.row_id != after.row_id or before.key != after.key:
        kind: ChangeKind = "table_kind_changed" if before.kind != after.kind else "key_changed"
        detail = (
            f"{before.kind} -> {after.kind}"
            if before.kind != after.kind
            else f"{_pairs(before.key)} -> {_pairs(after.key)}"
        )
        if migrated:
            out.append(Change(kind, name, detail, "in_place", migration_note))
        else:
            out.append(
                Change(
                    kind,
                    name,
                    detail,
                    "reprocess",
                    "rows are identified by the key: the stored rows cannot be re-keyed by "
                    "themselves; only recomputing the table from retained input could fill it",
                    f"declare `flow.migrate({name!r}, fn)` to rewrite them, or declare the "
                    "table under a new name (added empty; `streamdi upgrade reprocess "
                    "<module:attribute> NEW_NAME` then fills it from the retained input)",
                )
            )
        return out
    renamed_from = {new: old for old, new in renames.items() if old in before.columns}
    old_columns, new_columns = before.columns, after.columns
    for column, kind_new in new_columns.items():
        source = renamed_from.get(column, column)
        subject = f"{name}.{column}"
        if source not in old_columns and column not in after.values and not migrated:
            out.append(
                Change(
                    "column_added",
                    subject,
                    kind_new,
                    "reprocess",
                    "a generated column (surrogate key, history or window column) has no value "
                    "for the stored rows",
                    f"declare `flow.migrate({name!r}, fn)` to compute it, or declare the table "
                    "under a new name (added empty; `streamdi upgrade reprocess "
                    "<module:attribute> NEW_NAME` then fills it from the retained input)",
                )
            )
            continue
        if source not in old_columns:
            fill = after.fills.get(column)
            how = (
                f"stored rows take {fill}"
                if fill is not None
                else f"stored rows take the default {after.defaults[column]!r}"
                if column in after.defaults
                else "stored rows take null (no default or fill declared)"
            )
            out.append(Change("column_added", subject, kind_new, "in_place", how))
            continue
        if source != column:
            out.append(
                Change(
                    "column_renamed",
                    subject,
                    f"{source} -> {column}",
                    "in_place",
                    "renamed in staging and every warehouse; values kept",
                )
            )
        kind_old = old_columns[source]
        if kind_old != kind_new:
            if (kind_old, kind_new) in WIDENINGS:
                out.append(
                    Change(
                        "type_widened",
                        subject,
                        f"{kind_old} -> {kind_new}",
                        "in_place",
                        "every stored value converts exactly",
                    )
                )
            elif migrated:
                out.append(
                    Change(
                        "type_narrowed",
                        subject,
                        f"{kind_old} -> {kind_new}",
                        "in_place",
                        migration_note,
                    )
                )
            else:
                out.append(
                    Change(
                        "type_narrowed",
                        subject,
                        f"{kind_old} -> {kind_new}",
                        "reprocess",
                        "stored values may not fit the new type",
                        f"declare `flow.migrate({name!r}, fn)` to convert them, or declare the "
                        "column under a new name",
                    )
                )
    kept = {renamed_from.get(c, c) for c in new_columns}
    for column in old_columns:
        if column not in kept:
            subject = f"{name}.{column}"
            if migrated:
                out.append(
                    Change(
                        "column_removed", subject, old_columns[column], "in_place", migration_note
                    )
                )
            else:
                out.append(_drop("column_removed", subject, old_columns[column], allow_drop))
    for column in sorted(set(before.defaults) | set(after.defaults)):
        if column in new_columns and renamed_from.get(column, column) in old_columns:
            was, now = before.defaults.get(column), after.defaults.get(column)
            if was != now:
                out.append(
                    Change(
                        "default_changed",
                        f"{name}.{column}",
                        f"{was!r} -> {now!r}",
                        "in_place",
                        "applies to rows inserted after the switch",
                    )
                )
    for column in sorted(set(before.fills) | set(after.fills)):
        was_fill, now_fill = before.fills.get(column), after.fills.get(column)
        if was_fill != now_fill and renamed_from.get(column, column) in old_columns:
            out.append(
                Change(
                    "fill_changed",
                    f"{name}.{column}",
                    f"{was_fill} -> {now_fill}",
                    "in_place",
                    "a fill only applies when a column is added; nothing to do",
                )
            )
    if before.options != after.options:
        out.append(
            Change(
                "options_changed",
                name,
                _options_diff(before.options, after.options),
                "in_place",
                "applies to the batches after the switch",
            )
        )
    return out


def _sink_changes(
    old: Mapping[str, Mapping[str, ColumnType | None]],
    new: Mapping[str, Mapping[str, ColumnType | None]],
) -> list[Change]:
    out: list[Change] = []
    for sink in sorted(set(old) | set(new)):
        before, after = old.get(sink), new.get(sink)
        if before is None:
            out.append(
                Change(
                    "sink_added",
                    sink,
                    "",
                    "in_place",
                    "delivers the batches after the switch (not the earlier ones)",
                )
            )
        elif after is None:
            out.append(
                Change(
                    "sink_removed",
                    sink,
                    "",
                    "in_place",
                    "no longer written; the warehouses keep the rows they hold",
                )
            )
        else:
            for column, kind in after.items():
                if column not in before:
                    out.append(
                        Change(
                            "sink_column_added",
                            f"{sink}.{column}",
                            str(kind),
                            "in_place",
                            "rows delivered before the switch have it null",
                        )
                    )
                elif before[column] != kind:
                    widened = (before[column], kind) in WIDENINGS
                    out.append(
                        Change(
                            "sink_type_changed",
                            f"{sink}.{column}",
                            f"{before[column]} -> {kind}",
                            "in_place" if widened else "refused",
                            "every delivered value converts exactly"
                            if widened
                            else "rows already delivered may not fit the new type",
                            None
                            if widened
                            else "deliver the new type under a new sink name (and remove or keep "
                            "the old sink)",
                        )
                    )
            for column in before:
                if column not in after:
                    out.append(
                        Change(
                            "sink_column_removed",
                            f"{sink}.{column}",
                            str(before[column]),
                            "in_place",
                            "rows delivered after the switch have it null in the "
                            "warehouses, which keep the column",
                        )
                    )
    return out


def _source_changes(
    old: Mapping[str, Mapping[str, ColumnType]], new: Mapping[str, Mapping[str, ColumnType]]
) -> list[Change]:
    out: list[Change] = []
    for source in sorted(set(old) | set(new)):
        before, after = old.get(source), new.get(source)
        if before is None:
            out.append(
                Change(
                    "source_added",
                    f"source {source}",
                    "",
                    "in_place",
                    "read from the first batch after the switch",
                )
            )
        elif after is None:
            out.append(
                Change(
                    "source_removed",
                    f"source {source}",
                    "",
                    "in_place",
                    "no longer read; its events left in Kafka stay unread",
                )
            )
        else:
            for column, kind in after.items():
                subject = f"source {source}.{column}"
                if column not in before:
                    out.append(
                        Change(
                            "source_column_added",
                            subject,
                            kind,
                            "in_place",
                            "events without it read it as null",
                        )
                    )
                elif before[column] != kind:
                    if (before[column], kind) in WIDENINGS:
                        out.append(
                            Change(
                                "source_type_widened",
                                subject,
                                f"{before[column]} -> {kind}",
                                "in_place",
                                "every event still parses",
                            )
                        )
                    else:
                        out.append(
                            Change(
                                "source_type_narrowed",
                                subject,
                                f"{before[column]} -> {kind}",
                                "refused",
                                "events already in Kafka may no longer parse",
                                "read the new type from a new source name, or convert it in a "
                                "`flow.map` step after the source",
                            )
                        )
            for column in before:
                if column not in after:
                    out.append(
                        Change(
                            "source_column_removed",
                            f"source {source}.{column}",
                            before[column],
                            "in_place",
                            "ignored in events from the switch on",
                        )
                    )
    return out


def _pairs(columns: Mapping[str, Any]) -> str:
    return "(" + ", ".join(f"{n} {t}" for n, t in columns.items()) + ")"


def _options_diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> str:
    keys = sorted(set(before) | set(after))
    return ", ".join(
        f"{k}: {before.get(k)!r} -> {after.get(k)!r}" for k in keys if before.get(k) != after.get(k)
    )
