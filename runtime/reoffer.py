"""Inputs offered again to a reprocess's shadow (``streamdi upgrade reprocess --reoffer``).

When a stream's records are gone from Kafka (retention), or to replay from the source of truth,
the shadow reads the stream's bound input (a file) again instead: :func:`reoffer_spec` rebinds
each stream that has an input to a topic of the shadow's own
(``reprocess.<dataflow>.<shadow id>.<stream>``), fed by a collector reading the input up to the
last position staging applied for the stream (:class:`~ingest.bounded_source.BoundedSource`);
streams without an input are still read from their topic. The shadow's collectors resume from the
shadow's stream progress, so a shadow started at a checkpoint offers only what follows it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from ingest.bounded_source import BoundedSource
from runtime.replay_start import ReprocessRefused
from runtime.runspec import RunSpec


def shadow_topic_prefix(flow_name: str) -> str:
    """The prefix of every topic the shadows of ``flow_name``'s reprocesses write."""
    return f"reprocess.{flow_name}."


def reoffered_streams(spec: RunSpec) -> list[str]:
    """The streams of ``spec`` bound to an input; :class:`ReprocessRefused` when none is, or
    when one shares its topic with a stream that has none (the shadow could not read the one
    without the other's records)."""
    streams = [s for s, b in spec.streams.items() if b.input is not None]
    if not streams:
        raise ReprocessRefused(
            f"--reoffer: no stream of dataflow {spec.flow.name!r} is bound to an input in this "
            "run spec, so there is nothing to offer again (bind(flow, stream=source))"
        )
    for topic, sharing in spec.topics().items():
        bound = [s for s in sharing if s in streams]
        if bound and len(bound) != len(sharing):
            raise ReprocessRefused(
                f"--reoffer: topic {topic!r} carries streams with an input ({bound}) and without "
                f"({sorted(set(sharing) - set(bound))}); give them topics of their own"
            )
    return streams


def reoffer_spec(spec: RunSpec, positions: Mapping[str, int], shadow_id: str) -> RunSpec:
    """``spec`` with every stream in ``positions`` (stream -> the last position staging applied)
    read from its input again, up to that position, through a topic of the shadow's."""
    prefix = shadow_topic_prefix(spec.flow.name)
    streams = dict(spec.streams)
    for stream, last_pos in positions.items():
        binding = streams[stream]
        assert binding.input is not None, stream
        streams[stream] = replace(
            binding,
            topic=f"{prefix}{shadow_id}.{stream}",
            input=BoundedSource(binding.input, last_pos),
        )
    return RunSpec(spec.flow, streams)
