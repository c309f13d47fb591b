"""Reading a DuckDB result in bounded pieces: an answer's bytes are counted as they arrive.

``relation.to_arrow_table()`` materializes a whole result before anything can look at its size;
:func:`read_bounded` streams it instead (record batches of :data:`BATCH_ROWS` rows; DuckDB's
streaming result holds at most its ``max_streaming_buffer_size`` ahead of the reader) and stops
at the first batch that takes the total past ``max_bytes``: the rest of the query is never
computed, and the caller's exception names the cap.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

#: Rows per record batch read from DuckDB (one DuckDB vector: a batch holds at most this many
#: rows of the largest size a query can make, see :mod:`api.allowlist`).
BATCH_ROWS = 2_048


def read_bounded(relation: Any, max_bytes: int, too_large: Callable[[int], Exception]) -> pa.Table:
    """The rows of DuckDB ``relation`` as one Arrow table of at most ``max_bytes`` bytes
    (``nbytes`` of its batches); raises ``too_large(max_bytes)`` once they pass it."""
    reader = relation.to_arrow_reader(BATCH_ROWS)
    try:
        batches: list[pa.RecordBatch] = []
        total = 0
        for batch in reader:
            total += batch.nbytes
            if total > max_bytes:
                raise too_large(max_bytes)
            batches.append(batch)
        return pa.Table.from_batches(batches, schema=reader.schema)
    finally:
        reader.close()
