"""Data collection: sources -> logical batches -> Kafka topics (the collector); Kafka -> batches for
the engine (the consumer and the assembler). The only stage that imports kafka. What a run reads
(:class:`runtime.RunSpec`, :func:`runtime.bind`) and the loop that drives the engine, staging and
migration (:mod:`runtime.pipeline`) live in the composition root, :mod:`runtime`."""

from ingest.sources import (
    PUNCTUATION,
    BaseSource,
    CsvFileSource,
    DelimitedFileSource,
    IterableSource,
    SourceChunk,
)

__all__ = [
    "PUNCTUATION",
    "BaseSource",
    "CsvFileSource",
    "DelimitedFileSource",
    "IterableSource",
    "SourceChunk",
]
