"""The CSV PostgreSQL's COPY reads, whatever the chunking of the Arrow table."""

from __future__ import annotations

import pyarrow as pa

from warehouse.postgres import csv_bytes


def test_leading_empty_chunks_do_not_corrupt_the_csv() -> None:
    # pyarrow 26's CSV writer emits NUL bytes and stray memory for such a table
    empty = pa.array([], pa.int64())
    text = pa.array([], pa.string())
    table = pa.table(
        {
            "n": pa.chunked_array([empty, empty, pa.array([1, 2])]),
            "s": pa.chunked_array([text, text, pa.array(["a", None])]),
        }
    )
    assert csv_bytes(table) == b'1,"a"\n2,\n'


def test_empty_and_unchunked_tables() -> None:
    schema = pa.schema([("n", pa.int64())])
    assert csv_bytes(schema.empty_table()) == b""
    assert csv_bytes(pa.table({"n": [3]})) == b"3\n"
