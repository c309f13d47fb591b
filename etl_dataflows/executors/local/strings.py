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


class StringPool:
    """Distinct strings and their codes (see the module docstring)."""

    def __init__(self) -> None:
        self._code_of: dict[str, int] = {}
        self._strings: list[str] = []
        self._arrow: pa.Array = pa.array([], type=pa.string())

    def __len__(self) -> int:
        return len(self._strings)

    def code(self, value: str) -> int:
        """The code of ``value`` (a new one for a string never seen)."""
        code = self._code_of.get(value)
        if code is None:
            code = len(self._strings)
            self._code_of[value] = code
            self._strings.append(value)
        return code

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
        n = len(array)
        if n == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.bool_)
        encoded = pc.dictionary_encode(array)
        uniques = encoded.dictionary.to_pylist()
        mapped = np.fromiter((self.code(s) for s in uniques), dtype=np.int64, count=len(uniques))
        valid = np.asarray(encoded.indices.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        indices = encoded.indices.fill_null(0).to_numpy(zero_copy_only=False)
        codes = mapped[indices] if len(mapped) else np.zeros(n, dtype=np.int64)
        return np.where(valid, codes, 0).astype(np.int64), valid

    def decode(self, codes: np.ndarray, valid: np.ndarray) -> pa.Array:
        """The strings of ``codes`` (null where ``valid`` is False)."""
        if len(self._arrow) != len(self._strings):
            self._arrow = pa.array(self._strings, type=pa.string())
        if not len(codes):
            return pa.array([], type=pa.string())
        safe = np.where(valid, codes, 0) if len(self._strings) else np.zeros(0, dtype=np.int64)
        if not len(self._strings):
            return pa.nulls(len(codes), type=pa.string())
        taken = self._arrow.take(pa.array(safe, type=pa.int64()))
        if bool(np.all(valid)):
            return taken
        return pc.if_else(pa.array(valid), taken, pa.scalar(None, pa.string()))
