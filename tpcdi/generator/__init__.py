"""The TPC-DI data generator: DIGen's files and answer keys at any scale factor, fast and
deterministic by seed (see :func:`generate`)."""

from tpcdi.generator.generate import GenerationReport, generate
from tpcdi.generator.scale import Scale

__all__ = ["GenerationReport", "Scale", "generate"]
