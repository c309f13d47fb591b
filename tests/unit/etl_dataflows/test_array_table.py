"""The local executor's array tables: images and deltas list rows in key order whichever way the
order is found — ranks kept while new keys arrive ascending, ranks rebuilt when they do not, a
sort of the rows' own keys when the table is large next to the rows, an Arrow sort of string and
compound keys (each row's values still beside its key) — and the counting order agrees with a
sort."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from etl_dataflows import Dataflow
from etl_dataflows.executors.local.arrays import ArrayTable, order_by_rank


def accounts() -> ArrayTable:
    flow = Dataflow("t")
    table = flow.table("accounts", key={"id": "int64"}, columns={"balance": "int64"})
    return ArrayTable(table, capacity=16)


def write(arrays: ArrayTable, keys: list[int], value: int) -> np.ndarray:
    """One batch step: the rows of ``keys`` set to ``value`` (new keys get slots)."""
    slots = arrays.slots(np.array(keys, dtype=np.int64), np.ones(len(keys), dtype=bool))
    arrays.remember(slots)
    arrays.exists[slots] = True
    arrays.values["balance"][slots] = value
    arrays.valid["balance"][slots] = True
    return slots


def ids(table: pa.Table) -> list[int]:
    return table.column("id").to_pylist()


@pytest.mark.parametrize(
    "batches",
    [
        [[1, 2, 3], [4, 5, 2], [6, 1]],  # ascending new keys: ranks kept
        [[30, 10, 20], [5, 25], [1, 40, 15]],  # new keys out of order: ranks rebuilt
        [[-(2**63), 2**63 - 1, 0], [7, -7]],  # the int64 limits
    ],
)
def test_images_and_deltas_are_in_key_order(batches: list[list[int]]) -> None:
    arrays = accounts()
    seen: set[int] = set()
    for b, keys in enumerate(batches):
        arrays.begin_batch()
        write(arrays, keys, value=100 + b)
        delta = arrays.end_batch()
        assert ids(delta.upserts) == sorted(set(keys))
        seen |= set(keys)
        assert ids(arrays.image()) == sorted(seen)
        assert arrays.image().column("balance").to_pylist() == [
            100 + max(i for i, ks in enumerate(batches[: b + 1]) if k in ks) for k in sorted(seen)
        ]


def test_a_large_table_sorts_the_rows_own_keys() -> None:
    """Stale ranks over many keys are not rebuilt for a few rows; the rows are still in order."""
    arrays = accounts()
    rng = np.random.default_rng(5)
    keys = rng.permutation(50_000).astype(np.int64) * 3
    arrays.begin_batch()
    write(arrays, keys.tolist(), value=1)
    arrays.end_batch()
    arrays.begin_batch()
    few = [int(k) for k in keys[:5]] + [-1, 10**9]  # two new keys, out of order again
    write(arrays, few, value=2)
    delta = arrays.end_batch()
    assert ids(delta.upserts) == sorted(few)
    image = arrays.image()
    assert ids(image) == sorted([*keys.tolist(), -1, 10**9])


def test_deletes_are_in_key_order_and_a_failed_batch_restores() -> None:
    arrays = accounts()
    arrays.begin_batch()
    write(arrays, [5, 3, 9, 1], value=1)
    arrays.end_batch()
    arrays.begin_batch()
    slots = arrays.slots(np.array([9, 1, 5], dtype=np.int64), np.ones(3, dtype=bool))
    arrays.remember(slots)
    arrays.exists[slots] = False
    delta = arrays.end_batch()
    assert ids(delta.deletes) == [1, 5, 9]
    assert ids(delta.upserts) == []
    arrays.begin_batch()
    write(arrays, [3, 4], value=7)
    write(arrays, [4, 2], value=8)  # a second step: 4 is remembered once, before its first write
    arrays.restore()
    assert ids(arrays.image()) == [3]
    assert arrays.image().column("balance").to_pylist() == [1]


def test_counting_order_agrees_with_a_sort() -> None:
    rng = np.random.default_rng(1)
    for size in (0, 1, 7, 1_000):
        ranks = rng.permutation(size * 3)[:size].astype(np.int64)
        assert np.array_equal(order_by_rank(ranks, size * 3), np.argsort(ranks, kind="stable"))
    repeated = np.array([3, 1, 3, 0], dtype=np.int64)  # not distinct: falls back to the sort
    assert np.array_equal(order_by_rank(repeated, 4), np.argsort(repeated, kind="stable"))
    sparse = np.array([10**6, 5], dtype=np.int64)  # few among many: a comparison sort
    assert order_by_rank(sparse, 10**6 + 1).tolist() == [1, 0]


def test_string_key_parts_share_one_object_per_distinct_string() -> None:
    """(A (customer, symbol) table at SF 100 holds 18 M keys over ~66 k symbols.)"""
    flow = Dataflow("t")
    table = flow.table(
        "watches", key={"customer": "int64", "symbol": "string"}, columns={"n": "int64"}
    )
    arrays = ArrayTable(table)
    image = pa.table(
        {
            "customer": pa.array([1, 2, 3, 4], pa.int64()),
            "symbol": pa.chunked_array([["AAA", "BBB"], ["AAA", "AAA"]]),
            "n": pa.array([1, 2, 3, 4], pa.int64()),
        }
    )
    arrays.load(image)
    symbols = arrays.key_parts[1][:4]
    assert list(symbols) == ["AAA", "BBB", "AAA", "AAA"]
    assert symbols[0] is symbols[2] is symbols[3]
    assert arrays.image().column("symbol").to_pylist() == ["AAA", "BBB", "AAA", "AAA"]


def test_a_dictionary_key_column_loads_as_its_values() -> None:
    """A string key column given dictionary-encoded, with dictionary values no row uses and a
    null: the same keys, slots and shared objects as the plain column."""
    flow = Dataflow("t")
    table = flow.table(
        "watches", key={"customer": "int64", "symbol": "string"}, columns={"n": "int64"}
    )
    symbols = pa.DictionaryArray.from_arrays(
        pa.array([2, 0, 2, None, 0], pa.int32()), pa.array(["BBB", "unused", "AAA"])
    )
    image = pa.table(
        {
            "customer": pa.array([1, 2, 3, 4, 5], pa.int64()),
            "symbol": symbols,
            "n": pa.array([1, 2, 3, 4, 5], pa.int64()),
        }
    )
    arrays, plain = ArrayTable(table), ArrayTable(table)
    arrays.load(image)
    plain.load(image.set_column(1, "symbol", symbols.cast(pa.string())))
    assert arrays.index.size == plain.index.size == 5
    assert list(arrays.key_parts[1][:5]) == ["AAA", "BBB", "AAA", None, "BBB"]
    assert arrays.key_parts[1][0] is arrays.key_parts[1][2]
    assert arrays.image().equals(plain.image())


@pytest.mark.parametrize(
    "key",
    [{"symbol": "string"}, {"customer": "int64", "symbol": "string"}],
    ids=["string", "compound"],
)
def test_string_and_compound_keys_list_rows_in_key_order_beside_their_values(
    key: dict[str, str],
) -> None:
    flow = Dataflow("t")
    table = flow.table("watches", key=key, columns={"n": "int64"})  # type: ignore[arg-type]
    arrays = ArrayTable(table, capacity=16)
    rng = np.random.default_rng(11)
    symbols = [f"S{int(i):03d}" for i in rng.permutation(200)] + ["b", "B", "é", "a"]
    customers = rng.integers(-5, 5, len(symbols)).tolist()
    rows = sorted(set(zip(customers, symbols, strict=True)), key=lambda r: rng.random())
    if len(key) == 1:
        rows = list({sym: (0, sym) for _, sym in rows}.values())
    parts = [pa.array([sym for _, sym in rows], pa.string())]
    if len(key) == 2:
        parts.insert(0, np.array([c for c, _ in rows], dtype=np.int64))
    value_of = {row: i for i, row in enumerate(rows)}

    def key_of(row: tuple[int, str]) -> tuple[object, ...]:
        return row if len(key) == 2 else (row[1],)

    def listed(t: pa.Table) -> list[tuple[object, ...]]:
        return list(zip(*(t.column(name).to_pylist() for name in key), strict=True))

    arrays.begin_batch()
    slots = arrays.slots(parts, np.ones(len(rows), dtype=bool))
    arrays.remember(slots)
    arrays.exists[slots] = True
    arrays.values["n"][slots] = [value_of[r] for r in rows]
    arrays.valid["n"][slots] = True
    upserts = arrays.end_batch().upserts
    expected = sorted(key_of(r) for r in rows)  # Python's str order is code point order
    assert listed(upserts) == expected
    by_key = {key_of(r): value_of[r] for r in rows}
    assert upserts.column("n").to_pylist() == [by_key[k] for k in expected]

    arrays.begin_batch()
    gone = slots[::3]
    arrays.remember(gone)
    arrays.exists[gone] = False
    deletes = arrays.end_batch().deletes
    assert listed(deletes) == sorted(key_of(r) for r in rows[::3])
    image = arrays.image()
    kept = sorted(key_of(r) for i, r in enumerate(rows) if i % 3)
    assert listed(image) == kept
    assert image.column("n").to_pylist() == [by_key[k] for k in kept]
