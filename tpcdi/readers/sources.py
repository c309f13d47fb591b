"""One entry point per kind of input: a source file, a batch directory, the answer keys.

The batch of a file (which decides whether it has CDC columns) is the ``batch`` argument, else the
number in its directory's name (``Batch2``), else 1.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from tpcdi.exceptions import SourceNotFound
from tpcdi.readers.customer_mgmt import read_customer_mgmt
from tpcdi.readers.delimited import CHUNK_BYTES, iter_delimited, read_delimited
from tpcdi.readers.finwire import finwire_files, read_finwire
from tpcdi.readers.registry import SOURCE_FILES, SourceFile, batch_of_directory, source_file
from tpcdi.readers.rejects import FinwireResult, ReadResult, concat_rejects


def _batch(path: Path, batch: int | None) -> int:
    if batch is not None:
        return batch
    return batch_of_directory(path.parent.name) or 1


def _existing(path: Path) -> Path:
    if not path.is_file():
        raise SourceNotFound(f"no source file {path}", path=str(path))
    return path


def read_file(path: Path, *, batch: int | None = None, line_numbers: bool = False) -> ReadResult:
    """Read one source file (any format but FINWIRE) into a typed table and its rejects.

    ``line_numbers`` adds an ``int64`` column ``_line`` (1-based line of each row; for
    CustomerMgmt.xml the line of the row's ``<Action>``).
    """
    path = _existing(Path(path))
    spec = source_file(path.name)
    if spec.format == "xml":
        return read_customer_mgmt(path, line_numbers=line_numbers)
    if spec.format == "finwire":
        raise ValueError(f"{path.name}: read FINWIRE files with read_finwire()")
    return read_delimited(path, spec, _batch(path, batch), line_numbers=line_numbers)


def iter_file(
    path: Path,
    *,
    batch: int | None = None,
    line_numbers: bool = False,
    chunk_bytes: int = CHUNK_BYTES,
) -> Iterator[ReadResult]:
    """Read a big delimited file as a stream of pieces (about ``chunk_bytes`` of text each), in
    file order; other formats yield their whole table once."""
    path = _existing(Path(path))
    spec = source_file(path.name)
    if spec.format in ("pipe", "csv", "audit", "batch_date"):
        yield from iter_delimited(
            path, spec, _batch(path, batch), line_numbers=line_numbers, chunk_bytes=chunk_bytes
        )
    else:
        yield read_file(path, batch=batch, line_numbers=line_numbers)


def read_batch_date(path: Path) -> datetime.date:
    """The date in BatchDate.txt. Raises :class:`SourceNotFound` when the file holds none."""
    result = read_file(path)
    if result.num_rows != 1:
        raise SourceNotFound(f"{path}: expected one batch date, found {result.num_rows}")
    value: datetime.date = result.table.column("BatchDate")[0].as_py()
    return value


def read_batch_finwire(directory: Path, *, line_numbers: bool = False) -> FinwireResult:
    """Read every FINWIRE quarter file of a batch directory, in year and quarter order."""
    return read_finwire(finwire_files(Path(directory)), line_numbers=line_numbers)


def read_audit(root: Path) -> pa.Table:
    """Every ``*_audit.csv`` under ``root`` (the staging area or one batch directory) as one table
    with the columns of the DW ``Audit`` table; the header lines are not loaded."""
    paths = sorted(Path(root).rglob("*_audit.csv"))
    if not paths:
        raise SourceNotFound(f"no *_audit.csv under {root}", path=str(root))
    tables = [read_file(p).table for p in paths]
    return pa.concat_tables(tables)


def audit_value(audit: pa.Table, dataset: str, attribute: str, batch: int | None = None) -> int:
    """Sum of ``Value`` over the audit rows of ``dataset``/``attribute`` (in ``batch`` if given)."""
    mask = pc.and_(pc.equal(audit["DataSet"], dataset), pc.equal(audit["Attribute"], attribute))
    if batch is not None:
        mask = pc.and_(mask, pc.equal(audit["BatchID"], batch))
    total = pc.sum(audit.filter(mask)["Value"]).as_py()
    return int(total or 0)


@dataclass(frozen=True)
class BatchData:
    """Every source of one batch directory: ``files`` by name, ``finwire`` (Batch1 only)."""

    batch: int
    files: dict[str, ReadResult] = field(default_factory=dict)
    finwire: FinwireResult | None = None

    @property
    def rejects(self) -> pa.Table:
        parts = [r.rejects for r in self.files.values()]
        if self.finwire is not None:
            parts.append(self.finwire.rejects)
        return concat_rejects(parts)


def staging_batches(root: Path) -> list[int]:
    """The batch numbers of a staging area's ``Batch<N>`` directories, 1..N in order (DIGen's
    layout: 1, 2, 3; a daily feed: one per day after Batch1). Raises
    :class:`~tpcdi.exceptions.SourceNotFound` when Batch1 is missing or a batch in between is."""
    root = Path(root)
    found = (
        sorted(
            n
            for n in (batch_of_directory(p.name) for p in root.iterdir() if p.is_dir())
            if n is not None
        )
        if root.is_dir()
        else []
    )
    expected = list(range(1, len(found) + 1))
    if not found or found != expected:
        missing = sorted(set(range(1, max(found, default=1) + 1)) - set(found))
        raise SourceNotFound(
            f"{root} holds no Batch1..BatchN sequence (missing "
            + ", ".join(f"Batch{n}" for n in missing)
            + ")",
            path=str(root),
        )
    return found


def batch_sources(batch: int) -> list[SourceFile]:
    """The registry entries of the data files DIGen writes into ``Batch<batch>``."""
    return [
        spec
        for name, spec in SOURCE_FILES.items()
        if spec.in_batch(batch) and name not in ("FINWIRE", "audit")
    ]


def read_batch(
    directory: Path, *, batch: int | None = None, line_numbers: bool = False
) -> BatchData:
    """Read every data file of a batch directory (not the audit files)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise SourceNotFound(f"no batch directory {directory}", path=str(directory))
    number = batch if batch is not None else batch_of_directory(directory.name) or 1
    files = {
        spec.name: read_file(directory / spec.name, batch=number, line_numbers=line_numbers)
        for spec in batch_sources(number)
    }
    finwire = (
        read_batch_finwire(directory, line_numbers=line_numbers)
        if SOURCE_FILES["FINWIRE"].in_batch(number)
        else None
    )
    return BatchData(number, files, finwire)
