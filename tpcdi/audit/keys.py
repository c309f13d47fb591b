"""The answer keys into the ``audit`` table (clause 7.2.6.2).

Every ``*_audit.csv`` of the staging area (the top level and ``Batch1``..``BatchN``: DIGen's three,
or a daily feed's) is read with :mod:`tpcdi.readers` (the header line is not data) and its six
fields go to the columns of the same names; an audit in the middle of a run loads the keys of
the batches up to the one it audits (``through``). The table's content is replaced in one
transaction, so loading twice does not double the keys. A line that does not parse is an error:
answer keys that cannot be read cannot be checked against.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from tpcdi.audit.connection import WarehouseConnection
from tpcdi.audit.exceptions import AnswerKeysInvalid
from tpcdi.exceptions import SourceNotFound
from tpcdi.readers import read_file
from tpcdi.readers.registry import batch_of_directory

logger = logging.getLogger(__name__)

AUDIT_COLUMNS = ("dataset", "batchid", '"date"', "attribute", '"value"', "dvalue")


def audit_files(data_dir: Path, through: int | None = None) -> list[Path]:
    """The ``*_audit.csv`` files of a staging area: its top level (a ``Batch<b>_audit.csv`` only
    for b <= ``through``), then those of Batch1..BatchN (up to ``through``), in batch order."""
    root = Path(data_dir)
    if not root.is_dir():
        raise SourceNotFound(f"no staging area {root}", path=str(root))

    def wanted(batch: int | None) -> bool:
        return batch is not None and (through is None or batch <= through)

    paths = [
        p
        for p in sorted(root.glob("*_audit.csv"))
        if not p.name.startswith("Batch")
        or wanted(batch_of_directory(p.name[: -len("_audit.csv")]))
    ]
    batches = sorted(
        (n, p) for p in root.iterdir() if p.is_dir() and wanted(n := batch_of_directory(p.name))
    )
    for _, folder in batches:
        paths += sorted(folder.glob("*_audit.csv"))
    if not paths:
        raise SourceNotFound(f"no *_audit.csv in {root} or its Batch directories", path=str(root))
    return paths


def read_answer_keys(data_dir: Path, through: int | None = None) -> pa.Table:
    """All answer keys of a staging area (of batches up to ``through``) as one table (DataSet,
    BatchID, Date, Attribute, Value, DValue). Raises :class:`AnswerKeysInvalid` listing lines
    that do not parse."""
    tables: list[pa.Table] = []
    problems: list[str] = []
    for path in audit_files(data_dir, through):
        result = read_file(path)
        for reject in result.rejects.to_pylist():
            problems.append(f"{path.name}:{reject['line']}: {reject['reason']}")
        tables.append(result.table)
    if problems:
        raise AnswerKeysInvalid(problems)
    keys = pa.concat_tables(tables)
    if through is not None:
        keys = keys.filter(pc.fill_null(pc.less_equal(keys["BatchID"], through), True))
    return keys


def load_audit_files(conn: WarehouseConnection, data_dir: Path, through: int | None = None) -> int:
    """Replace the content of ``audit`` with every answer key of the staging area ``data_dir``
    (of batches up to ``through``: an audit after that batch) and commit; returns the number of
    rows loaded.

    1. read and parse every ``*_audit.csv`` (nothing is written if one is unreadable);
    2. in one transaction: delete the table's rows, bulk-append the keys;
    3. commit.
    """
    keys = read_answer_keys(Path(data_dir), through)
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
