"""Reading a large PostgreSQL result out in bounded pieces: ``COPY (...) TO STDOUT`` into Arrow.

A bootstrap copies whole tables from one warehouse into another, so its reads have no byte cap
(unlike the query service's, :mod:`warehouse.postgres_reads`) but must not hold a table in memory
either. :func:`copy_out_batches` streams: ``COPY (sql) TO STDOUT WITH (FORMAT csv)`` runs on a
thread of its own and writes into a pipe; Arrow's streaming CSV reader parses the other end,
read through a buffer of ``block_bytes``, into record batches of about ``block_bytes`` of CSV
each, typed as asked (unbuffered, Arrow made a batch of each read of the pipe, at most its 64 KiB:
a 64 MB piece of thousands of chunks, which DuckDB loads two to three times slower than the same
rows in a few). At most the pipe's buffer, the read buffer and the block being parsed are in
flight, whatever the size of the result.

The CSV is what ``COPY`` writes and :mod:`warehouse.postgres` reads back: a NULL is an empty,
unquoted field and an empty string a quoted one, booleans ``t``/``f``.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import Any

import psycopg2
import pyarrow as pa
import pyarrow.csv as pacsv

from warehouse.exceptions import WarehouseUnavailable, first_line

#: CSV bytes per record batch Arrow's reader makes.
BLOCK_BYTES = 16 << 20


def csv_convert_options(names: list[str], types: list[pa.DataType]) -> pacsv.ConvertOptions:
    """How ``COPY ... (FORMAT csv)`` text becomes Arrow columns ``names`` of ``types``."""
    return pacsv.ConvertOptions(
        column_types=dict(zip(names, types, strict=True)),
        null_values=[""],
        strings_can_be_null=True,
        quoted_strings_can_be_null=False,
        true_values=["t"],
        false_values=["f"],
    )


def copy_out_batches(
    con: Any, sql: str, schema: pa.Schema, *, block_bytes: int = BLOCK_BYTES, target: str
) -> Iterator[pa.RecordBatch]:
    """The rows of ``sql`` on psycopg2 connection ``con`` (in the caller's transaction) as
    record batches of ``schema`` (its names and types, by position); see the module docstring.

    Raises :class:`~warehouse.exceptions.WarehouseUnavailable` when the statement fails (the
    connection must then be dropped: a COPY stopped half way leaves it unusable). A caller that
    stops early (closing the generator) cancels the statement."""
    placeholder = [f"c{i}" for i in range(len(schema))]
    read_end, write_end = os.pipe()
    failure: list[BaseException] = []

    def produce() -> None:
        try:
            with os.fdopen(write_end, "wb", buffering=1 << 20) as sink, con.cursor() as cur:
                cur.copy_expert(f"COPY ({sql}) TO STDOUT WITH (FORMAT csv)", sink, size=1 << 20)
        except BaseException as exc:  # handed to the reading side
            failure.append(exc)

    producer = threading.Thread(target=produce, name="postgres-copy-out", daemon=True)
    producer.start()
    finished = False
    try:
        with os.fdopen(read_end, "rb", buffering=block_bytes) as source:
            try:
                reader = pacsv.open_csv(
                    source,
                    read_options=pacsv.ReadOptions(
                        column_names=placeholder, block_size=block_bytes
                    ),
                    parse_options=pacsv.ParseOptions(newlines_in_values=True),
                    convert_options=csv_convert_options(placeholder, list(schema.types)),
                )
            except pa.ArrowInvalid as exc:
                if "Empty CSV file" not in str(exc):
                    raise
                reader = None  # no rows at all
            if reader is not None:
                for batch in reader:
                    yield pa.RecordBatch.from_arrays(batch.columns, schema=schema)
        finished = True
    except pa.ArrowException as exc:
        producer.join()
        if failure:
            raise _unavailable(failure[0], target) from failure[0]
        raise WarehouseUnavailable(target, f"COPY out unreadable: {first_line(exc)}") from exc
    finally:
        if not finished:
            with contextlib.suppress(psycopg2.Error):
                con.cancel()  # the reading side stopped early: stop the statement
        producer.join()
    if failure:
        raise _unavailable(failure[0], target) from failure[0]


def _unavailable(exc: BaseException, target: str) -> WarehouseUnavailable:
    return WarehouseUnavailable(target, f"COPY out failed: {first_line(exc)}")
