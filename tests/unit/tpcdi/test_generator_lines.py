"""The compiled line formatter writes exactly the text the Arrow helpers write (the files'
bytes do not depend on which of the two made them), and the writer's threads keep line order."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpcdi.generator import lines, text
from tpcdi.generator.writer import Progress, StagingWriter

# seconds of 0001-01-01 .. 9999-12-31, the years a timestamp is written with
FIRST_SECOND, LAST_SECOND = -62_135_596_800, 253_402_300_799
int64s = st.integers(-(2**63) + 1, 2**63 - 1)


def _arrow_bytes(columns: list[pa.Array], delimiter: str = "|") -> bytes:
    out = io.BytesIO()
    text.write_lines(out, text.join_fields(columns, delimiter))
    return out.getvalue()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            int64s,
            st.integers(-(10**15), 10**15),
            st.integers(FIRST_SECOND, LAST_SECOND),
            st.integers(FIRST_SECOND // 86_400, LAST_SECOND // 86_400),
            st.integers(0, 3),
            st.booleans(),
        ),
        min_size=1,
        max_size=40,
    )
)
def test_every_kind_of_field_is_written_as_arrow_writes_it(
    rows: list[tuple[int, int, int, int, int, bool]],
) -> None:
    a, cents, seconds, days, index, null = (np.array(c) for c in zip(*rows, strict=True))
    pool = ["PNDG", "", "Sale of ", "Zoë|x"]
    expected = _arrow_bytes(
        [
            text.ints(a),
            text.money(cents),
            text.timestamps(seconds),
            text.dates(days),
            text.pick(pool, index),
            text.with_nulls(text.money(cents, 5), null),
            text.concat(text.pick(["Purchase of ", "Sale of "], index % 2), text.ints(a), " x"),
        ]
    )
    got = lines.format_lines(
        [
            lines.ints(a),
            lines.money(cents),
            lines.timestamps(seconds),
            lines.dates(days),
            lines.pick(pool, index),
            lines.with_nulls(lines.money(cents, 5), null),
            lines.pick(["Purchase of ", "Sale of "], index % 2),
            lines.glued(lines.ints(a)),
            lines.glued(lines.const(" x", len(a))),
        ],
        "|",
    )
    assert got.tobytes() == expected


def test_pools_may_be_arrow_slices_with_nulls_and_the_delimiter_any_text() -> None:
    pool = pa.array(["skip", "AAPL", None, "MSFT", "ünïcode"]).slice(1)
    index = np.array([0, 1, 2, 3, 3, 0])
    got = lines.format_lines([lines.pick(pool, index), lines.ints(index)], ", ", eol="\n")
    assert got.tobytes().decode() == "AAPL, 0\n, 1\nMSFT, 2\nünïcode, 3\nünïcode, 3\nAAPL, 0\n"


def test_empty_fields_and_bad_lengths() -> None:
    assert lines.format_lines([lines.ints(np.zeros(0, np.int64))], "|").tobytes() == b""
    nulls = lines.with_nulls(lines.ints(np.arange(3)), np.array([True, True, True]))
    assert lines.format_lines([nulls, nulls], "|").tobytes() == b"|\r\n|\r\n|\r\n"
    with pytest.raises(ValueError, match="lengths"):
        lines.format_lines([lines.ints(np.arange(3)), lines.ints(np.arange(2))], "|")
    with pytest.raises(ValueError, match="at least one"):
        lines.format_lines([], "|")


def test_the_writer_keeps_line_order_across_its_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tpcdi.generator.writer.FORMAT_ROWS", 1000)
    writer = StagingWriter(tmp_path, Progress(0, enabled=False), [1])
    try:
        count = writer.formatted_rows(
            1, "Numbers.txt", 10_500, lambda rows: [lines.ints(rows), lines.ints(rows * 2)]
        )
    finally:
        writer.close()
    content = (tmp_path / "Batch1" / "Numbers.txt").read_bytes()
    assert count == 10_500 == writer.records[(1, "Numbers.txt")]
    assert content == b"".join(b"%d|%d\r\n" % (i, 2 * i) for i in range(10_500))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(-(10**12), 10**12),
            st.integers(FIRST_SECOND, LAST_SECOND),
            st.integers(0, 2),
            st.booleans(),
        ),
        min_size=1,
        max_size=40,
    ),
    st.integers(1, 14),
)
def test_fixed_width_records_are_what_the_arrow_padding_writes(
    rows: list[tuple[int, int, int, bool]], width: int
) -> None:
    a, seconds, index, null = (np.array(c) for c in zip(*rows, strict=True))
    pool = pa.array(["Zoë Ünïcödé name", "", "ABCDEFGHIJKLMNOPQRSTUVWXYZ"])
    stamp = text.timestamps(seconds)
    pts = pc.binary_join_element_wise(
        *(pc.utf8_slice_codeunits(stamp, lo, hi) for lo, hi in ((0, 4), (5, 7), (8, 10))),
        "-",
        *(pc.utf8_slice_codeunits(stamp, lo, hi) for lo, hi in ((11, 13), (14, 16), (17, 19))),
        "",
    )
    names = text.with_nulls(text.pick(pool, index), null)
    expected = text.concat(
        pts,
        text.compact_dates(seconds // 86_400),
        pc.utf8_lpad(text.money(a), width=width, padding=" "),
        pc.utf8_lpad(text.ints(a), width=width, padding="0"),
        pc.utf8_slice_codeunits(
            pc.utf8_rpad(pc.fill_null(names, ""), width=width, padding="."), 0, width
        ),
    )
    got = lines.format_strings(
        [
            lines.stamps(seconds),
            lines.compact_dates(seconds // 86_400),
            lines.padded(lines.money(a), width, right=True),
            lines.padded(lines.ints(a), width, right=True, fill="0"),
            lines.padded(lines.with_nulls(lines.pick(pool, index), null), width, fill="."),
        ]
    )
    assert got.to_pylist() == expected.to_pylist()
    with pytest.raises(ValueError, match="single-byte"):
        lines.padded(lines.ints(a), 3, fill="ü")
