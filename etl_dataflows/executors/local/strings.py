"""String values inside compiled kernels, as codes of one pool per executor.

A kernel holds no Python objects, so every string a compiled step moves (event values copied into
state, state values copied into outputs, literals, string state columns) is an ``int64`` *code*:
the index of the string in the executor's :class:`StringPool`. The pool is append-only and has one
code per distinct string, so equal strings have equal codes and ``==``/``!=`` on codes is string
equality; nothing else is done with a code inside a kernel (no ordering, no concatenation, which
the analysis refuses). Codes are translated back to strings where results leave the kernel:
output columns and state images.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from etl_dataflows.planning.string_keys import StrKeyIndex


class StringPool(StrKeyIndex):
    """Distinct strings and their codes (see the module docstring): a string key index whose codes
    are also decoded back to strings."""

    def __init__(self) -> None:
        super().__init__()
        self._arrow: pa.Array = pa.array([], type=pa.large_string())

    def __len__(self) -> int:
        return self.size

    def encode(self, values: Any) -> tuple[np.ndarray, np.ndarray]:
        """Codes and validity of a string column (Arrow array, chunked array or an object array
        with None for nulls); a null gets code 0 and validity False."""
        if isinstance(values, np.ndarray):
            array = pa.array(values, type=pa.string(), from_pandas=True)
        elif isinstance(values, pa.ChunkedArray):
            array = values.combine_chunks()
        else:
            array = values
        if pa.types.is_dictionary(array.type):
            array = array.cast(pa.string())
        return self.codes(array)

    def decode(self, codes: np.ndarray, valid: np.ndarray) -> pa.Array:
        """The strings of ``codes`` (null where ``valid`` is False)."""
        if not self.size:
            return pa.nulls(len(codes), type=pa.string())
        if len(self._arrow) != self.size:
            self._arrow = self.arrow()
        taken = self._arrow.take(pa.array(np.where(valid, codes, 0), type=pa.int64()))
        taken = taken.cast(pa.string())
        if bool(np.all(valid)):
            return taken
        return pc.if_else(pa.array(valid), taken, pa.scalar(None, pa.string()))
