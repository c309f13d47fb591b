"""The key index of tables keyed by several columns: slots in the order keys are first seen, as a
dictionary of key tuples gives them (nulls, chunked string columns and repeated batches
included), in a few dozen bytes per key (issue 22: TPC-DI's watches, keyed by customer and
symbol, held 430 MB of Python tuples at SF 10)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from etl_dataflows.planning.keys import TupleKeyIndex


def reference_slots(
    seen: dict[tuple[Any, ...], int], parts: list[Any], valid: np.ndarray
) -> list[int]:
    columns = [
        part.to_pylist() if isinstance(part, pa.Array | pa.ChunkedArray) else list(part)
        for part in parts
    ]
    out = []
    for ok, key in zip(valid, zip(*columns, strict=True), strict=True):
        if not ok:
            out.append(-1)
            continue
        out.append(seen.setdefault(key, len(seen)))
    return out


@pytest.mark.parametrize("layout", ["int-string", "string-int-int", "ints"])
def test_slots_are_those_of_a_dictionary_of_tuples(layout: str) -> None:
    rng = np.random.default_rng(11)
    index = TupleKeyIndex(
        {
            "int-string": ["int64", "string"],
            "string-int-int": ["string", "int64", "int64"],
            "ints": ["int64", "int64"],
        }[layout]
    )
    seen: dict[tuple[Any, ...], int] = {}
    for batch in range(6):
        n = int(rng.integers(0, 2000))
        ints = rng.integers(-3, 60, n)
        strings = pa.array([None if x < 2 else f"S{x}" for x in rng.integers(0, 40, n)])
        if batch % 2:
            strings = pa.chunked_array([strings.slice(0, n // 2), strings.slice(n // 2)])
        parts: list[Any] = {
            "int-string": [ints, strings],
            "string-int-int": [strings, ints, ints * 7],
            "ints": [ints, pa.array(ints % 5)],
        }[layout]
        valid = rng.random(n) < 0.9
        slots = index.slots(parts, valid)
        assert slots.tolist() == reference_slots(seen, parts, valid)
        assert index.size == len(seen)


def test_a_million_keys_take_far_less_than_python_tuples() -> None:
    """At most ~50 bytes a key (two int64 parts and a null mask per key, dense, growing by a
    quarter; an int32 slot per position of a table at most half full, its size a power of two)
    against ~230 for a dictionary of Python tuples (and ~75 when the table's positions held the
    key rows themselves)."""
    rng = np.random.default_rng(3)
    n = 1_000_000
    customer = rng.integers(0, 50_000, n)
    symbol = pa.array([f"SYM{i:07d}" for i in rng.integers(0, 6_000, n)])
    index = TupleKeyIndex(["int64", "string"])
    for lo in range(0, n, 100_000):
        index.slots(
            [customer[lo : lo + 100_000], symbol.slice(lo, 100_000)], np.ones(100_000, bool)
        )
    assert index.size == len(set(zip(customer.tolist(), symbol.to_pylist(), strict=True)))
    assert index.nbytes / index.size < 50


def test_every_batch_must_have_the_same_columns() -> None:
    index = TupleKeyIndex(["int64", "int64"])
    index.slots([np.arange(3), np.arange(3)], np.ones(3, bool))
    with pytest.raises(ValueError, match="columns"):
        index.slots([np.arange(3)] * 3, np.ones(3, bool))
    assert index.slots([np.arange(3), np.arange(3)], np.zeros(3, bool)).tolist() == [-1] * 3


def test_a_dictionary_column_gives_the_slots_of_its_values() -> None:
    """A string part given dictionary-encoded (as the local executor's tables hand it over):
    the slots of the values, whatever the dictionary holds — as ``dictionary_encode`` makes it,
    or a dictionary of its own order with values no row uses, nulls in the indices."""
    rng = np.random.default_rng(17)
    plain, encoded, own = (TupleKeyIndex(["int64", "string"]) for _ in range(3))
    seen: dict[tuple[Any, ...], int] = {}
    dictionary = pa.array([f"S{x}" for x in range(60)])  # rows use S0..S39 only
    for _ in range(5):
        n = int(rng.integers(1, 3000))
        ints = rng.integers(0, 30, n)
        picks = rng.integers(0, 42, n)
        indices = pa.array([None if x >= 40 else int(39 - x) for x in picks], pa.int32())
        strings = pa.array([None if x >= 40 else f"S{39 - x}" for x in picks])
        valid = rng.random(n) < 0.9
        expected = reference_slots(seen, [ints, strings], valid)
        assert plain.slots([ints, strings], valid).tolist() == expected
        dictionary_encoded = pc.dictionary_encode(strings)
        assert encoded.slots([ints, dictionary_encoded], valid).tolist() == expected
        own_dictionary = pa.DictionaryArray.from_arrays(indices, dictionary)
        assert own.slots([ints, own_dictionary], valid).tolist() == expected
    assert plain.size == encoded.size == own.size == len(seen)
