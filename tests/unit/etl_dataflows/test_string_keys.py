"""The string key index against a dictionary: codes in order of first appearance, whatever the
Arrow layout of the column (sliced, large, dictionary-encoded, chunked, with nulls), every
string back from its code, across growth of every buffer."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from etl_dataflows.planning import string_keys
from etl_dataflows.planning.string_keys import StrKeyIndex


def model_codes(model: dict[str, int], values: list[str | None]) -> list[int]:
    """Codes a dictionary gives (new strings numbered in order of first appearance); -1 for
    a null."""
    out = []
    for value in values:
        if value is None:
            out.append(-1)
            continue
        out.append(model.setdefault(value, len(model)))
    return out


def random_strings(rng: random.Random, n: int, universe: int) -> list[str | None]:
    """Strings of lengths 0..40 (around the eight-byte words the hash reads), a few non-ASCII,
    some differing only in their last byte; one in twenty null."""
    out: list[str | None] = []
    for _ in range(n):
        if rng.random() < 0.05:
            out.append(None)
            continue
        k = rng.randrange(universe)
        length = k % 41
        text = (f"{k:x}-" * 40)[:length]
        if k % 7 == 0:
            text += "é"
        if k % 11 == 0:
            text = text[:-1] + "z" if text else "z"  # a twin of another string but for its end
        out.append(text)
    return out


def layouts(values: list[str | None], rng: random.Random) -> pa.Array | pa.ChunkedArray:
    """``values`` in one of the Arrow layouts a column may arrive in."""
    choice = rng.randrange(5)
    if choice == 0:
        return pa.array(values, pa.string())
    if choice == 1:
        return pa.array(values, pa.large_string())
    if choice == 2:
        return pa.array(values, pa.string()).dictionary_encode()
    if choice == 3:  # a slice: the offsets start inside the buffers
        padded = pa.array(["head", *values, "tail"], pa.string())
        return padded.slice(1, len(values))
    middle = len(values) // 2
    return pa.chunked_array([values[:middle], values[middle:]], pa.string())


def test_codes_match_a_dictionary_across_layouts_and_growth() -> None:
    rng = random.Random(5)
    index, model = StrKeyIndex(), {}
    for batch in range(40):  # the buffers and the table grow many times from their first size
        values = random_strings(rng, rng.randrange(0, 3000), universe=20_000 + 1000 * batch)
        codes, valid = index.codes(layouts(values, rng))
        expected = model_codes(model, values)
        assert valid.tolist() == [v is not None for v in values]
        assert np.where(valid, codes, -1).tolist() == expected
        assert index.size == len(model)
    by_code = sorted(model, key=model.__getitem__)
    assert index.arrow().to_pylist() == by_code
    assert [index.string(c) for c in range(0, index.size, 97)] == by_code[::97]
    assert index.nbytes > sum(len(s.encode()) for s in by_code)


def test_find_codes_nothing_and_single_lookups_agree_with_columns() -> None:
    index = StrKeyIndex()
    codes, _ = index.codes(pa.array(["alpha", "", "a somewhat longer string", "é"]))
    assert codes.tolist() == [0, 1, 2, 3]
    assert index.find(pa.array(["é", "never", None, "alpha"])).tolist() == [3, -1, -1, 0]
    assert index.size == 4  # find added nothing
    assert index.find_one("a somewhat longer string") == 2 and index.find_one("never") == -1
    assert index.code("never") == 4 and index.find_one("never") == 4
    assert index.codes(pa.array(["never"]))[0].tolist() == [4]
    assert index.slots(["", None, "new"], np.array([True, True, False])).tolist() == [1, -1, -1]
    one = np.array([True])
    assert index.slots(pa.array(["alpha"]), one).tolist() == [0]  # one key: the single path
    assert index.slots(pa.array(["single"]), ~one).tolist() == [-1]
    single = index.slots(pa.array(["single"]), one).tolist()
    assert single == index.find(pa.array(["single"])).tolist() == [index.size - 1]


def test_single_lookups_survive_their_cache_being_cleared(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(string_keys, "SINGLE_CODES_KEPT", 3)
    index = StrKeyIndex()
    words = [f"word {i}" for i in range(10)]
    assert [index.code(w) for w in words] == list(range(10))
    assert [index.find_one(w) for w in reversed(words)] == list(range(9, -1, -1))
    assert index.size == 10


def test_an_empty_column_and_a_column_of_empty_strings() -> None:
    index = StrKeyIndex()
    codes, valid = index.codes(pa.array([], pa.string()))
    assert len(codes) == 0 and len(valid) == 0
    codes, valid = index.codes(pa.array(["", "", None], pa.string()))
    assert codes.tolist() == [0, 0, 0] and valid.tolist() == [True, True, False]
    assert index.string(0) == "" and index.size == 1
    with pytest.raises(IndexError, match="no string has code 1"):
        index.string(1)


@pytest.mark.parametrize("length", [0, 1, 7, 8, 9, 16, 23])
def test_bytes_compare_equal_only_when_every_byte_is(length: int) -> None:
    """The comparison behind a hash match (two strings with equal hashes are told apart only by
    it: a 64-bit collision random strings never give a test), at every place in words and
    tails."""
    a = np.frombuffer(b"xx" + bytes(range(65, 65 + length)), dtype=np.uint8)
    b = np.frombuffer(b"yyy" + bytes(range(65, 65 + length)), dtype=np.uint8)
    assert string_keys.same_bytes(a, 2, 2 + length, b, 3)
    for at in range(length):
        changed = b.copy()
        changed[3 + at] ^= 1
        assert not string_keys.same_bytes(a, 2, 2 + length, changed, 3), at
