"""The generator's radix sorts and first occurrences give exactly NumPy's answers (so the files
do not change with them): ``np.argsort(kind="stable")``, ``np.lexsort`` and the indexes of
``np.unique(return_index=True)``."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpcdi.generator import sorting

int64s = st.integers(-(2**63), 2**63 - 1)
small = st.integers(-3, 3)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(int64s, small, st.integers(0, 2**40)), max_size=60))
def test_sorts_are_numpys(rows: list[tuple[int, int, int]]) -> None:
    wide, narrow, mid = (
        (np.array(c, dtype=np.int64) for c in zip(*rows, strict=True))
        if rows
        else (np.zeros(0, np.int64),) * 3
    )
    for keys in ([wide], [narrow], [mid], [narrow, mid], [wide, narrow, mid], [mid, mid, mid]):
        assert np.array_equal(sorting.lexsort(keys), np.lexsort(keys))
    assert np.array_equal(sorting.argsort(narrow), np.argsort(narrow, kind="stable"))


@settings(max_examples=80, deadline=None)
@given(st.lists(st.one_of(small, int64s), max_size=80))
def test_first_occurrences_are_what_unique_indexes(values: list[int]) -> None:
    keys = np.array(values, dtype=np.int64)
    expected = np.zeros(len(keys), dtype=bool)
    expected[np.unique(keys, return_index=True)[1]] = True
    assert np.array_equal(sorting.first_occurrences(keys), expected)


def test_large_inputs_and_small_types() -> None:
    rng = np.random.default_rng(5)
    ts = rng.integers(1_300_000_000, 1_500_000_000, 200_000)
    trade = rng.integers(0, 50_000, 200_000)
    status = rng.integers(0, 4, 200_000).astype(np.int8)
    assert np.array_equal(sorting.lexsort((status, trade, ts)), np.lexsort((status, trade, ts)))
    expected = np.zeros(len(trade), dtype=bool)
    expected[np.unique(trade, return_index=True)[1]] = True
    assert np.array_equal(sorting.first_occurrences(trade), expected)
    with pytest.raises(ValueError, match="lengths"):
        sorting.lexsort((ts, trade[:5]))
