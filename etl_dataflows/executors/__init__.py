"""Executors of dataflows, all behind :class:`BaseExecutor` and all checked against ``serial``.

``create_executor(name, flow, state)`` builds one by name; :data:`EXECUTORS` lists the executors
and :func:`executor_names` every name ``create_executor`` accepts, variants included
(``local:<strategy>``, ``spark:<placement>``).
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


def unregister_executor(name: str) -> None:
    """Forget the executor registered as ``name`` (a test's or a plug-in's); built-in executors
    cannot be removed."""
    if name in EXECUTORS:
        raise ValueError(f"{name!r} is a built-in executor")
    _REGISTRY.pop(name, None)


def executor_names() -> tuple[str, ...]:
    """Every name :func:`create_executor` accepts: each executor's, each followed by its
    variants (``local:sequential``, ..., ``spark:driver``, ...)."""
    names: list[str] = []
    for name, cls in _REGISTRY.items():
        names.append(name)
        names.extend(f"{name}:{variant}" for variant in cls.variants)
    return tuple(names)


def _available() -> str:
    parts = [", ".join(_REGISTRY)]
    for name, cls in _REGISTRY.items():
        if cls.variants:
            kind = cls.variant_kind
            parts.append(f"{name}:<{kind}> with a {kind} of {', '.join(cls.variants)}")
    return "; ".join(parts)


def create_executor(
    name: str, flow: Dataflow | CompiledDataflow, state: StateImage | None = None
) -> BaseExecutor:
    """The executor called ``name`` running ``flow`` from ``state`` (empty state by default).

    ``name`` is an executor's name (:data:`EXECUTORS`) or ``<executor>:<variant>`` for one that
    has variants: ``local:<strategy>`` fixes the local executor's strategy for every compiled
    step, ``spark:<placement>`` the Spark executor's placement. Any other name raises
    :class:`~etl_dataflows.exceptions.UnknownExecutor` naming the valid ones, before any state is
    loaded."""
    base, colon, variant = name.partition(":")
    cls = _REGISTRY.get(base)
    if cls is None or (colon and variant not in cls.variants):
        raise UnknownExecutor(f"no executor named {name!r}; available: {_available()}")
    return cls.with_variant(variant, flow, state) if colon else cls(flow, state)


__all__ = [
    "EXECUTORS",
    "BaseExecutor",
    "LocalExecutor",
    "SerialExecutor",
    "SparkExecutor",
    "create_executor",
    "executor_names",
    "register_executor",
    "unregister_executor",
]
