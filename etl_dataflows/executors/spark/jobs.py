"""Spark jobs of the executor: shipping the dataflow once, and one pass per superstep.

Data travels as Arrow inside pickled :class:`~.task.PartitionWork` objects. In local mode a
broadcast reaches the workers through a file (about 300 MB/s here), several times faster than
``parallelize`` (~50 MB/s) or ``createDataFrame`` + ``mapInArrow`` over Arrow tables of this size
(which split into thousands of tasks), so each partition's work is one broadcast that only its task
reads, destroyed when the pass ends. Results come back with ``collect``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from etl_dataflows.dataflow import CompiledDataflow
from etl_dataflows.executors.spark.exceptions import SparkTaskFailed
from etl_dataflows.executors.spark.session import spark_session
from etl_dataflows.executors.spark.task import PartitionResult, PartitionWork, spark_task

logger = logging.getLogger(__name__)


class ShippedFlow:
    """A dataflow broadcast to the workers once (cloudpickled: user functions travel by value
    when they are not importable), under a key the workers cache it by."""

    def __init__(self, flow: CompiledDataflow, key: str) -> None:
        self.flow = flow
        self.key = key
        self._broadcast: Any = None

    def broadcast(self) -> Any:
        if self._broadcast is None:
            from pyspark import cloudpickle

            context = spark_session().sparkContext
            pickled = cloudpickle.dumps(self.flow)  # type: ignore[no-untyped-call]
            self._broadcast = context.broadcast(pickled)
        return self._broadcast

    def release(self) -> None:
        if self._broadcast is not None:
            try:
                self._broadcast.destroy()
            except Exception:  # the session may already be gone
                logger.debug("flow broadcast destroy failed", exc_info=True)
            self._broadcast = None


@dataclass
class PassTiming:
    """Where a pass spent its time: putting the work into broadcasts, the job, the tasks."""

    broadcast_seconds: float
    job_seconds: float
    slowest_task: float
    total_task: float
    #: Seconds per phase of the tasks, summed over the pass's tasks (fetch: reading the work).
    phases: dict[str, float] = field(default_factory=dict)


def run_pass(
    shipped: ShippedFlow, step: str, works: Iterable[PartitionWork]
) -> tuple[list[PartitionResult], PassTiming]:
    """Run one pass: task ``i`` runs the ``i``-th work; the results in the same order. Each work
    is written to its broadcast as soon as it is made and not kept (``works`` may be a generator:
    the driver holds one partition's work at a time)."""
    context = spark_session().sparkContext
    started = time.perf_counter()
    flow_broadcast = shipped.broadcast()
    broadcasts: list[Any] = []
    try:
        for work in works:
            broadcasts.append(context.broadcast(work))
            del work
        job_started = time.perf_counter()
        rdd = context.parallelize(range(len(broadcasts)), len(broadcasts))
        try:
            results = rdd.mapPartitionsWithIndex(
                spark_task(shipped.key, flow_broadcast, broadcasts)
            ).collect()
        except Exception as exc:  # py4j surfaces task failures as Java errors
            message = f"a Spark pass failed: {type(exc).__name__}: {exc}"
            raise SparkTaskFailed(message, step=step) from exc
        finished = time.perf_counter()
    finally:
        for broadcast in broadcasts:
            try:
                broadcast.destroy()
            except Exception:
                logger.debug("work broadcast destroy failed", exc_info=True)
    expected = len(broadcasts)
    if len(results) != expected or not all(isinstance(r, PartitionResult) for r in results):
        raise SparkTaskFailed(f"a pass returned {len(results)} results for {expected}", step=step)
    timing = PassTiming(
        broadcast_seconds=job_started - started,
        job_seconds=finished - job_started,
        slowest_task=max(r.seconds for r in results),
        total_task=sum(r.seconds for r in results),
        phases={
            phase: sum(r.timings.get(phase, 0.0) for r in results)
            for phase in ("fetch", "load", "prepare", "execute", "finish", "changes")
        },
    )
    return results, timing
