"""An input offered again up to a position (ingest.bounded_source): the events and rejects up to
that position and nothing after, the last chunk punctuated, from any start."""

from __future__ import annotations

from pathlib import Path

from ingest.bounded_source import BoundedSource
from ingest.sources import CsvFileSource


def _source(tmp_path: Path) -> CsvFileSource:
    path = tmp_path / "events.csv"
    lines = ["key,amount,ts"]
    for i in range(20):
        lines.append(f"{i},{'oops' if i == 15 else i},{1000 + i}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return CsvFileSource(
        path, {"key": "int64", "amount": "int64", "ts": "int64"}, timestamp="ts", chunk_bytes=64
    )


def _read(source: BoundedSource, start: int = 0) -> tuple[list[int], list[int], list[bool]]:
    positions, rejects, punctuation = [], [], []
    for chunk in source.read(start):
        positions += chunk.events["_pos"].to_pylist()
        rejects += [r.pos for r in chunk.rejects]
        punctuation.append(chunk.punctuation)
    return positions, rejects, punctuation


def test_only_what_lies_up_to_the_position_is_offered(tmp_path: Path) -> None:
    inner = _source(tmp_path)
    everything = [p for c in inner.read(0) for p in c.events["_pos"].to_pylist()]
    assert len(everything) == 19  # one row rejected
    bound = everything[9]
    positions, rejects, punctuation = _read(BoundedSource(inner, bound))
    assert positions == everything[:10]
    assert rejects == []
    assert punctuation[-1] and len(punctuation) > 1
    # past the rejected row, the reject comes along; a later start reads from there
    positions, rejects, _ = _read(BoundedSource(inner, everything[-1]), start=everything[12])
    assert positions == everything[12:]
    assert len(rejects) == 1
    assert _read(BoundedSource(inner, bound), start=bound + 1) == ([], [], [])
    assert BoundedSource(inner, bound).identity != inner.identity
