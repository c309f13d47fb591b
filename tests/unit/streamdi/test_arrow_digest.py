"""Table digests: equal for equal contents however the columns are chunked, sliced or
dictionary-encoded; different when a value, a null, a type, the row order or a string boundary
differs."""

from __future__ import annotations

import datetime
import hashlib

import pyarrow as pa

from streamdi.arrow_digest import table_digest


def digest(table: pa.Table) -> str:
    hasher = hashlib.sha256()
    table_digest(hasher, table)
    return hasher.hexdigest()


def table(words: list[str | None], numbers: list[float | None]) -> pa.Table:
    days = [datetime.date(2020, 1, 1 + i) for i in range(len(words))]
    return pa.table(
        {"w": pa.array(words, pa.string()), "n": pa.array(numbers), "d": pa.array(days)}
    )


BASE = table(["ab", None, "c", ""], [1.0, 2.0, None, 4.0])


def test_the_layout_does_not_count() -> None:
    chunked = pa.Table.from_batches(BASE.to_batches(max_chunksize=1))
    assert chunked.column("w").num_chunks == 4
    around = pa.concat_tables([BASE.slice(3, 1), BASE, BASE.slice(0, 1)]).combine_chunks()
    padded = around.slice(1, 4)  # one chunk whose arrays start at an offset
    assert padded.column("w").chunk(0).offset == 1
    encoded = BASE.set_column(0, "w", BASE.column("w").dictionary_encode())
    assert digest(chunked) == digest(padded) == digest(encoded) == digest(BASE)


def test_every_difference_counts() -> None:
    others = [
        table(["ab", None, "c", "x"], [1.0, 2.0, None, 4.0]),  # a value
        table(["ab", "", "c", ""], [1.0, 2.0, None, 4.0]),  # a null against an empty string
        table(["a", "b", "c", ""], [1.0, 2.0, None, 4.0]),  # where one string ends
        table(["ab", None, "c", ""], [1.0, 2.0, 0.0, 4.0]),  # a null against a zero
        BASE.take([1, 0, 2, 3]),  # the row order
        BASE.set_column(1, "n", BASE.column("n").cast(pa.float32())),  # a type
        BASE.rename_columns(["w", "m", "d"]),  # a name
    ]
    digests = {digest(other) for other in others}
    assert len(digests) == len(others) and digest(BASE) not in digests
