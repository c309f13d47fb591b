"""Data collection: sources -> logical batches -> Kafka topics (the collector); Kafka -> engine ->
staging (the pipeline). The only stage that imports kafka."""

from ingest.runspec import RunSpec, StreamBinding, bind, load_run_spec
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
    "RunSpec",
    "SourceChunk",
    "StreamBinding",
    "bind",
    "load_run_spec",
]
