"""Digests of Arrow tables: equal for equal column names, types and values in the same row order,
however the columns are chunked, and made from the arrays' buffers (no Python object per value:
a table of millions of rows digests in C time)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def table_digest(hasher: Any, table: pa.Table) -> None:
    """Feed ``table``'s column names, row count and values into ``hasher`` (a ``hashlib``
    object)."""
    hasher.update(",".join(table.column_names).encode())
    hasher.update(str(table.num_rows).encode())
    for column in table.columns:
        column_digest(hasher, column)


def column_digest(hasher: Any, column: pa.ChunkedArray | pa.Array) -> None:
    """Feed one column's type, validity and values into ``hasher``."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_dictionary(array.type):
        array = array.cast(array.type.value_type)
    hasher.update(str(array.type).encode())
    valid = np.asarray(array.is_valid().to_numpy(zero_copy_only=False), dtype=np.bool_)
    hasher.update(valid.tobytes())
    kind = array.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind):
        _strings_digest(hasher, pc.fill_null(array.cast(pa.large_string()), ""))
    elif pa.types.is_null(kind):
        hasher.update(str(len(array)).encode())
    else:
        if pa.types.is_date32(kind):
            array = array.cast(pa.int32())
        elif pa.types.is_timestamp(kind) or pa.types.is_date64(kind):
            array = array.cast(pa.int64())
        filled = array.fill_null(False if pa.types.is_boolean(array.type) else 0)
        hasher.update(np.ascontiguousarray(filled.to_numpy(zero_copy_only=False)).tobytes())


def _strings_digest(hasher: Any, array: pa.Array) -> None:
    """Every string's length, then their bytes, from a large-string array without nulls."""
    if not len(array):
        return
    _, offsets_buffer, data = array.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=np.int64)[
        array.offset : array.offset + len(array) + 1
    ]
    hasher.update(np.diff(offsets).tobytes())
    if data is not None:
        hasher.update(memoryview(data)[int(offsets[0]) : int(offsets[-1])])
