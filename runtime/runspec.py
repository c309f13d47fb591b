"""How a user names what a run reads: a dataflow plus a binding of each of its sources to a Kafka
topic and, optionally, to an input (a file or an iterable) that the collector offers into it.

In a module::

    from etl_dataflows import Dataflow
    from ingest import DelimitedFileSource
    from runtime import bind

    flow = Dataflow("ledger")
    ...                                   # tables, flow.source("txns", ...), steps, sinks
    run = bind(flow, txns=DelimitedFileSource("txns.txt", columns={...}, timestamp="ts"))

then ``streamdi run mymodule:run``. A binding value is a topic name (``txns="bank.txns"``), an
input (its topic is ``<dataflow>.<source>``), or a :class:`StreamBinding` for both. ``streamdi run
mymodule:flow`` with a bare dataflow reads every source from its default topic, filled by outside
producers. The attribute may also be a function returning either.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from etl_dataflows.dataflow import CompiledDataflow, Dataflow
from etl_dataflows.exceptions import DataflowDefinitionError
from ingest.sources import BaseSource
from runtime.exceptions import RunSpecError

_UNSET = -1


@dataclass(frozen=True)
class StreamBinding:
    """One source of the dataflow: its topic, the input a collector offers (if any), the topic's
    partition count when streamdi creates it, and the stream's own allowed lateness (``-1``: the
    setting ``INGEST__ALLOWED_LATENESS_MS``; ``None``: no check)."""

    topic: str | None = None
    input: BaseSource | None = None
    partitions: int = 1
    allowed_lateness_ms: int | None = _UNSET


@dataclass
class RunSpec:
    """A dataflow and the bindings of its sources (every source has one)."""

    flow: CompiledDataflow
    streams: dict[str, StreamBinding] = field(default_factory=dict)

    def topic(self, stream: str) -> str:
        binding = self.streams.get(stream) or StreamBinding()
        return binding.topic or f"{self.flow.name}.{stream}"

    def stream_topics(self) -> dict[str, str]:
        """Stream -> its topic, for every source of the dataflow."""
        return {stream: self.topic(stream) for stream in self.flow.sources}

    def topics(self) -> dict[str, list[str]]:
        """Topic -> the streams it carries."""
        out: dict[str, list[str]] = {}
        for stream in self.flow.sources:
            out.setdefault(self.topic(stream), []).append(stream)
        return out

    def lateness(self) -> dict[str, int | None]:
        """Per-stream lateness overrides."""
        return {
            s: b.allowed_lateness_ms
            for s, b in self.streams.items()
            if b.allowed_lateness_ms != _UNSET
        }


def bind(flow: Dataflow | CompiledDataflow, **streams: StreamBinding | BaseSource | str) -> RunSpec:
    """A :class:`RunSpec` for ``flow``; see the module docstring."""
    compiled = flow.build() if isinstance(flow, Dataflow) else flow
    unknown = sorted(set(streams) - set(compiled.sources))
    if unknown:
        raise RunSpecError(
            f"bindings for {unknown}, which are not sources of dataflow {compiled.name!r} "
            f"(its sources: {list(compiled.sources)})"
        )
    bindings: dict[str, StreamBinding] = {}
    for name in compiled.sources:
        value = streams.get(name)
        if value is None:
            bindings[name] = StreamBinding()
        elif isinstance(value, StreamBinding):
            bindings[name] = value
        elif isinstance(value, BaseSource):
            bindings[name] = StreamBinding(input=value)
        elif isinstance(value, str):
            bindings[name] = StreamBinding(topic=value)
        else:
            raise RunSpecError(f"binding of {name!r}: expected a topic, a source or a binding")
    return RunSpec(compiled, bindings)


def load_run_spec(target: str) -> RunSpec:
    """Import ``module:attribute`` (or ``path/to/file.py:attribute``) and make a run spec of it."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise RunSpecError(f"{target!r}: expected module:attribute, e.g. mypackage.flows:run")
    try:
        if module_name.endswith(".py"):
            path = Path(module_name).resolve()
            sys.path.insert(0, str(path.parent))
            module = importlib.import_module(path.stem)
        else:
            if "" not in sys.path and str(Path.cwd()) not in sys.path:
                sys.path.insert(0, str(Path.cwd()))
            module = importlib.import_module(module_name)
    except ImportError as exc:
        raise RunSpecError(f"cannot import {module_name!r}: {exc}") from exc
    value = getattr(module, attribute, None)
    if value is None:
        raise RunSpecError(f"module {module_name!r} has no attribute {attribute!r}")
    if callable(value) and not isinstance(value, Dataflow | CompiledDataflow | RunSpec):
        value = _call(value)
    try:
        if isinstance(value, RunSpec):
            return value
        if isinstance(value, Dataflow | CompiledDataflow):
            return bind(value)
    except DataflowDefinitionError as exc:
        raise RunSpecError(f"{target}: {exc}") from exc
    raise RunSpecError(
        f"{target} is a {type(value).__name__}; expected a Dataflow, a RunSpec (runtime.bind) or "
        "a function returning one"
    )


def _call(fn: Callable[[], object]) -> object:
    try:
        return fn()
    except TypeError as exc:
        raise RunSpecError(f"calling {fn!r} without arguments failed: {exc}") from exc
