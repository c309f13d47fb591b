"""The shape of a dataflow: what its stores are laid out by and what its steps do, as plain data.

Staging and every warehouse keep the shape of the dataflow version they hold (as JSON, in their
layout history), so an upgrade can compare it with a new definition without the old code
(:mod:`etl_dataflows.evolution.plan`). A :class:`DataflowShape` has:

* per state table its kind, key, image columns with types (in image order), row id, defaults,
  fills and the options of its kind (surrogate, history columns, window span and aggregates);
* per source its schema, per sink its output columns (the meta columns included);
* per step its kind, inputs and a *logic digest*: a hash of everything the step does (its
  expressions, and the code of the Python functions it calls, including their constants and the
  values they close over), so a changed function body changes the digest and a reformatted file
  does not.

Two digests summarize a shape: :meth:`DataflowShape.fingerprint` covers what the stores are laid
out by (tables, sources, sinks; it equals the fingerprint staging and the warehouses checked
before shapes were kept), :meth:`DataflowShape.digest` everything, steps included.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import hashlib
import io
import json
import pickle
import types
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from etl_dataflows.dataflow import CompiledDataflow, SinkStep, Step
from etl_dataflows.expressions import Call, describe
from etl_dataflows.tables import HistoryTable, StateTable, Table, WindowTable
from etl_dataflows.transaction import TransactionStep
from etl_dataflows.types import META_COLUMNS, ColumnType

#: Type changes an upgrade makes in place: every value of the old type has one in the new type
#: (the cast is exact; int64 above 2**53 rounds in float64, as everywhere in the engine).
WIDENINGS: frozenset[tuple[ColumnType, ColumnType]] = frozenset(
    {("int64", "float64"), ("date", "timestamp"), ("bool", "int64")}
)


@dataclass(frozen=True)
class TableShape:
    """One state table as the stores lay it out (see the module docstring)."""

    name: str
    kind: str
    key: dict[str, ColumnType]
    columns: dict[str, ColumnType]
    """The image columns with their types, in image order (key and generated columns too)."""
    row_id: tuple[str, ...]
    values: tuple[str, ...]
    """The value columns (those operations set, defaults and fills name)."""
    defaults: dict[str, Any]
    fills: dict[str, str]
    """Per value column, its fill expression as text (what the plan shows)."""
    options: dict[str, Any]


@dataclass(frozen=True)
class StepShape:
    """One step: kind, inputs and the digest of its logic."""

    id: str
    kind: str
    inputs: tuple[str, ...]
    logic: str


@dataclass(frozen=True)
class DataflowShape:
    """See the module docstring."""

    name: str
    tables: dict[str, TableShape]
    sources: dict[str, dict[str, ColumnType]]
    sinks: dict[str, dict[str, ColumnType | None]]
    steps: dict[str, StepShape]
    renames: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)
    """The column renames this version declares (``{table: {old: new}}``): a store that skipped
    this version applies them on its way to a later one."""

    def fingerprint(self) -> str:
        """A digest of what the stores' layout depends on (tables, sources, sinks)."""
        shape = {
            "tables": {
                name: {
                    "kind": table.kind,
                    "columns": table.columns,
                    "row_id": list(table.row_id),
                }
                for name, table in sorted(self.tables.items())
            },
            "sources": self.sources,
            "sinks": self.sinks,
        }
        return _digest(shape)

    def digest(self) -> str:
        """A digest of the whole shape: the layout and every step's logic."""
        return _digest(self.to_json())

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "tables": {n: dataclasses.asdict(t) for n, t in self.tables.items()},
            "sources": self.sources,
            "sinks": self.sinks,
            "steps": {n: dataclasses.asdict(s) for n, s in self.steps.items()},
            "renames": self.renames,
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DataflowShape:
        tables = {
            n: TableShape(
                name=t["name"],
                kind=t["kind"],
                key=dict(t["key"]),
                columns=dict(t["columns"]),
                row_id=tuple(t["row_id"]),
                values=tuple(t["values"]),
                defaults=dict(t["defaults"]),
                fills=dict(t["fills"]),
                options=dict(t["options"]),
            )
            for n, t in data["tables"].items()
        }
        steps = {
            n: StepShape(s["id"], s["kind"], tuple(s["inputs"]), s["logic"])
            for n, s in data["steps"].items()
        }
        return cls(
            name=data["name"],
            tables=tables,
            sources={n: dict(s) for n, s in data["sources"].items()},
            sinks={n: dict(s) for n, s in data["sinks"].items()},
            steps=steps,
            renames={t: dict(r) for t, r in data.get("renames", {}).items()},
        )

    @classmethod
    def loads(cls, text: str) -> DataflowShape:
        return cls.from_json(json.loads(text))


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def sink_output_columns(flow: CompiledDataflow, sink: str) -> dict[str, ColumnType | None]:
    """The columns of a sink's output rows, meta columns included.

    A sink's rows are its input step's rows; the engine leaves a sink's own schema empty, so the
    columns come from the input step then."""
    columns: dict[str, ColumnType | None] = dict(flow.schemas[sink])
    if not columns:
        upstream = getattr(flow.step(sink), "input", None)
        if upstream is not None:
            columns = dict(flow.schemas[upstream])
    for meta in META_COLUMNS:
        columns[meta] = "int64"
    return columns


def table_shape(table: StateTable) -> TableShape:
    """The shape of one declared state table."""
    options: dict[str, Any] = {}
    if isinstance(table, Table):
        options = {"surrogate": table.surrogate, "surrogate_start": table.surrogate_start}
    elif isinstance(table, HistoryTable):
        options = {
            "surrogate": table.surrogate,
            "surrogate_start": table.surrogate_start,
            "effective": table.effective,
            "end": table.end,
            "current": table.current,
            "period": table.period,
        }
    elif isinstance(table, WindowTable):
        options = {
            "span": table.span,
            "aggregates": {n: [a.kind, a.column] for n, a in table.aggregates.items()},
        }
    return TableShape(
        name=table.name,
        kind=table.kind,
        key=dict(table.key),
        columns=dict(table.image_columns()),
        row_id=tuple(table.row_id()),
        values=tuple(n for n, _ in table.columns),
        defaults={n: _plain(v) for n, v in table.defaults.items()},
        fills={n: describe(e) for n, e in table.fills.items()},
        options=options,
    )


def describe_flow(flow: CompiledDataflow) -> DataflowShape:
    """The shape of ``flow`` (see the module docstring)."""
    token = _DATA_SEEN.set({})
    try:
        return _describe_flow(flow)
    finally:
        _DATA_SEEN.reset(token)


def _describe_flow(flow: CompiledDataflow) -> DataflowShape:
    return DataflowShape(
        name=flow.name,
        tables={n: table_shape(t) for n, t in sorted(flow.tables.items())},
        sources={s: _source_schema(flow, s) for s in flow.sources},
        sinks={s: sink_output_columns(flow, s) for s in flow.sinks},
        steps={s.id: _step_shape(s) for s in flow.steps},
        renames={t: dict(r) for t, r in sorted(flow.renames.items())},
    )


def _source_schema(flow: CompiledDataflow, source: str) -> dict[str, ColumnType]:
    return {n: t for n, t in flow.schemas[source].items() if t is not None}


def _step_shape(step: Step) -> StepShape:
    from etl_dataflows.dataflow import step_inputs

    kind = type(step).__name__.removesuffix("Step").lower()
    logic = "" if isinstance(step, SinkStep) else _digest(canonical(step))
    return StepShape(step.id, kind, tuple(step_inputs(step)), logic)


def _plain(value: Any) -> Any:
    """A JSON value for a default (what it is, for the plan)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)


# ---------------------------------------------------------------------------------------------
# logic digests

#: How deep :func:`canonical` follows closed-over values and attributes.
_DEPTH = 8

#: A dict, list, tuple or set with more entries than this that holds only plain data (str, int,
#: float, bool, None, and such containers) is digested in one pass of C code
#: (:func:`_data_digest`) instead of value by value: a step that closes over lookup data (TPC-DI's
#: per-symbol earnings, ~2.4 M values at SF 10) made every opening of staging take ~20 s.
LARGE_DATA = 1_000

_PLAIN = frozenset({str, int, float, bool, type(None)})


class _NotPlain(Exception):
    """A value :func:`_plain_form` cannot put in canonical order."""


def _plain_form(obj: Any, depth: int) -> Any:
    """``obj`` as nested tuples in canonical order (mappings and sets sorted), or
    :class:`_NotPlain`. Containers whose members are all of :data:`_PLAIN` types are checked
    and ordered by C code alone."""
    kind = type(obj)
    if kind in _PLAIN:
        return obj
    if depth <= 0:
        raise _NotPlain
    try:
        if kind is dict:
            if set(map(type, obj.values())) <= _PLAIN:
                items = sorted(obj.items())
            else:
                items = sorted((k, _plain_form(v, depth - 1)) for k, v in obj.items())
            if not set(map(type, obj)) <= _PLAIN:
                raise _NotPlain
            return ("dict", tuple(items))
        if kind is list or kind is tuple:
            if set(map(type, obj)) <= _PLAIN:
                return (kind.__name__, tuple(obj))
            return (kind.__name__, tuple(_plain_form(v, depth - 1) for v in obj))
        if kind is set or kind is frozenset:
            if not set(map(type, obj)) <= _PLAIN:
                raise _NotPlain
            return ("set", tuple(sorted(obj)))
    except TypeError as exc:  # members that do not order among themselves (1 and "a")
        raise _NotPlain from exc
    raise _NotPlain


#: Digests of large containers already made during one :func:`describe_flow`, by ``id`` (the
#: object is kept beside its digest so that its id cannot be reused meanwhile): several steps
#: closing over the same lookup data digest it once.
_DATA_SEEN: contextvars.ContextVar[dict[int, tuple[Any, list[str] | None]] | None] = (
    contextvars.ContextVar("streamdi_data_seen", default=None)
)


def _pickled(form: Any) -> bytes:
    """``form`` (nested tuples of plain values) pickled without the memo: every object is
    written in full, so the bytes follow the contents alone, not which equal strings or tuples
    happen to be one object (the memo made equal data from two processes digest differently);
    and faster. A plain form is a tree, so nothing recurses forever."""
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, protocol=5)
    pickler.fast = True
    pickler.dump(form)
    return buffer.getvalue()


def _data_digest(obj: Any, depth: int) -> list[str] | None:
    """``["data", <sha256>]`` for a large container of plain data (see :data:`LARGE_DATA`):
    equal for equal contents, whatever the insertion order; None for anything else."""
    if not isinstance(obj, dict | list | tuple | set | frozenset) or len(obj) <= LARGE_DATA:
        return None
    seen = _DATA_SEEN.get()
    if seen is not None and id(obj) in seen:
        return seen[id(obj)][1]
    try:
        form = _plain_form(obj, depth)
    except _NotPlain:
        digest = None
    else:
        digest = ["data", hashlib.sha256(_pickled(form)).hexdigest()]
    if seen is not None:
        seen[id(obj)] = (obj, digest)
    return digest


def canonical(obj: Any, depth: int = _DEPTH) -> Any:
    """A JSON value that is equal for two objects doing the same thing: expressions by structure,
    Python functions by their code (bytecode, constants, names, defaults and closed-over
    values), dataclasses and steps by their fields; a state table by its name; an object with a
    ``content_digest`` string attribute by that digest (lookup data that states its own, e.g.
    TPC-DI's reference data read from a warehouse). Line numbers and file names do not count,
    so moving a function in its file changes nothing."""
    if depth <= 0:
        return type(obj).__qualname__
    down = depth - 1
    if obj is None or isinstance(obj, bool | int | str):
        return obj
    if isinstance(obj, float):
        return repr(obj)
    if isinstance(obj, bytes):
        return hashlib.sha256(obj).hexdigest()
    if isinstance(obj, BaseStateTableTypes):
        return ["table", obj.name]
    content = getattr(obj, "content_digest", None)
    if isinstance(content, str):  # an object that states a digest of its own contents
        return ["data", content]
    if isinstance(obj, Call):
        return [
            "call",
            canonical(obj.fn, down),
            obj.returns,
            [canonical(a, down) for a in obj.args],
        ]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return [
            type(obj).__name__,
            {f.name: canonical(getattr(obj, f.name), down) for f in dataclasses.fields(obj)},
        ]
    if isinstance(obj, TransactionStep):
        return [
            "transact",
            obj.input,
            [canonical(op, down) for op in obj.operations],
            {n: canonical(e, down) for n, e in obj.emit_columns.items()},
            canonical(obj.emit_when, down),
            obj.emit_input,
        ]
    data = _data_digest(obj, depth)
    if data is not None:
        return data
    if isinstance(obj, Mapping):
        return sorted(([str(k), canonical(v, down)] for k, v in obj.items()), key=lambda kv: kv[0])
    if isinstance(obj, list | tuple):
        return [canonical(v, down) for v in obj]
    if isinstance(obj, set | frozenset):
        return sorted((canonical(v, down) for v in obj), key=repr)
    if isinstance(obj, functools.partial):
        return [
            "partial",
            canonical(obj.func, down),
            canonical(obj.args, down),
            canonical(obj.keywords, down),
        ]
    if isinstance(obj, types.MethodType):
        return ["method", canonical(obj.__func__, down), type(obj.__self__).__qualname__]
    if isinstance(obj, types.FunctionType):
        return _function(obj, down)
    if isinstance(obj, types.CodeType):
        return _code(obj, down)
    if isinstance(obj, types.BuiltinFunctionType | types.ModuleType | type):
        return ["ref", getattr(obj, "__module__", None), getattr(obj, "__qualname__", repr(obj))]
    if callable(obj):
        call = type(obj).__call__
        if isinstance(call, types.FunctionType):
            return ["callable", type(obj).__qualname__, _function(call, down)]
    return ["object", type(obj).__module__, type(obj).__qualname__]


def _function(fn: types.FunctionType, depth: int) -> Any:
    cells: list[Any] = []
    for cell in fn.__closure__ or ():
        try:
            cells.append(canonical(cell.cell_contents, depth))
        except ValueError:  # an empty cell
            cells.append(None)
    return [
        "function",
        _code(fn.__code__, depth),
        canonical(fn.__defaults__, depth),
        canonical(fn.__kwdefaults__, depth),
        cells,
    ]


def _code(code: types.CodeType, depth: int) -> Any:
    consts = [
        _code(c, depth) if isinstance(c, types.CodeType) else canonical(c, depth)
        for c in code.co_consts
    ]
    return [
        hashlib.sha256(code.co_code).hexdigest()[:16],
        consts,
        list(code.co_names),
        list(code.co_varnames),
    ]


BaseStateTableTypes = (Table, HistoryTable, WindowTable)
