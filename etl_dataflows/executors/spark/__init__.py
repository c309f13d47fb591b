"""The ``spark`` executor: chains partitioned by key across Spark tasks (see :mod:`.executor`).

Importing this package does not import pyspark; the session starts when a batch first needs it.
"""

from etl_dataflows.executors.spark.executor import SparkExecutor
from etl_dataflows.executors.spark.session import (
    SparkConfig,
    config_from_settings,
    configure_spark,
    current_config,
    spark_session,
)

__all__ = [
    "SparkConfig",
    "SparkExecutor",
    "config_from_settings",
    "configure_spark",
    "current_config",
    "spark_session",
]
