"""The ``changes`` stream resumed at any position gives exactly the events and rejects at and
after it (a collector resumes there after a crash)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tpcdi.generator import generate
from tpcdi.incremental.changes import ChangesSource, position


@pytest.fixture(scope="module")
def batch2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("changes")
    generate(data, 0.02, seed=3)
    return data / "Batch2"


def _events(source: ChangesSource, start: int) -> pa.Table:
    return pa.concat_tables([c.events for c in source.read(start)])


@pytest.mark.parametrize(
    ("file_index", "line"),
    [(0, 0), (0, 1), (0, 37), (1, 0), (3, 5), (6, 0), (7, 2), (8, 0)],
)
def test_a_resume_reads_exactly_the_events_from_its_position(
    batch2: Path, file_index: int, line: int
) -> None:
    source = ChangesSource(batch2, 2)
    everything = _events(source, 0)
    start = position(2, file_index, line)
    resumed = _events(ChangesSource(batch2, 2), start)
    expected = everything.filter(pc.greater_equal(everything.column("_pos"), start))
    assert resumed.num_rows == expected.num_rows
    assert resumed.column("_pos").to_pylist() == expected.column("_pos").to_pylist()
    assert resumed.equals(expected)
    if file_index in (0, 3) and line > 1:  # inside a file: some of its rows were left out
        assert resumed.num_rows < everything.num_rows
