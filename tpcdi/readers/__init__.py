"""Readers for every file DIGen writes (TPC-DI clause 2), into typed Arrow tables.

Each reader returns the rows it could read and a rejects table (``file``, ``line``, ``reason``,
``text``) for the lines that break the format; a bad line never stops a read.

>>> from tpcdi.readers import read_file
>>> result = read_file(Path("Batch1/Trade.txt"))          # doctest: +SKIP
>>> result.table.schema, result.rejects.num_rows           # doctest: +SKIP
"""

from tpcdi.readers.customer_mgmt import GIVEN_FIELDS, given
from tpcdi.readers.registry import SOURCE_FILES, SourceFile, source_file
from tpcdi.readers.rejects import REJECTS_SCHEMA, FinwireResult, ReadResult
from tpcdi.readers.sources import (
    BatchData,
    audit_value,
    batch_sources,
    iter_file,
    read_audit,
    read_batch,
    read_batch_date,
    read_batch_finwire,
    read_file,
    staging_batches,
)

__all__ = [
    "GIVEN_FIELDS",
    "REJECTS_SCHEMA",
    "SOURCE_FILES",
    "BatchData",
    "FinwireResult",
    "ReadResult",
    "SourceFile",
    "audit_value",
    "batch_sources",
    "given",
    "iter_file",
    "read_audit",
    "read_batch",
    "read_batch_date",
    "read_batch_finwire",
    "read_file",
    "source_file",
    "staging_batches",
]
