"""The SparkSession of the historical load, built from ``SPARK__*`` settings.

Local mode (``local[2]`` by default) or a cluster (``spark://host:port``). Arrow moves the data in
and out (``createDataFrame`` from Arrow tables, ``toArrow`` back), the session time zone is UTC so
timestamps keep their wall-clock value, and the shuffle partition count follows the cores.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from streamdi.settings import SparkSettings

logger = logging.getLogger(__name__)


def _cores(master: str) -> int:
    match = re.fullmatch(r"local\[(\d+)\]", master)
    if match:
        return max(1, int(match.group(1)))
    return 2 if master.startswith("local") else 8


def spark_session(settings: SparkSettings, *, master: str | None = None) -> Any:
    """A new (or the running) SparkSession for the historical load."""
    from pyspark.sql import SparkSession

    chosen = master or settings.master
    partitions = 2 * _cores(chosen)
    builder = (
        SparkSession.builder.master(chosen)
        .appName("streamdi-tpcdi-historical")
        .config("spark.driver.memory", settings.driver_memory)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", str(partitions))
        .config("spark.default.parallelism", str(partitions))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "200000")
        .config("spark.sql.adaptive.enabled", "true")
        .config("spark.sql.autoBroadcastJoinThreshold", str(32 << 20))
        .config("spark.driver.extraJavaOptions", "-XX:+UseParallelGC")
    )
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    logger.info("spark session master=%s partitions=%s", chosen, partitions)
    return session
