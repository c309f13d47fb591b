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

from etl_dataflows.planning.keys import _DIRECT_MIN, IntKeyIndex, TupleKeyIndex

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


def _tuple_reference_slots(
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
        want = _tuple_reference_slots([first, words, small.tolist()], valid.tolist(), seen)
        assert got.tolist() == want, batch
        assert index.size == len(seen)
    assert 0 in seen.values() and index.collisions / max(index.size, 1) < 2


def test_a_null_part_is_not_zero_nor_the_empty_string() -> None:
    index = TupleKeyIndex(["int64", "string"])
    parts = [pa.array([0, None, 0, None, 0], pa.int64()), pa.array(["", "", None, None, ""])]
    assert index.slots(parts, np.ones(5, dtype=bool)).tolist() == [0, 1, 2, 3, 0]


def _reference_slots(reference: dict[int, int], keys: np.ndarray, valid: np.ndarray) -> list[int]:
    out = []
    for key, ok in zip(keys.tolist(), valid.tolist(), strict=True):
        if not ok:
            out.append(-1)
            continue
        out.append(reference.setdefault(key, len(reference)))
    return out


@pytest.mark.parametrize(
    "low",
    [0, -5_000, 10**12, INT64_MAX - 3_000, INT64_MIN],
    ids=["zero", "negative", "large", "int64-max", "int64-min"],
)
def test_dense_keys_go_by_direct_addressing_and_agree_with_the_hash(low: int) -> None:
    """Batches of dense keys (with nulls, repeats, new keys mixed in, keys at the int64 limits):
    every slot is the one a plain dictionary of first appearances gives, and lookups of known
    keys go by direct addressing without counting collisions."""
    rng = np.random.default_rng(3)
    span = 3_000
    index = IntKeyIndex(capacity=16)
    reference: dict[int, int] = {}
    for batch in range(12):
        offsets = rng.integers(0, min(span, 400 * (batch + 1)), 2_000)
        keys = (np.int64(low) + offsets.astype(np.int64)).astype(np.int64)
        valid = rng.random(2_000) > 0.05
        assert index.slots(keys, valid).tolist() == _reference_slots(reference, keys, valid)
    assert index.direct
    known = np.array(list(reference), dtype=np.int64)
    before = index.collisions
    assert index.slots(known, np.ones(len(known), dtype=bool)).tolist() == list(reference.values())
    assert index.collisions == before  # answered by direct addressing
    candidates = [low - 1, low + span + 5, 0 if low else 1 << 40]
    absent = np.array([k for k in candidates if INT64_MIN <= k <= INT64_MAX], dtype=np.int64)
    expected = [reference.get(k, -1) for k in absent.tolist()]
    assert index.find(absent).tolist() == expected
    assert index.find(known).tolist() == list(reference.values())


def test_sparse_keys_use_the_hash_until_they_become_dense() -> None:
    index = IntKeyIndex()
    sparse = np.array([0, 1 << 40, 5], dtype=np.int64)
    assert index.slots(sparse, np.ones(3, dtype=bool)).tolist() == [0, 1, 2]
    assert not index.direct
    assert index.find(np.array([1 << 40, 6], dtype=np.int64)).tolist() == [1, -1]
    dense = np.arange(10, 100_000, dtype=np.int64)  # the span is now within twice the keys
    slots = index.slots(dense, np.ones(len(dense), dtype=bool))
    assert slots.tolist() == list(range(3, 3 + len(dense)))
    assert not index.direct  # 1 << 40 is still among the keys: far too sparse
    small = IntKeyIndex()
    small.slots(np.array([0, 5_000], dtype=np.int64), np.ones(2, dtype=bool))
    assert not small.direct
    small.slots(np.arange(1, 4_000, dtype=np.int64), np.ones(3_999, dtype=bool))
    assert small.direct
    assert small.find(np.array([5_000, 4_000, 0], dtype=np.int64)).tolist() == [1, -1, 0]


def test_dense_keys_arriving_downwards_keep_direct_addressing() -> None:
    index = IntKeyIndex()
    reference: dict[int, int] = {}
    for batch in range(30):
        keys = np.arange(-1_000 * (batch + 1), -1_000 * batch, dtype=np.int64)[::-1]
        valid = np.ones(len(keys), dtype=bool)
        assert index.slots(keys, valid).tolist() == _reference_slots(reference, keys, valid)
        assert index.direct
    known = np.array(list(reference), dtype=np.int64)
    assert index.find(known).tolist() == list(reference.values())


def test_keys_going_dense_sparse_and_dense_again_keep_their_slots() -> None:
    """Batch after batch of keys that are dense, then sparse (a far key arriving mid-batch),
    then dense again, widening the range both ways: every slot is a dictionary's, every lookup
    finds what was given, whichever structure serves at the moment; while the keys are dense
    the index is the direct array alone."""
    rng = np.random.default_rng(5)
    index = IntKeyIndex(capacity=4)
    reference: dict[int, int] = {}
    seen_direct = seen_hash = 0
    low, high = 1_000, 1_500
    for batch in range(40):
        n = int(rng.integers(1, 3_000))
        keys = rng.integers(low, high, n).astype(np.int64)
        if batch % 9 == 4:  # a far key in the middle of the batch: not dense any more
            keys[n // 2] = np.int64(1) << np.int64(45 + batch % 3)
        if batch % 9 == 7:  # many keys: dense again despite the far ones
            keys = np.concatenate([keys, np.arange(low - 100_000, high + 100_000, dtype=np.int64)])
        valid = rng.random(len(keys)) > 0.03
        assert index.slots(keys, valid).tolist() == _reference_slots(reference, keys, valid)
        assert index.size == len(reference)
        known = np.array(list(reference), dtype=np.int64)
        assert index.find(known).tolist() == list(reference.values()), batch
        assert index.find(np.array([low - 10**9], dtype=np.int64)).tolist() == [-1]
        if index.direct:
            seen_direct += 1
            assert index.nbytes < 8 * (4 * len(reference) + 2 * _DIRECT_MIN + 2 * 3_000)
        else:
            seen_hash += 1
        low, high = low - int(rng.integers(0, 400)), high + int(rng.integers(0, 400))
    assert seen_direct and seen_hash


def test_dense_keys_take_the_direct_array_only() -> None:
    """13 M dense keys (TPC-DI's trades at SF 100) held 0.5 GB of hash table beside the direct
    array; the array alone is 8-16 bytes a key."""
    index = IntKeyIndex()
    n = 200_000
    for lo in range(0, n, 20_000):
        keys = np.arange(lo, lo + 20_000, dtype=np.int64)[::-1]
        index.slots(keys, np.ones(len(keys), dtype=bool))
    assert index.direct and index.size == n
    assert index.nbytes <= 16 * n + 8 * _DIRECT_MIN
