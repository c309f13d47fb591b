"""The answer keys into the ``audit`` table (clause 7.2.6.2).

Every ``*_audit.csv`` of the staging area (the top level and ``Batch1``..``Batch3``) is read with
:mod:`tpcdi.readers` (the header line is not data) and its six fields go to the columns of the
same names. The table's content is replaced in one transaction, so loading twice does not double
the keys. A line that does not parse is an error: answer keys that cannot be read cannot be
checked against.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pyarrow as pa

from tpcdi.audit.connection import WarehouseConnection
from tpcdi.audit.exceptions import AnswerKeysInvalid
from tpcdi.exceptions import SourceNotFound
from tpcdi.readers import read_file

logger = logging.getLogger(__name__)

AUDIT_COLUMNS = ("dataset", "batchid", '"date"', "attribute", '"value"', "dvalue")


def audit_files(data_dir: Path) -> list[Path]:
    """The ``*_audit.csv`` files of a staging area: its top level, then Batch1..Batch3."""
    root = Path(data_dir)
    if not root.is_dir():
        raise SourceNotFound(f"no staging area {root}", path=str(root))
    paths = sorted(root.glob("*_audit.csv"))
    for batch in (1, 2, 3):
        paths += sorted((root / f"Batch{batch}").glob("*_audit.csv"))
    if not paths:
        raise SourceNotFound(f"no *_audit.csv in {root} or its Batch1..3", path=str(root))
    return paths


def read_answer_keys(data_dir: Path) -> pa.Table:
    """All answer keys of a staging area as one table (DataSet, BatchID, Date, Attribute, Value,
    DValue). Raises :class:`AnswerKeysInvalid` listing lines that do not parse."""
    tables: list[pa.Table] = []
    problems: list[str] = []
    for path in audit_files(data_dir):
        result = read_file(path)
        for reject in result.rejects.to_pylist():
            problems.append(f"{path.name}:{reject['line']}: {reject['reason']}")
        tables.append(result.table)
    if problems:
        raise AnswerKeysInvalid(problems)
    return pa.concat_tables(tables)


def load_audit_files(conn: WarehouseConnection, data_dir: Path) -> int:
    """Replace the content of ``audit`` with every answer key of the staging area ``data_dir``
    and commit; returns the number of rows loaded.

    1. read and parse every ``*_audit.csv`` (nothing is written if one is unreadable);
    2. in one transaction: delete the table's rows, bulk-append the keys;
    3. commit.
    """
    keys = read_answer_keys(Path(data_dir))
    conn.begin()
    try:
        conn.execute("DELETE FROM {audit}")
        conn.load_arrow("audit", keys, AUDIT_COLUMNS)
    except BaseException:
        conn.rollback()
        raise
    conn.commit()
    logger.info("loaded answer keys rows=%s from=%s", keys.num_rows, data_dir)
    return int(keys.num_rows)
