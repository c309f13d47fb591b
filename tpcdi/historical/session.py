"""The SparkSession of the historical load: the process's one Spark session, shared with the
engine's ``spark`` executor (:mod:`etl_dataflows.executors.spark.session`).

The session is built from ``SPARK__*`` (``--spark-master`` overrides the master; local[2] by
default, ``spark://host:port`` for a cluster) by the executor's builder, so a run with
``--executor spark`` starts Spark once. The load then sets what it needs per session, all runtime
SQL settings: UTC as the session time zone (timestamps keep their wall-clock value), Arrow for
``toArrow``, shuffle partitions from the cores, and a broadcast threshold that covers the small
dimensions.
"""

from __future__ import annotations

import logging
from typing import Any

from streamdi.settings import SparkSettings

logger = logging.getLogger(__name__)

#: Dimensions up to this size are broadcast to the fact joins.
BROADCAST_BYTES = 32 << 20


def spark_session(settings: SparkSettings, *, master: str | None = None) -> Any:
    """The process's SparkSession (started on first use), configured for the historical load.

    Raises :class:`~etl_dataflows.executors.spark.exceptions.SparkUnavailable` when Spark cannot
    start, or when the session already runs on another master."""
    from etl_dataflows.executors.spark.session import (
        configure_spark,
        current_config,
    )
    from etl_dataflows.executors.spark.session import (
        spark_session as shared_session,
    )

    configure_spark(
        current_config(),
        master=master or settings.master,
        driver_memory=settings.driver_memory,
        partitions=settings.partitions,
    )
    session = shared_session()
    cores = max(1, int(session.sparkContext.defaultParallelism))
    partitions = 2 * cores
    for key, value in (
        ("spark.sql.session.timeZone", "UTC"),
        ("spark.sql.shuffle.partitions", str(partitions)),
        ("spark.sql.execution.arrow.pyspark.enabled", "true"),
        ("spark.sql.execution.arrow.maxRecordsPerBatch", "200000"),
        ("spark.sql.adaptive.enabled", "true"),
        ("spark.sql.autoBroadcastJoinThreshold", str(BROADCAST_BYTES)),
    ):
        session.conf.set(key, value)
    logger.info(
        "spark session master=%s cores=%s partitions=%s",
        session.sparkContext.master,
        cores,
        partitions,
    )
    return session
