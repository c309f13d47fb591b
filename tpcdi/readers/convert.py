"""Checked conversion of text columns to their registry types, row by row in vectors.

The fast path of every reader lets Arrow convert while parsing; only when a column holds a value
that does not parse does a reader fall back to this module, which converts each column with a
validity mask so that one bad value rejects one line, not the file.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tpcdi.readers.registry import Field

_INT = r"^\s*[+-]?\d{1,18}\s*$"
_FLOAT = r"^\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\s*$"
_TIME = r"^\d{2}:[0-5]\d:[0-5]\d$"
TRUE_VALUES = ["1", "true", "True", "TRUE"]
FALSE_VALUES = ["0", "false", "False", "FALSE"]


def _strptime(column: pa.Array, fmt: str) -> pa.Array:
    return pc.strptime(column, format=fmt, unit="s", error_is_null=True)


def convert_column(column: pa.Array, target: pa.DataType) -> tuple[pa.Array, np.ndarray]:
    """``column`` (strings, nulls allowed) converted to ``target``, and a mask of the rows whose
    non-null value could not be converted (those rows hold null in the result)."""
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    present = column.is_valid()
    if pa.types.is_string(target):
        return column, np.zeros(len(column), dtype=bool)
    if pa.types.is_integer(target) or pa.types.is_floating(target):
        ok = pc.match_substring_regex(column, _INT if pa.types.is_integer(target) else _FLOAT)
        good = pc.and_kleene(present, ok)
        result = pc.cast(pc.utf8_trim_whitespace(pc.if_else(good, column, None)), target)
    elif pa.types.is_boolean(target):
        truth = pc.is_in(column, pa.array(TRUE_VALUES))
        good = pc.or_(truth, pc.is_in(column, pa.array(FALSE_VALUES)))
        result = pc.if_else(good, truth, pa.scalar(None, pa.bool_()))
    elif pa.types.is_date(target):
        parsed = _strptime(column, "%Y-%m-%d")
        good = parsed.is_valid()
        result = pc.cast(parsed, target)
    elif pa.types.is_timestamp(target):
        parsed = _strptime(column, "%Y-%m-%d %H:%M:%S")
        good = parsed.is_valid()
        result = pc.cast(parsed, target)
    elif pa.types.is_time(target):
        good = pc.and_kleene(present, pc.match_substring_regex(column, _TIME))
        text = pc.if_else(good, column, None)
        parts = [pc.cast(pc.utf8_slice_codeunits(text, i, i + 2), pa.int32()) for i in (0, 3, 6)]
        seconds = pc.add(pc.add(pc.multiply(parts[0], 3600), pc.multiply(parts[1], 60)), parts[2])
        good = pc.and_kleene(good, pc.less(parts[0], 24))
        result = pc.cast(pc.if_else(good, seconds, None), target)
    else:  # pragma: no cover - the registry uses only the types above
        raise TypeError(f"no conversion to {target}")
    failed = pc.and_(present, pc.invert(pc.fill_null(good, False)))
    return result, failed.to_numpy(zero_copy_only=False)


def convert_table(
    strings: pa.Table, fields: Sequence[Field]
) -> tuple[pa.Table, np.ndarray, list[str]]:
    """Convert every column of ``strings`` to its field's type.

    Returns the converted table (all rows), a mask of rows with at least one value that did not
    convert, and for each row a reason (empty string when the row is fine).
    """
    reasons = [""] * strings.num_rows
    bad = np.zeros(strings.num_rows, dtype=bool)
    columns = []
    for spec in fields:
        converted, failed = convert_column(strings.column(spec.name), spec.type)
        columns.append(converted)
        if failed.any():
            raw = strings.column(spec.name)
            for row in np.flatnonzero(failed):
                note = f"{spec.name}: cannot read {raw[int(row)].as_py()!r} as {spec.type}"
                reasons[row] = f"{reasons[row]}; {note}" if reasons[row] else note
            bad |= failed
    table = pa.table(columns, names=[f.name for f in fields])
    return table, bad, reasons
