"""The transactional dataflow engine: the dataflow API, its executors and the testing harness.

Define a dataflow with :class:`Dataflow`, state tables with ``flow.table`` / ``history_table`` /
``window_table``, expressions with :func:`col`, :func:`old`, :func:`lit` and friends, then run it
with an executor (``create_executor("serial", flow)``) or the in-memory harness in
:mod:`etl_dataflows.testing`.
"""

from etl_dataflows.batch import BatchResult, EngineBatch, StepDecision, TableDelta
from etl_dataflows.dataflow import CompiledDataflow, Dataflow
from etl_dataflows.executors import EXECUTORS, BaseExecutor, create_executor
from etl_dataflows.expressions import (
    coalesce,
    col,
    concat,
    cost,
    date_of,
    greatest,
    if_else,
    least,
    lit,
    old,
    udf,
)
from etl_dataflows.state import StateImage

__all__ = [
    "EXECUTORS",
    "BaseExecutor",
    "BatchResult",
    "CompiledDataflow",
    "Dataflow",
    "EngineBatch",
    "StateImage",
    "StepDecision",
    "TableDelta",
    "coalesce",
    "col",
    "concat",
    "cost",
    "create_executor",
    "date_of",
    "greatest",
    "if_else",
    "least",
    "lit",
    "old",
    "udf",
]
