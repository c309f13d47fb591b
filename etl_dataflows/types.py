"""Column types of dataflow schemas and state tables, and their Arrow and Python forms.

The engine knows six column types. Inside the engine (expressions, state, the serial executor) a
value is a plain Python scalar or ``None`` (null):

============  ==========================  =====================================================
type          Arrow type                  Python value inside the engine
============  ==========================  =====================================================
``int64``     ``int64``                   ``int``
``float64``   ``float64``                 ``float``
``bool``      ``bool``                    ``bool``
``string``    ``string``                  ``str``
``timestamp`` ``timestamp('us')``         ``int`` microseconds since the Unix epoch
``date``      ``date32``                  ``int`` days since the Unix epoch
============  ==========================  =====================================================

Event timestamps (the ``_ts`` column) are ``int64`` microseconds, so ``timestamp`` values and
``_ts`` compare directly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal, TypeAlias, get_args

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

ColumnType = Literal["int64", "float64", "bool", "string", "timestamp", "date"]
COLUMN_TYPES: tuple[ColumnType, ...] = get_args(ColumnType)

#: Microseconds per day, to turn ``_ts`` into a ``date``.
MICROS_PER_DAY = 86_400_000_000

#: Meta columns every event carries through the dataflow. ``_ts``: event time (µs);
#: ``_pos``: position of the event in its source; ``_src``: index of the source in the dataflow.
TS, POS, SRC = "_ts", "_pos", "_src"
META_COLUMNS: tuple[str, ...] = (TS, POS, SRC)
META_TYPES: dict[str, ColumnType] = {TS: "int64", POS: "int64", SRC: "int64"}

_ARROW: dict[ColumnType, pa.DataType] = {
    "int64": pa.int64(),
    "float64": pa.float64(),
    "bool": pa.bool_(),
    "string": pa.string(),
    "timestamp": pa.timestamp("us"),
    "date": pa.date32(),
}

Schema = dict[str, ColumnType]
SchemaSpec: TypeAlias = "Mapping[str, str] | pa.Schema"


def arrow_type(column_type: ColumnType) -> pa.DataType:
    """The Arrow type that stores ``column_type``."""
    return _ARROW[column_type]


def column_type_of(arrow: pa.DataType) -> ColumnType:
    """The engine type for an Arrow type; raises ``TypeError`` when the engine has none."""
    if pa.types.is_integer(arrow):
        return "int64"
    if pa.types.is_floating(arrow) or pa.types.is_decimal(arrow):
        return "float64"
    if pa.types.is_boolean(arrow):
        return "bool"
    if pa.types.is_string(arrow) or pa.types.is_large_string(arrow):
        return "string"
    if pa.types.is_dictionary(arrow) and pa.types.is_string(arrow.value_type):
        return "string"
    if pa.types.is_timestamp(arrow):
        return "timestamp"
    if pa.types.is_date(arrow):
        return "date"
    raise TypeError(f"Arrow type {arrow} has no streamdi column type; use one of {COLUMN_TYPES}")


def check_column_type(name: str, value: str) -> ColumnType:
    """``value`` as a column type, or ``ValueError`` naming the column and the allowed types."""
    if value not in COLUMN_TYPES:
        raise ValueError(f"column {name!r} has type {value!r}; expected one of {COLUMN_TYPES}")
    return value


def to_schema(spec: SchemaSpec) -> Schema:
    """Normalize a ``{name: type}`` mapping or a ``pyarrow.Schema`` to an engine schema."""
    if isinstance(spec, pa.Schema):
        return {field.name: column_type_of(field.type) for field in spec}
    return {name: check_column_type(name, str(kind)) for name, kind in spec.items()}


def arrow_schema(schema: Mapping[str, ColumnType | None]) -> pa.Schema:
    """The Arrow schema of an engine schema; a ``None`` (unknown) type becomes ``null``."""
    return pa.schema(
        [
            (name, arrow_type(kind) if kind is not None else pa.null())
            for name, kind in schema.items()
        ]
    )


def python_values(column: pa.Array | pa.ChunkedArray, column_type: ColumnType) -> list[Any]:
    """The column's values as engine Python scalars (timestamps and dates as integers)."""
    values: list[Any] = python_arrow(column, column_type).to_pylist()
    return values


#: Column types whose equal values :func:`shared_python_values` makes one Python object: strings
#: and the integers of dates and timestamps repeat (a status, a state, a batch's date); int64 and
#: float64 columns are mostly keys and amounts, and ``True``/``False`` are shared anyway.
SHARED_TYPES: frozenset[ColumnType] = frozenset({"string", "timestamp", "date"})


def shared_python_values(column: pa.Array | pa.ChunkedArray, column_type: ColumnType) -> list[Any]:
    """As :func:`python_values`, but equal values of a :data:`SHARED_TYPES` column are one Python
    object, not one per row (``to_pylist`` makes a new ``str`` for every row). For values that
    stay in memory a long time, such as an executor's state: TPC-DI's Prospect rows took 92 MB as
    dicts at SF 10, 67 MB with their values shared."""
    if column_type not in SHARED_TYPES:
        return python_values(column, column_type)
    return list(shared_objects(python_arrow(column, column_type)))


def python_arrow(
    column: pa.Array | pa.ChunkedArray, column_type: ColumnType
) -> pa.Array | pa.ChunkedArray:
    """The column in the Arrow type whose ``to_pylist`` gives engine values."""
    if column_type == "timestamp":
        return column.cast(pa.timestamp("us")).cast(pa.int64())
    if column_type == "date":
        return column.cast(pa.date32()).cast(pa.int32())
    if pa.types.is_dictionary(column.type):
        return column.cast(column.type.value_type)
    return column


def dictionary_encoded(column: pa.Array | pa.ChunkedArray) -> pa.DictionaryArray:
    """The column as one dictionary array: as it is if it is one already, else Arrow's dictionary
    encoding of it (its distinct values in order of first appearance, nulls as null indices)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_dictionary(column.type):
        return column
    encoded: pa.DictionaryArray = pc.dictionary_encode(column)
    return encoded


def shared_objects(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The column's values as a numpy object array (None for null) in which equal values are one
    Python object: each distinct value is converted once (Arrow's dictionary encoding)."""
    encoded = dictionary_encoded(column)
    distinct = np.empty(len(encoded.dictionary) + 1, dtype=object)  # the last one: null
    distinct[:-1] = encoded.dictionary.to_pylist()
    indices = pc.fill_null(encoded.indices, len(encoded.dictionary))
    taken: np.ndarray = distinct[np.asarray(indices.to_numpy(zero_copy_only=False), np.int64)]
    return taken


def arrow_array(values: Iterable[Any], column_type: ColumnType | None) -> pa.Array:
    """Build an Arrow array from engine Python scalars; ``None`` type lets Arrow infer it."""
    values = list(values)
    if column_type is None:
        return pa.array(values)
    if column_type == "timestamp":
        return pa.array(values, type=pa.int64()).cast(pa.timestamp("us"))
    if column_type == "date":
        return pa.array(values, type=pa.int32()).cast(pa.date32())
    return pa.array(values, type=_ARROW[column_type])


def accepts(declared: ColumnType, given: ColumnType | None) -> bool:
    """Whether a value of type ``given`` may be stored in a column of type ``declared``.

    ``None`` (a type the engine cannot infer, e.g. a Python function without ``returns``) is
    accepted and checked when the value is stored. Integers widen to floats; ``int64`` values are
    accepted for ``timestamp`` and ``date`` (they are the same thing inside the engine).
    """
    if given is None or given == declared:
        return True
    if declared == "float64" and given == "int64":
        return True
    return declared in ("timestamp", "date") and given == "int64"


def coerce_value(value: Any, column_type: ColumnType | None) -> Any:
    """``value`` as the engine value of ``column_type``; ``TypeError`` when it is of another type,
    ``ValueError`` when it is out of the type's range (an int beyond int64, or beyond float64).

    Integers widen to floats; nothing else converts implicitly (a float is not an int64, a number
    is not a string). ``None`` passes. A ``None`` type accepts anything.
    """
    if value is None or column_type is None:
        return value
    if column_type == "float64":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(f"expected float64, got {type(value).__name__} {value!r}")
        try:
            return float(value)
        except OverflowError as exc:  # an int beyond the float64 range
            raise ValueError(f"{value} leaves the float64 range") from exc
    if column_type in ("int64", "timestamp", "date"):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"expected {column_type}, got {type(value).__name__} {value!r}")
        if not -(2**63) <= value < 2**63:
            raise ValueError(f"{value} leaves the int64 range")
        return value
    if column_type == "bool":
        if not isinstance(value, bool):
            raise TypeError(f"expected bool, got {type(value).__name__} {value!r}")
        return value
    if not isinstance(value, str):
        raise TypeError(f"expected string, got {type(value).__name__} {value!r}")
    return value
