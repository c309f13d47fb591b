"""The ``local`` executor: compiled, adaptive, single-machine (see :mod:`.executor`)."""

from etl_dataflows.executors.local.executor import LocalExecutor

__all__ = ["LocalExecutor"]
