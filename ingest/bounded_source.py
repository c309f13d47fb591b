"""A source read up to a position: an input offered again for a replay (:mod:`runtime.reprocess`).

When the records of a stream are no longer in Kafka, a reprocess can read its bound input (a file)
again. Staging knows the last source position it applied for the stream; :class:`BoundedSource`
hands over the inner source's events and rejects up to that position and then ends, so the
replay covers exactly the input the live pipeline had applied (what follows is the live
pipeline's to read, from Kafka, after the cut-over). The last chunk carries a punctuation: the
batch that holds it closes.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow.compute as pc

from etl_dataflows.types import POS
from ingest.sources import BaseSource, SourceChunk


class BoundedSource(BaseSource):
    """``source`` up to and including position ``last_pos``."""

    def __init__(self, source: BaseSource, last_pos: int) -> None:
        super().__init__(source.columns, source.timestamp)
        self.source = source
        self.last_pos = last_pos

    @property
    def identity(self) -> str:
        return f"{self.source.identity} up to position {self.last_pos}"

    def read(self, start: int = 0) -> Iterator[SourceChunk]:
        if start > self.last_pos:
            return
        self.source.event_time_bounds = self.event_time_bounds
        self.source.max_record_bytes = self.max_record_bytes
        chunks = self.source.read(start)
        try:
            for chunk in chunks:
                if chunk.last_pos < self.last_pos:
                    yield chunk
                    continue
                events = chunk.events.filter(pc.less_equal(chunk.events[POS], self.last_pos))
                yield SourceChunk(
                    events,
                    [r for r in chunk.rejects if r.pos <= self.last_pos],
                    self.last_pos,
                    punctuation=True,
                    warnings=chunk.warnings,
                )
                return
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()
