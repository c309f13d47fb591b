"""FINWIRE quarter files (clause 2.2.2.8): fixed-width CMP, SEC and FIN records into three tables.

Every record starts with the posting time stamp (``PTS``, ``YYYYMMDD-HHMMSS``) and a 3-character
record type; the fields after them are fixed width
(:data:`~tpcdi.readers.registry.FINWIRE_RECORDS`).
Text fields are right-padded and lose their padding; numbers are left-padded; a field of blanks is
null. Dates (``YYYYMMDD``) become ``date32``.

SEC and FIN records name their company in ``CoNameOrCIK``: 10 digits are a CIK, anything else (60
characters) a company name. The tables keep the trimmed text and add ``CoCIK`` (``int64``, null
unless a CIK) and ``CoName`` (null unless a name).

Every table also has ``file`` (the quarter file, e.g. ``FINWIRE2003Q1``), and ``_line`` when
asked. Rows are in file order: files by year and quarter, records by line.

Rejected: a record of an unknown type, a line longer than its layout (or too short to hold its
fixed fields), a value that does not parse, an empty required field. All the fields are sliced and
converted as whole columns (Arrow string kernels), never line by line in Python.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tpcdi.readers.convert import convert_column
from tpcdi.readers.registry import FINWIRE_NAME, FINWIRE_RECORDS, I64, STR, Field
from tpcdi.readers.rejects import FinwireResult, concat_rejects, rejects_table

_PREFIX = 18  # PTS (15) + RecType (3)


def finwire_files(directory: Path) -> list[Path]:
    """The FINWIRE quarter files of a batch directory, in year and quarter order."""
    found = []
    for path in directory.iterdir():
        match = FINWIRE_NAME.match(path.name)
        if match and path.is_file():
            found.append((int(match.group(1)), int(match.group(2)), path))
    return [path for _, _, path in sorted(found)]


def _lines(path: Path) -> pa.Array:
    """The lines of ``path`` without terminators, as a string array (one view of the bytes)."""
    data = path.read_bytes()
    if not data:
        return pa.array([], STR)
    codes = np.frombuffer(data, dtype=np.uint8)
    ends = np.flatnonzero(codes == 10)
    if not data.endswith(b"\n"):
        ends = np.append(ends, len(data))
    offsets = np.concatenate([[0], ends + 1]).astype(np.int32)
    offsets[-1] = min(int(offsets[-1]), len(data))
    lines = pa.BinaryArray.from_buffers(
        pa.binary(), len(ends), [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )
    try:
        text = pc.cast(lines, STR)
    except pa.ArrowInvalid:  # not UTF-8: keep the lines, mark the bad bytes
        text = pa.array(data.decode("utf-8", "replace").splitlines(), STR)
    return pc.utf8_rtrim(text, characters="\r\n")


def _slice(lines: pa.Array, start: int, width: int) -> pa.Array:
    return pc.utf8_slice_codeunits(lines, start, start + width)


def _blank_to_null(column: pa.Array) -> pa.Array:
    return pc.if_else(pc.equal(column, ""), None, column)


def _field_column(raw: pa.Array, spec: Field) -> tuple[pa.Array, np.ndarray]:
    """The typed column of a fixed-width field and the mask of values that did not parse."""
    if pa.types.is_string(spec.type):
        return _blank_to_null(pc.utf8_rtrim(raw, characters=" ")), np.zeros(len(raw), dtype=bool)
    text = _blank_to_null(pc.utf8_trim(raw, characters=" "))
    if pa.types.is_date(spec.type):
        parsed = pc.strptime(text, format="%Y%m%d", unit="s", error_is_null=True)
        failed = pc.and_(text.is_valid(), parsed.is_null()).to_numpy(zero_copy_only=False)
        return pc.cast(parsed, spec.type), failed
    return convert_column(text, spec.type)


def _records(
    lines: pa.Array, files: pa.Array, numbers: pa.Array, kind: str, line_numbers: bool
) -> tuple[pa.Table, pa.Table]:
    fields = FINWIRE_RECORDS[kind]
    fixed = sum(f.width for f in fields if f.name != "CoNameOrCIK")
    full = _PREFIX + sum(f.width for f in fields)
    length = pc.utf8_length(lines).to_numpy(zero_copy_only=False)
    has_company = fields[-1].name == "CoNameOrCIK"
    if has_company:
        too_long_or_short = (length > full) | (length <= _PREFIX + fixed)
    else:
        too_long_or_short = length > full
        lines = pc.utf8_rpad(lines, full, " ")  # restore trailing blanks a writer may have cut
    reasons: dict[int, str] = {}
    _note(
        reasons,
        too_long_or_short,
        lambda r: (
            f"{kind} record of {length[r]} characters, "
            f"expected {full}" + (" or fewer" if has_company else "")
        ),
    )
    bad = too_long_or_short.copy()
    pts = pc.strptime(_slice(lines, 0, 15), format="%Y%m%d-%H%M%S", unit="us", error_is_null=True)
    failed = pts.is_null().to_numpy(zero_copy_only=False) & ~bad
    _note(reasons, failed, lambda r: f"PTS: cannot read {lines[r].as_py()[:15]!r}")
    bad |= failed
    columns: dict[str, pa.Array] = {"PTS": pts}
    offset = _PREFIX
    for spec in fields:
        width = spec.width if spec.name != "CoNameOrCIK" else 60
        raw = _slice(lines, offset, width)
        column, failed = _field_column(raw, spec)
        failed &= ~bad

        def cannot_read(row: int, name: str = spec.name, text: pa.Array = raw) -> str:
            return f"{name}: cannot read {text[row].as_py()!r}"

        _note(reasons, failed, cannot_read)
        bad |= failed
        if spec.required:
            empty = column.is_null().to_numpy(zero_copy_only=False) & ~bad

            def required(_row: int, name: str = spec.name) -> str:
                return f"required field empty: {name}"

            _note(reasons, empty, required)
            bad |= empty
        columns[spec.name] = column
        offset += width
    if has_company:
        company = columns["CoNameOrCIK"]
        is_cik = pc.fill_null(pc.match_substring_regex(company, r"^\d{10}$"), False)
        columns["CoCIK"] = pc.cast(pc.if_else(is_cik, company, None), I64)
        columns["CoName"] = pc.if_else(is_cik, None, company)
    columns["file"] = files
    if line_numbers:
        columns["_line"] = numbers
    table = pa.table(columns)
    rows = np.flatnonzero(bad)
    taken = pa.array(rows, I64)
    rejects = rejects_table(
        pc.take(files, taken).to_pylist(),
        pc.take(numbers, taken).to_pylist(),
        [reasons[int(r)] for r in rows],
        [line.rstrip() for line in pc.take(lines, taken).to_pylist()],
    )
    return table.filter(pa.array(~bad)), rejects


def _note(reasons: dict[int, str], mask: np.ndarray, text: Callable[[int], str]) -> None:
    for row in np.flatnonzero(mask):
        note = text(int(row))
        reasons[int(row)] = f"{reasons[int(row)]}; {note}" if int(row) in reasons else note


def read_finwire(paths: Iterable[Path], *, line_numbers: bool = False) -> FinwireResult:
    """Read FINWIRE quarter files (in the order given) into CMP, SEC and FIN tables."""
    line_parts, file_parts, number_parts = [], [], []
    for path in paths:
        lines = _lines(path)
        line_parts.append(lines)
        file_parts.append(pa.array([path.name] * len(lines), STR))
        number_parts.append(pa.array(np.arange(1, len(lines) + 1), I64))
    if not line_parts:
        line_parts, file_parts, number_parts = (
            [pa.array([], STR)],
            [pa.array([], STR)],
            [pa.array([], I64)],
        )
    lines = pa.concat_arrays(line_parts)
    files = pa.concat_arrays(file_parts)
    numbers = pa.concat_arrays(number_parts)
    kinds = _slice(lines, 15, 3)
    tables, rejects = {}, []
    for kind in FINWIRE_RECORDS:
        mask = pc.equal(kinds, kind)
        table, bad = _records(
            lines.filter(mask), files.filter(mask), numbers.filter(mask), kind, line_numbers
        )
        tables[kind] = table
        rejects.append(bad)
    unknown = pc.invert(pc.is_in(kinds, pa.array(list(FINWIRE_RECORDS)))).to_numpy(
        zero_copy_only=False
    )
    rows = np.flatnonzero(unknown)
    if len(rows):
        taken = pa.array(rows, I64)
        other = rejects_table(
            pc.take(files, taken).to_pylist(),
            pc.take(numbers, taken).to_pylist(),
            [f"unknown record type {k!r}" for k in pc.take(kinds, taken).to_pylist()],
            pc.take(lines, taken).to_pylist(),
        )
        rejects.append(other)
    return FinwireResult(tables, concat_rejects(rejects))
