"""The serial executor: the oracle that defines the engine's semantics.

One transaction at a time, in event-time order (``_ts``, ties by input row order), in plain Python
over dicts. It is kept simple on purpose; every other executor must reproduce its results exactly.

Semantics of one transaction (one input row of a transactional step):

1. The operations run in declaration order; each sees the effects of the earlier ones.
2. An operation whose ``when`` is not true is skipped (its results read as null).
3. A null key, a value of the wrong type, an integer overflow or an exception raised by a user
   function aborts the transaction as an *error*: it is recorded in the aborts and the event is
   dead-lettered with the reason.
4. A ``require`` that is not true, a missing row with ``if_missing="abort"``, an existing key on
   ``insert`` with ``if_exists="abort"``, an ``as_of`` after the event time, a history change dated
   before the current version, or a late window entry aborts the transaction as a *condition*.
5. Otherwise the transaction commits: its changes stay, its surrogate keys are consumed, and its
   output row (if the step emits and ``when`` holds) is produced.

An aborted transaction leaves no trace in the state: an undo log restores every container it
touched, surrogate-key counters included. The same undo log restores the state before the batch if
the batch fails as a whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import pyarrow as pa

from etl_dataflows.batch import TableDelta
from etl_dataflows.dataflow import CompiledDataflow, Dataflow
from etl_dataflows.executors.base import AbortRecord, BaseExecutor, TransactionOutcome
from etl_dataflows.executors.window_summary import WindowSummary, aggregate_entries
from etl_dataflows.expressions import ExpressionError, ScalarFn, Scope, compile_scalar
from etl_dataflows.state import StateImage, columns_getter, row_id_getter, rows_to_table
from etl_dataflows.stateless import DeadLetters, build_output, describe_error, event_rows
from etl_dataflows.tables import (
    AT,
    ENTRY,
    OPEN_END,
    VALID_FROM,
    VALID_TO,
    HistoryTable,
    StateTable,
    Table,
    WindowTable,
)
from etl_dataflows.transaction import Operation, TransactionStep
from etl_dataflows.types import POS, SRC, TS, ColumnType, coerce_value

Key = tuple[Any, ...]
Row = dict[str, Any]


class RowStore(Protocol):
    """Rows of a plain table that another executor holds (see ``shared_rows`` of
    :class:`SerialExecutor`): a key -> row mapping that tracks its own changes and answers
    ``update_where`` lookups."""

    def get(self, key: Key, default: Row | None = None) -> Row | None: ...
    def __contains__(self, key: object) -> bool: ...
    def __getitem__(self, key: Key) -> Row: ...
    def __setitem__(self, key: Key, row: Row) -> None: ...
    def pop(self, key: Key, default: Row | None = None) -> Row | None: ...
    def __delitem__(self, key: Key) -> None: ...
    def keys_with(self, column: str, value: Any) -> list[Key]: ...


class _Abort(Exception):
    """A transaction aborts; ``kind`` is ``condition`` or ``error``."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason


@dataclass
class OpResult:
    """What an operation left for later operations and the output."""

    before: Row | None
    after: Row | None
    found: bool | None
    count: int | None = None


@dataclass
class _CompiledOp:
    op: Operation
    table: StateTable
    key: list[ScalarFn]
    values: dict[str, ScalarFn]
    when: ScalarFn | None
    requires: list[tuple[ScalarFn, str]]
    as_of: ScalarFn | None
    at: ScalarFn | None
    effective: ScalarFn | None
    #: the table's key column names and value column types (looked up once, not per event)
    key_names: tuple[str, ...]
    value_types: dict[str, ColumnType]
    #: per value column, where a value of the wrong type is reported (formatted once)
    value_wheres: dict[str, str]


class SerialExecutor(BaseExecutor):
    """Plain-Python, one transaction at a time; the oracle (see the module docstring).

    ``shared_rows`` (for a composing executor, see :mod:`etl_dataflows.executors.local`) gives
    plain tables whose rows another executor holds: this one reads and writes them through the
    given :class:`RowStore` (undo included), leaves their change tracking, index and image to
    their holder (no deltas or image rows of its own for them), and takes their surrogate-key
    counters from the holder through :meth:`set_sequence` / :meth:`sequence`.
    """

    name: ClassVar[str] = "serial"

    def __init__(
        self,
        flow: Dataflow | CompiledDataflow,
        state: StateImage | None = None,
        *,
        shared_rows: Mapping[str, RowStore] | None = None,
    ) -> None:
        self._shared: dict[str, RowStore] = dict(shared_rows or {})
        super().__init__(flow, state)

    # -- state -------------------------------------------------------------------------------------
    # Every mutation goes through _set/_delete, which record undo entries; lists are replaced,
    # never changed in place, so an undo entry is just (container, key, had, previous value).
    #   Table:   rows[table][key] -> row
    #   History: versions[table][sk] -> version; current[table][key] -> sk; keys[table][key] -> [sk]
    #   Window:  entries[table][key] -> [entry] sorted by (_at, _entry)
    #   Indexes: index[table][column][value] -> keys: every key whose current row holds that value
    #            in that indexed column, and perhaps keys that held it once (entries are only ever
    #            added, so an undone change cannot lose one; a lookup checks each key's row)

    def _load_state(self, image: StateImage) -> None:
        self._rows: dict[str, dict[Key, Row]] = {}
        self._versions: dict[str, dict[int, Row]] = {}
        self._current: dict[str, dict[Key, int]] = {}
        self._keys: dict[str, dict[Key, list[int]]] = {}
        self._entries: dict[str, dict[Key, list[Row]]] = {}
        #: per window table and key, the running aggregates of its entries (.window_summary)
        self._summaries: dict[str, dict[Key, WindowSummary]] = {}
        self._sequences: dict[str, int] = {}
        for name, table in self.flow.tables.items():
            keyof = columns_getter(table.key_names)
            if name in self._shared:
                if not isinstance(table, Table):
                    raise ValueError(f"only plain tables are shared, {name!r} is not one")
                self._rows[name] = self._shared[name]  # type: ignore[assignment]
                self._sequences[name] = image.sequences.get(name, table.surrogate_start)
                continue
            if isinstance(table, Table):
                rows = image.rows(table)
                self._rows[name] = {keyof(r): r for r in rows}
                start = table.surrogate_start
                used = [r[table.surrogate] for r in rows] if table.surrogate else []
            elif isinstance(table, HistoryTable):
                rows = image.rows(table, order_by=(VALID_FROM, table.surrogate))
                self._versions[name] = {r[table.surrogate]: r for r in rows}
                self._current[name] = {
                    keyof(r): r[table.surrogate] for r in rows if r[VALID_TO] == OPEN_END
                }
                keys: dict[Key, list[int]] = {}
                surrogate = table.surrogate
                for r in rows:  # by (valid from, surrogate key): each key's versions in order
                    keys.setdefault(keyof(r), []).append(r[surrogate])
                self._keys[name] = keys
                start = table.surrogate_start
                used = [r[table.surrogate] for r in rows]
            else:
                # by key, then (at, entry): each key's entries in order, and made one after
                # another, so that they lie together in memory (made in time order, a key's
                # entries were spread over all of them: reading the ~30 of one key missed the
                # cache each time, ~12 us a key against ~1 at TPC-DI's SF 100)
                rows = image.rows(table, order_by=(*table.key_names, AT, ENTRY))
                entries: dict[Key, list[Row]] = {}
                for r in rows:
                    entries.setdefault(keyof(r), []).append(r)
                self._entries[name] = entries
                start = 1
                used = [r[ENTRY] for r in rows]
            floor = max(used) + 1 if used else start
            self._sequences[name] = max(image.sequences.get(name, start), floor)
        self._index: dict[str, dict[str, dict[Any, set[Key]]]] = {}
        for name, table in self.flow.tables.items():
            if name in self._shared:
                continue  # (their holder indexes them: RowStore.keys_with)
            if isinstance(table, Table | HistoryTable) and table.indexes:
                self._index[name] = {column: {} for column in table.indexes}
                for key in self._rows[name] if isinstance(table, Table) else self._current[name]:
                    self._note_indexed(table, key, self.current_row(table, key))
        self._undo: list[tuple[dict[Any, Any], Any, bool, Any]] = []
        self._touched: dict[str, dict[Key, list[Row]]] = {}
        self._compiled: dict[str, list[_CompiledOp]] = {}
        #: The delta of a table no transaction touched, by table (Arrow tables never change).
        self._no_change: dict[str, TableDelta] = {}

    def state_image(self) -> StateImage:
        """The image of every table this executor holds (shared tables: their holder's)."""
        tables = {}
        for name, table in self.flow.tables.items():
            if name not in self._shared:
                tables[name] = rows_to_table(table, self._all_rows(table))
        sequences = {n: v for n, v in self._sequences.items() if n not in self._shared}
        return StateImage(tables, sequences)

    def set_sequence(self, table: str, value: int) -> None:
        """Take a shared table's surrogate-key counter from its holder (before a step)."""
        self._sequences[table] = value

    def sequence(self, table: str) -> int:
        """A table's surrogate-key counter (a shared table's, to hand back to its holder)."""
        return self._sequences[table]

    def _all_rows(self, table: StateTable) -> list[Row]:
        if isinstance(table, Table):
            return list(self._rows[table.name].values())
        if isinstance(table, HistoryTable):
            return list(self._versions[table.name].values())
        return [e for entries in self._entries[table.name].values() for e in entries]

    def _key_rows(self, table: StateTable, key: Key) -> list[Row]:
        """The image rows that belong to ``key`` (the unit of change tracking)."""
        name = table.name
        if isinstance(table, Table):
            row = self._rows[name].get(key)
            return [] if row is None else [row]
        if isinstance(table, HistoryTable):
            return [self._versions[name][sk] for sk in self._keys[name].get(key, [])]
        return self._entries[name].get(key, [])  # (a stored list is never changed in place)

    def _touch(self, table: StateTable, key: Key) -> None:
        if table.name in self._shared:
            return  # (its holder tracks changes)
        touched = self._touched.setdefault(table.name, {})
        if key not in touched:
            # the rows themselves, not copies: a stored row is never changed in place (a change
            # stores a new dict, see the state comment above), so a row still stored at the end
            # of the batch is the very object taken here
            touched[key] = self._key_rows(table, key)

    def _set(self, container: dict[Any, Any], key: Any, value: Any) -> None:
        had = key in container
        self._undo.append((container, key, had, container.get(key)))
        container[key] = value

    def _delete(self, container: dict[Any, Any], key: Any) -> None:
        self._undo.append((container, key, True, container[key]))
        del container[key]

    def _undo_to(self, mark: int) -> None:
        while len(self._undo) > mark:
            container, key, had, value = self._undo.pop()
            if had:
                container[key] = value
            else:
                container.pop(key, None)

    def _note_indexed(self, table: StateTable, key: Key, row: Row | None) -> None:
        """Add ``key`` under ``row``'s value of every indexed column of ``table`` (see the state
        comment above: entries are never removed while a batch may be undone)."""
        columns = self._index.get(table.name)
        if not columns or row is None:
            return
        for column, by_value in columns.items():
            value = row.get(column)
            if value is not None:
                keys = by_value.get(value)
                if keys is None:
                    by_value[value] = {key}
                else:
                    keys.add(key)

    def _next_sequence(self, table: StateTable) -> int:
        value = self._sequences[table.name]
        self._set(self._sequences, table.name, value + 1)
        return value

    # -- batch bookkeeping -------------------------------------------------------------------------

    def begin_batch(self) -> None:
        self._undo = []
        self._touched = {}

    def rollback_batch(self) -> None:
        self._undo_to(0)
        self._touched = {}

    def end_batch(self) -> tuple[dict[str, TableDelta], dict[str, int]]:
        deltas = {}
        for name, table in self.flow.tables.items():
            if name in self._shared:
                continue  # (its holder gives the delta)
            if not self._touched.get(name):
                deltas[name] = self._unchanged(name, table)
                continue
            if isinstance(table, WindowTable):
                deltas[name] = self._window_delta(table, self._touched[name])
                continue
            row_id = row_id_getter(table)
            before: dict[Key, Row] = {}
            after: dict[Key, Row] = {}
            for key, rows in self._touched.get(name, {}).items():
                now = self._key_rows(table, key)
                kept = {id(r) for r in rows} & {id(r) for r in now}  # the same object: unchanged
                for r in rows:
                    if id(r) not in kept:
                        before[row_id(r)] = r
                for r in now:
                    if id(r) not in kept:
                        after[row_id(r)] = r
            upserts = [r for rid, r in after.items() if before.get(rid) != r]
            deletes = [r for rid, r in before.items() if rid not in after]
            deltas[name] = TableDelta(
                rows_to_table(table, upserts), rows_to_table(table, deletes, ids_only=True)
            )
        self._undo = []
        self._touched = {}
        sequences = {n: v for n, v in self._sequences.items() if n not in self._shared}
        return deltas, sequences

    def _window_delta(self, table: WindowTable, touched: dict[Key, list[Row]]) -> TableDelta:
        """The batch's delta of a window table: per touched key, the entries it dropped and those
        it added. A key's entries only ever change by dropping a prefix and appending (see
        :meth:`_window`; an undo puts back an earlier such list), so its list now is a suffix of
        its list before the batch followed by new entries: found by identity from the first
        entry kept, without comparing the entries the batch left alone."""
        upserts: list[Row] = []
        deletes: list[Row] = []
        for key, before in touched.items():
            now = self._key_rows(table, key)
            dropped = len(before)
            if now:
                first = now[0]
                for i, entry in enumerate(before):
                    if entry is first:
                        dropped = i
                        break
            kept = len(before) - dropped
            deletes.extend(before[:dropped])
            upserts.extend(now[kept:])
            assert kept == 0 or now[kept - 1] is before[-1], "window entries changed in place"
        return TableDelta(
            rows_to_table(table, upserts), rows_to_table(table, deletes, ids_only=True)
        )

    def _unchanged(self, name: str, table: StateTable) -> TableDelta:
        delta = self._no_change.get(name)
        if delta is None:
            delta = TableDelta(rows_to_table(table, []), rows_to_table(table, [], ids_only=True))
            self._no_change[name] = delta
        return delta

    # -- transactions ------------------------------------------------------------------------------

    def _compile(self, step: TransactionStep) -> list[_CompiledOp]:
        compiled = self._compiled.get(step.id)
        if compiled is None:
            compiled = []
            for op in step.operations:
                table = self.flow.tables[op.table]
                compiled.append(
                    _CompiledOp(
                        op=op,
                        table=table,
                        key=[compile_scalar(k) for k in op.key],
                        values={c: compile_scalar(e) for c, e in op.values.items()},
                        when=None if op.when is None else compile_scalar(op.when),
                        requires=[(compile_scalar(r.condition), r.reason) for r in op.requires],
                        as_of=None if op.as_of is None else compile_scalar(op.as_of),
                        at=None if op.at is None else compile_scalar(op.at),
                        effective=None if op.effective is None else compile_scalar(op.effective),
                        key_names=table.key_names,
                        value_types=table.value_types,
                        value_wheres={c: f"{op.label()} column {c!r}" for c in table.value_types},
                    )
                )
            self._compiled[step.id] = compiled
        return compiled

    def run_transactions(
        self, step: TransactionStep, events: pa.Table, dead: DeadLetters, early: Any = None
    ) -> TransactionOutcome:
        ops = self._compile(step)
        in_schema = self.flow.schemas[step.input or ""]
        out_schema = self.flow.schemas[step.id]
        emit = {name: compile_scalar(e) for name, e in step.emit_columns.items()}
        wheres = {name: f"output {name!r}" for name in emit}
        emit_when = None if step.emit_when is None else compile_scalar(step.emit_when)
        rows = event_rows(events, in_schema)
        order = sorted(range(len(rows)), key=lambda i: (rows[i][TS], i))
        out_columns: dict[str, list[Any]] = {name: [] for name in out_schema}
        out_meta: dict[str, list[int]] = {TS: [], POS: [], SRC: []}
        aborts: list[AbortRecord] = []
        committed = 0
        for i in order:
            row = rows[i]
            mark = len(self._undo)
            results: list[OpResult | None] = [None] * len(ops)
            try:
                for cop in ops:
                    results[cop.op.index] = self._apply(cop, row, results)
                scope = Scope(row, None, results)
                emitted: dict[str, Any] | None = None
                emits = step.emit_columns or step.emit_input
                if emits and (emit_when is None or emit_when(scope) is True):
                    emitted = {name: fn(scope) for name, fn in emit.items()}
                    for name, value in emitted.items():
                        emitted[name] = _coerce(value, out_schema[name], wheres[name])
            except _Abort as abort:
                self._undo_to(mark)
                aborts.append(self._abort_record(step.id, row, abort.kind, abort.reason))
                if abort.kind == "error":
                    dead.add_row(step.id, row, abort.reason)
                continue
            except ExpressionError as exc:
                self._undo_to(mark)
                reason = describe_error(exc)
                aborts.append(self._abort_record(step.id, row, "error", reason))
                dead.add_row(step.id, row, reason)
                continue
            committed += 1
            if emitted is not None:
                for name in out_schema:
                    out_columns[name].append(emitted[name] if name in emitted else row.get(name))
                for name in (TS, POS, SRC):
                    out_meta[name].append(row[name])
        output = build_output(out_columns, out_schema, out_meta)
        return TransactionOutcome(output=output, committed=committed, aborts=aborts)

    def _abort_record(self, step: str, row: Row, kind: str, reason: str) -> AbortRecord:
        source = self.flow.sources[row[SRC]]
        return AbortRecord(step, source, row[POS], row[TS], kind, reason)

    # -- one operation -----------------------------------------------------------------------------

    def _apply(self, cop: _CompiledOp, row: Row, results: list[OpResult | None]) -> OpResult | None:
        op, table = cop.op, cop.table
        scope = Scope(row, None, results)
        if cop.when is not None and cop.when(scope) is not True:
            return None
        if op.kind == "update_where":
            return self._update_where(cop, row, results)
        key = tuple(fn(scope) for fn in cop.key)
        if any(part is None for part in key):
            raise _Abort("error", f"{op.label()}: null key {list(table.key_names)}")
        index = 0
        try:  # (the error's text is made only when a key does not fit: this runs per row)
            for index, part in enumerate(key):
                coerce_value(part, table.key[index][1])
        except (TypeError, ValueError) as exc:
            raise _Abort("error", f"{op.label()} key {table.key[index][0]!r}: {exc}") from exc
        if isinstance(table, WindowTable):
            return self._window(cop, key, row, results)
        old_row = self.current_row(table, key)
        if op.kind == "read":
            if op.as_of is not None:
                at = cop.as_of(scope) if cop.as_of else None
                if at is None:
                    raise _Abort("error", f"{op.label()}: as_of is null")
                if at > row[TS]:
                    raise _Abort("condition", f"{op.label()}: as_of {at} is after the event time")
                assert isinstance(table, HistoryTable)
                old_row = self._version_at(table, key, at)
            if old_row is None and op.if_missing == "abort":
                raise _Abort("condition", f"{op.label()}: no row for key {list(key)}")
            self._check(cop, row, old_row, results)
            return OpResult(old_row, old_row, old_row is not None)
        if op.kind == "delete":
            if old_row is None:
                if op.if_missing == "abort":
                    raise _Abort("condition", f"{op.label()}: no row for key {list(key)}")
                return OpResult(None, None, False)
            self._check(cop, row, old_row, results)
            self._remove(cop, key, row, results)
            return OpResult(old_row, None, True)
        if op.kind == "insert" and old_row is not None:
            if op.if_exists == "abort":
                raise _Abort("condition", f"{op.label()}: key {list(key)} already exists")
            if op.if_exists == "skip":
                return OpResult(old_row, old_row, True)
        if op.kind == "update" and old_row is None:
            if op.if_missing == "abort":
                raise _Abort("condition", f"{op.label()}: no row for key {list(key)}")
            if op.if_missing == "skip":
                return OpResult(None, None, False)
        # An update that creates its row (if_missing="insert") works on the table's defaults.
        seen = old_row
        if seen is None and op.kind == "update":
            seen = {**dict(zip(cop.key_names, key, strict=True)), **table.defaults}
        self._check(cop, row, seen, results)
        base = seen if op.kind in ("update", "insert") else None
        new_values = self._values(cop, row, seen, results, base)
        new_row = self._store(cop, key, new_values, row, results)
        return OpResult(old_row, new_row, old_row is not None)

    def _check(self, cop: _CompiledOp, row: Row, old_row: Row | None, results: list[Any]) -> None:
        scope = Scope(row, old_row, results)
        for fn, reason in cop.requires:
            if fn(scope) is not True:
                raise _Abort("condition", f"{cop.op.label()}: {reason}")

    def _values(
        self,
        cop: _CompiledOp,
        row: Row,
        old_row: Row | None,
        results: list[Any],
        base: Row | None,
    ) -> Row:
        """The new value columns: ``base`` (or the defaults) overlaid with the operation's values,
        every expression evaluated against the row before the operation."""
        table = cop.table
        scope = Scope(row, old_row, results)
        computed = {name: fn(scope) for name, fn in cop.values.items()}
        values = {}
        name = ""
        try:  # (the error's text is made only when a value does not fit: this runs per row)
            for name, kind in cop.value_types.items():
                if name in computed:
                    value = computed[name]
                elif base is not None:
                    value = base.get(name)
                else:
                    value = table.defaults.get(name)
                values[name] = coerce_value(value, kind)
        except (TypeError, ValueError) as exc:
            raise _Abort("error", f"{cop.op.label()} column {name!r}: {exc}") from exc
        return values

    def current_row(self, table: StateTable, key: Key) -> Row | None:
        """The row of ``key`` as the state holds it now (of a history table: its current
        version; a window table has no single row: None). The row is the state's own: read it,
        never change it. Part of the interface a composing executor uses (the ``local``
        executor's pre-reads of tables this executor holds)."""
        if isinstance(table, Table):
            return self._rows[table.name].get(key)
        if isinstance(table, HistoryTable):
            sk = self._current[table.name].get(key)
            return None if sk is None else self._versions[table.name][sk]
        return None

    def current_rows(self, table: StateTable, keys: list[Key]) -> list[Row | None]:
        """:meth:`current_row` of each of ``keys``, in order (one call for a batch's distinct
        keys: the ``local`` executor's pre-reads)."""
        if isinstance(table, Table):
            return list(map(self._rows[table.name].get, keys))
        if isinstance(table, HistoryTable):
            current, versions = self._current[table.name], self._versions[table.name]
            return [None if sk is None else versions[sk] for sk in map(current.get, keys)]
        return [None] * len(keys)

    def _version_at(self, table: HistoryTable, key: Key, at: int) -> Row | None:
        for sk in self._keys[table.name].get(key, []):
            version = self._versions[table.name][sk]
            if version[VALID_FROM] <= at < version[VALID_TO]:
                return version
        return None

    def _effective(self, cop: _CompiledOp, row: Row, results: list[Any]) -> int:
        if cop.effective is None:
            return int(row[TS])
        value = cop.effective(Scope(row, None, results))
        if value is None:
            raise _Abort("error", f"{cop.op.label()}: effective time is null")
        return int(value)

    def _store(self, cop: _CompiledOp, key: Key, values: Row, row: Row, results: list[Any]) -> Row:
        table = cop.table
        self._touch(table, key)
        if isinstance(table, Table):
            rows = self._rows[table.name]
            existing = rows.get(key)
            new_row: Row = dict(zip(cop.key_names, key, strict=True))
            if table.surrogate:
                new_row[table.surrogate] = (
                    existing[table.surrogate]
                    if existing is not None
                    else self._next_sequence(table)
                )
            new_row.update(values)
            self._set(rows, key, new_row)
            self._note_indexed(table, key, new_row)
            return new_row
        assert isinstance(table, HistoryTable)
        return self._new_version(cop, table, key, values, self._effective(cop, row, results))

    def _new_version(
        self, cop: _CompiledOp, table: HistoryTable, key: Key, values: Row, when: int
    ) -> Row:
        name = table.name
        versions = self._versions[name]
        current_sk = self._current[name].get(key)
        if current_sk is not None:
            current = versions[current_sk]
            if when < current[VALID_FROM]:
                raise _Abort(
                    "condition",
                    f"{cop.op.label()}: change at {when} is before the current version of key "
                    f"{list(key)} (valid from {current[VALID_FROM]})",
                )
            if table.period_of(when) == current[table.effective]:
                replaced = {**current, **values}
                self._set(versions, current_sk, replaced)
                self._note_indexed(table, key, replaced)
                return replaced
            closed = {
                **current,
                table.end: table.period_of(when),
                table.current: False,
                VALID_TO: when,
            }
            self._set(versions, current_sk, closed)
        sk = self._next_sequence(table)
        version: Row = dict(zip(cop.key_names, key, strict=True))
        version[table.surrogate] = sk
        version.update(values)
        version[table.effective] = table.period_of(when)
        version[table.end] = table.end_of_time
        version[table.current] = True
        version[VALID_FROM] = when
        version[VALID_TO] = OPEN_END
        self._set(versions, sk, version)
        self._set(self._current[name], key, sk)
        self._set(self._keys[name], key, [*self._keys[name].get(key, []), sk])
        self._note_indexed(table, key, version)
        return version

    def _remove(self, cop: _CompiledOp, key: Key, row: Row, results: list[Any]) -> None:
        table = cop.table
        self._touch(table, key)
        if isinstance(table, Table):
            self._delete(self._rows[table.name], key)
            return
        assert isinstance(table, HistoryTable)
        when = self._effective(cop, row, results)
        sk = self._current[table.name][key]
        current = self._versions[table.name][sk]
        if when < current[VALID_FROM]:
            raise _Abort(
                "condition",
                f"{cop.op.label()}: delete at {when} is before the current version of key "
                f"{list(key)} (valid from {current[VALID_FROM]})",
            )
        closed = {**current, table.end: table.period_of(when), table.current: False, VALID_TO: when}
        self._set(self._versions[table.name], sk, closed)
        self._delete(self._current[table.name], key)

    def _update_where(self, cop: _CompiledOp, row: Row, results: list[Any]) -> OpResult:
        table, op = cop.table, cop.op
        column = op.index_column or ""
        value = cop.key[0](Scope(row, None, results))
        if value is None:
            return OpResult(None, None, None, 0)
        shared = self._shared.get(table.name)
        if shared is not None:
            candidates: Any = shared.keys_with(column, value)
        else:
            candidates = self._index[table.name][column].get(value, ())
        matches = sorted(
            k
            for k in candidates
            if (found := self.current_row(table, k)) is not None and found.get(column) == value
        )
        for key in matches:
            old_row = self.current_row(table, key)
            self._check(cop, row, old_row, results)
            new_values = self._values(cop, row, old_row, results, old_row)
            self._store(cop, key, new_values, row, results)
        return OpResult(None, None, None, len(matches))

    def _window(self, cop: _CompiledOp, key: Key, row: Row, results: list[Any]) -> OpResult:
        table = cop.table
        assert isinstance(table, WindowTable)
        scope = Scope(row, None, results)
        at = int(row[TS]) if cop.at is None else cop.at(scope)
        if at is None:
            raise _Abort("error", f"{cop.op.label()}: window time is null")
        entries = self._entries[table.name].get(key, [])
        found = bool(entries)
        latest = entries[-1][AT] if entries else None  # (a key's entries are in (at, entry) order)
        if latest is not None and at < latest:
            raise _Abort(
                "condition",
                f"{cop.op.label()}: window entry at {at} is older than the key's latest ({latest})",
            )
        self._check(cop, row, None, results)
        # at is at or after every entry: the visible entries are those after at - span, a suffix
        floor = at - table.span
        start = 0
        while start < len(entries) and entries[start][AT] <= floor:
            start += 1
        if cop.values:
            computed = {name: fn(scope) for name, fn in cop.values.items()}
            entry: Row = dict(zip(cop.key_names, key, strict=True))
            entry[ENTRY] = self._next_sequence(table)
            entry[AT] = at
            wheres = cop.value_wheres
            for name, kind in cop.value_types.items():
                entry[name] = _coerce(computed.get(name), kind, wheres[name])
            kept = entries[start:]
            kept.append(entry)  # (at > floor: the span is positive)
            self._touch(table, key)
            self._set(self._entries[table.name], key, kept)
            return OpResult(None, self._summary(table, key, entries, kept).aggregates(table), found)
        return OpResult(None, aggregate_entries(table, entries[start:]), found)

    def _summary(
        self, table: WindowTable, key: Key, entries: list[Row], kept: list[Row]
    ) -> WindowSummary:
        """The summary of ``kept``, the entries that replace ``entries`` as ``key``'s (see
        :mod:`.window_summary`): the summary of ``entries`` advanced, or a new one when the
        key has none of that very list (the first change of the key in this process, or after
        an undo)."""
        summaries = self._summaries.setdefault(table.name, {})
        summary = summaries.get(key)
        if summary is None or summary.source is not entries:
            summary = summaries[key] = WindowSummary.of(table, entries)
        summary.advance(kept, entries[: len(entries) - len(kept) + 1])
        return summary


def _coerce(value: Any, kind: ColumnType | None, where: str) -> Any:
    try:
        return coerce_value(value, kind)
    except (TypeError, ValueError) as exc:
        raise _Abort("error", f"{where}: {exc}") from exc
