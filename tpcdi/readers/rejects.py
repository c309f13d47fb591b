"""What every reader returns: the typed rows and the rejected lines.

A rejected line is data, not an error: it keeps the file name, the 1-based line number (for XML,
the line where the rejected ``Action`` starts), the reason and the line's text, so that a
pipeline can route it to a dead-letter table (TPC-DI's DImessages) and lose nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import pyarrow as pa

REJECTS_SCHEMA = pa.schema(
    [
        pa.field("file", pa.string(), nullable=False),
        pa.field("line", pa.int64(), nullable=False),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("text", pa.string()),
    ]
)


def empty_rejects() -> pa.Table:
    """A rejects table with no rows."""
    return REJECTS_SCHEMA.empty_table()


def rejects_table(
    file: str | Sequence[str],
    lines: Sequence[int],
    reasons: Sequence[str],
    texts: Sequence[str | None],
) -> pa.Table:
    """A rejects table from parallel sequences of lines, reasons and texts; ``file`` names the
    file of every row, or is a sequence with one file name per row."""
    files = [file] * len(lines) if isinstance(file, str) else list(file)
    return pa.table(
        {
            "file": pa.array(files, pa.string()),
            "line": pa.array(lines, pa.int64()),
            "reason": pa.array(reasons, pa.string()),
            "text": pa.array(texts, pa.string()),
        },
        schema=REJECTS_SCHEMA,
    )


def concat_rejects(parts: Iterable[pa.Table]) -> pa.Table:
    """Concatenate rejects tables, sorted by file and line."""
    tables = [t for t in parts if t.num_rows]
    if not tables:
        return empty_rejects()
    merged = pa.concat_tables(tables)
    return merged.sort_by([("file", "ascending"), ("line", "ascending")])


@dataclass(frozen=True)
class ReadResult:
    """The rows of one source (``table``, typed per the registry) and its ``rejects``."""

    table: pa.Table
    rejects: pa.Table = field(default_factory=empty_rejects)

    @property
    def num_rows(self) -> int:
        return int(self.table.num_rows)


@dataclass(frozen=True)
class FinwireResult:
    """The FINWIRE records by type (``CMP``, ``SEC``, ``FIN``) and the rejected lines."""

    tables: dict[str, pa.Table]
    rejects: pa.Table = field(default_factory=empty_rejects)

    def __getitem__(self, record_type: str) -> pa.Table:
        return self.tables[record_type]
