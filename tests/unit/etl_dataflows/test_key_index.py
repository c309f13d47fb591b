"""The int64 key index: dense slots that never move, and lookups that cost the same whatever the
keys' structure (issue 23: 40,000 keys that are multiples of 2**40 once fell into one bucket and a
batch took 5.3 s instead of 0.02 s).

Cost is measured by the index's own collision count (positions probed beyond each key's first),
not by time: deterministic, and independent of how busy the machine is. For random keys at the
index's load (at most half full) it is about half a collision per key; a hash that keeps the low
bits of structured keys puts them on a few positions, and its count grows with the square of the
keys.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from etl_dataflows.planning.keys import IntKeyIndex, TupleKeyIndex

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def structured(layout: str, n: int) -> np.ndarray:
    numbers = np.arange(n, dtype=np.int64)
    if layout == "random":
        return np.unique(np.random.default_rng(7).integers(INT64_MIN, INT64_MAX, n + 64))[:n]
    if layout == "sequential":
        return numbers
    if layout == "negative":
        return -numbers
    if layout == "stride32":
        return numbers << np.int64(32)
    if layout == "stride40":
        return numbers << np.int64(40)
    if layout == "top-bits":  # the low bits constant, the varying part at the very top
        return (numbers << np.int64(63 - int(n).bit_length())) | np.int64(0x5A5A)
    if layout == "stride1024":
        return numbers * 1024
    raise AssertionError(layout)


LAYOUTS = ["sequential", "negative", "stride32", "stride40", "top-bits", "stride1024"]


def collisions_per_key(keys: np.ndarray) -> float:
    index = IntKeyIndex()
    slots = index.slots(keys, np.ones(len(keys), dtype=bool))
    assert np.array_equal(slots, np.arange(len(keys)))  # new keys take the next slots, in order
    return index.collisions / len(keys)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_structured_keys_cost_what_random_keys_cost(layout: str) -> None:
    """At 40,000 and 160,000 keys, structured keys collide about as often per key as random
    ones: the total stays linear in the keys (a low-bits hash gives ~n/2 per key here)."""
    for n in (40_000, 160_000):
        random = collisions_per_key(structured("random", n))
        assert 0.2 < random < 1.0, random  # the load the index keeps: at most half full
        got = collisions_per_key(structured(layout, n))
        assert got < 2 * random, f"{layout}, {n} keys: {got:.2f} collisions per key"


@pytest.mark.parametrize("layout", ["random", *LAYOUTS])
def test_lookups_find_the_slots_inserts_gave(layout: str) -> None:
    keys = structured(layout, 20_000)
    index = IntKeyIndex(capacity=16)  # grows (rehashes) many times on the way
    valid = np.ones(len(keys), dtype=bool)
    first = index.slots(keys, valid)
    before = index.collisions
    again = index.slots(keys[::-1], valid)
    assert np.array_equal(again, first[::-1])
    assert index.size == len(keys)
    assert np.array_equal(index.find(keys), first)
    assert index.collisions - before < 4 * len(keys)  # two more passes, each O(1) per key


def test_extreme_keys_nulls_and_absent_keys() -> None:
    index = IntKeyIndex()
    keys = np.array([0, -1, INT64_MIN, INT64_MAX, 1, INT64_MIN + 1, 7], dtype=np.int64)
    valid = np.array([True, True, True, True, True, True, False])
    slots = index.slots(keys, valid)
    assert slots.tolist() == [0, 1, 2, 3, 4, 5, -1]
    assert index.find(keys).tolist() == [0, 1, 2, 3, 4, 5, -1]  # 7 was null: never inserted
    absent = np.array([2, INT64_MAX - 1, 1 << 40], dtype=np.int64)
    assert index.find(absent).tolist() == [-1, -1, -1]


def _reference_slots(
    columns: list[list[object]], valid: list[bool], seen: dict[tuple[object, ...], int]
) -> list[int]:
    """The slots a dictionary of key tuples gives (the order keys first appear)."""
    out = []
    for key, ok in zip(zip(*columns, strict=True), valid, strict=True):
        if not ok:
            out.append(-1)
            continue
        out.append(seen.setdefault(key, len(seen)))
    return out


def test_keys_of_several_columns_get_the_slots_a_dictionary_of_tuples_gives() -> None:
    """Int64 and string parts, nulls in either (a null is its own value, apart from 0 and ""),
    rows left out by ``valid``, numpy or Arrow parts, and many rehashes on the way: every slot
    is the one a dictionary of Python tuples assigns, batch after batch."""
    rng = np.random.default_rng(11)
    index = TupleKeyIndex(["int64", "string", "int64"], capacity=4)
    seen: dict[tuple[object, ...], int] = {}
    for batch in range(12):
        n = int(rng.integers(1, 3_000))
        ints = rng.integers(-3, 40, n) << np.int64(40)  # structured: zero low bits
        words: list[object] = [
            None if r < 0.05 else ("" if r < 0.1 else f"w{int(r * 50)}") for r in rng.random(n)
        ]
        small = rng.integers(0, 3, n)
        null_int = rng.random(n) < 0.05
        first: list[object] = [None if z else int(v) for v, z in zip(ints, null_int, strict=True)]
        valid = rng.random(n) < 0.9
        parts: list[object] = [
            pa.array(first, type=pa.int64()),
            pa.array(words, type=pa.string()) if batch % 2 else np.asarray(words, dtype=object),
            small if batch % 3 else pa.array(small),
        ]
        got = index.slots(parts, valid)
        want = _reference_slots([first, words, small.tolist()], valid.tolist(), seen)
        assert got.tolist() == want, batch
        assert index.size == len(seen)
    assert 0 in seen.values() and index.collisions / max(index.size, 1) < 2


def test_a_null_part_is_not_zero_nor_the_empty_string() -> None:
    index = TupleKeyIndex(["int64", "string"])
    parts = [pa.array([0, None, 0, None, 0], pa.int64()), pa.array(["", "", None, None, ""])]
    assert index.slots(parts, np.ones(5, dtype=bool)).tolist() == [0, 1, 2, 3, 0]
