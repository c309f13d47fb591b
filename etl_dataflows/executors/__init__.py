"""Executors of dataflows, all behind :class:`BaseExecutor` and all checked against ``serial``.

``create_executor(name, flow, state)`` builds one by name; :data:`EXECUTORS` lists the names.
"""

from __future__ import annotations

from etl_dataflows.dataflow import CompiledDataflow, Dataflow
from etl_dataflows.exceptions import UnknownExecutor
from etl_dataflows.executors.base import BaseExecutor
from etl_dataflows.executors.baselines import LockExecutor, PatExecutor, TStreamExecutor
from etl_dataflows.executors.local import LocalExecutor
from etl_dataflows.executors.serial import SerialExecutor
from etl_dataflows.executors.spark import SparkExecutor
from etl_dataflows.state import StateImage

_REGISTRY: dict[str, type[BaseExecutor]] = {
    SerialExecutor.name: SerialExecutor,
    LocalExecutor.name: LocalExecutor,
    LockExecutor.name: LockExecutor,
    PatExecutor.name: PatExecutor,
    TStreamExecutor.name: TStreamExecutor,
    SparkExecutor.name: SparkExecutor,
}


#: Names of the built-in executors; ``serial`` is the oracle.
EXECUTORS: tuple[str, ...] = tuple(_REGISTRY)


def register_executor(cls: type[BaseExecutor]) -> type[BaseExecutor]:
    """Make ``cls`` available to :func:`create_executor` under ``cls.name`` (usable as a
    decorator). Registering a name twice replaces the earlier class."""
    _REGISTRY[cls.name] = cls
    return cls


def create_executor(
    name: str, flow: Dataflow | CompiledDataflow, state: StateImage | None = None
) -> BaseExecutor:
    """The executor called ``name`` running ``flow`` from ``state`` (empty state by default)."""
    cls = _REGISTRY.get(name)
    if cls is None:
        raise UnknownExecutor(f"no executor named {name!r}; available: {', '.join(_REGISTRY)}")
    return cls(flow, state)


__all__ = [
    "EXECUTORS",
    "BaseExecutor",
    "LocalExecutor",
    "SerialExecutor",
    "SparkExecutor",
    "create_executor",
    "register_executor",
]
