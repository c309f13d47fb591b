"""One long-lived Spark session per process, shared by every ``spark`` executor.

:func:`configure_spark` says how the session will be built (the command line calls it from the
settings and ``--spark-master``); without it, the first executor that needs Spark reads the
settings from the environment (``SPARK__*``, ``ENGINE__MEMORY_BUDGET``). :func:`spark_session`
starts the session on first use (about ten seconds in local mode) and keeps it until the process
exits; executors never stop it.

Local masters (``local``, ``local[N]``) run the Python workers with this interpreter, so the workers
import this installation of streamdi and find the generated kernels in the same on-disk cache
(:mod:`etl_dataflows.executors.local.kernels`). A ``spark://`` master needs streamdi installed on
every worker (the same version) and ``PYSPARK_PYTHON`` pointing at it there.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import subprocess
import sys
import threading
from dataclasses import dataclass, replace
from typing import Any

from etl_dataflows.executors.spark.exceptions import SparkUnavailable

logger = logging.getLogger(__name__)

_LOCAL = re.compile(r"^local(\[(\d+|\*)(,\d+)?\])?$")


@dataclass(frozen=True)
class SparkConfig:
    """How the Spark executor runs (see :mod:`etl_dataflows.executors.spark.executor`).

    ``master``: ``local[N]`` or ``spark://host:port``; ``partitions``: tasks per pass (None: the
    cores of the master); ``placement``: ``auto`` or a fixed placement (see
    :class:`~etl_dataflows.executors.spark.executor.SparkExecutor`); ``min_transactions``: smaller
    batches run on the driver without asking
    Spark; ``max_supersteps``: most Spark passes one batch may take; ``memory_budget``: bytes the
    driver may spend on one batch of one step (None: no limit), the local executor's budget;
    ``conf``: more Spark properties (``SPARK__CONF``), set last so they win.
    """

    master: str = "local[2]"
    driver_memory: str = "2g"
    partitions: int | None = None
    placement: str = "auto"
    min_transactions: int = 100_000
    max_supersteps: int = 8
    memory_budget: int | None = None
    conf: tuple[tuple[str, str], ...] = ()

    @property
    def is_local(self) -> bool:
        return bool(_LOCAL.match(self.master))

    def cores(self) -> int:
        """Cores of a local master (``local`` is 1, ``local[*]`` all of them); 2 for a cluster
        until the session says otherwise."""
        match = _LOCAL.match(self.master)
        if match is None:
            return 2
        if match.group(2) is None:
            return 1
        if match.group(2) == "*":
            return os.cpu_count() or 1
        return int(match.group(2))


_CONFIG: list[SparkConfig] = []
_SESSION: list[Any] = []
_LOCK = threading.Lock()


def configure_spark(config: SparkConfig | None = None, **changes: Any) -> SparkConfig:
    """Set the configuration of the process's Spark session (``changes`` override fields of
    ``config`` or of the current configuration). Changing the master after the session started
    raises :class:`SparkUnavailable`: one session per process."""
    base = config or current_config()
    chosen = replace(base, **changes) if changes else base
    with _LOCK:
        if _SESSION and _CONFIG and _CONFIG[0].master != chosen.master:
            raise SparkUnavailable(
                f"the Spark session already runs on {_CONFIG[0].master!r}; one session per "
                f"process cannot move to {chosen.master!r}"
            )
        _CONFIG[:] = [chosen]
    return chosen


def config_from_settings(settings: Any, master: str | None = None) -> SparkConfig:
    """The configuration the settings describe (``master`` overrides ``SPARK__MASTER``)."""
    spark, engine = settings.spark, settings.engine
    return SparkConfig(
        master=master or spark.master,
        driver_memory=spark.driver_memory,
        partitions=spark.partitions,
        placement=spark.placement,
        min_transactions=spark.min_transactions,
        max_supersteps=spark.max_supersteps,
        memory_budget=engine.memory_budget,
        conf=tuple(sorted(spark.conf.items())),
    )


def current_config() -> SparkConfig:
    """The configuration in force: the one set by :func:`configure_spark`, or the settings of
    the environment read once."""
    with _LOCK:
        if _CONFIG:
            return _CONFIG[0]
    from streamdi.settings import load_settings

    chosen = config_from_settings(load_settings())
    with _LOCK:
        if not _CONFIG:
            _CONFIG.append(chosen)
        return _CONFIG[0]


def spark_session() -> Any:
    """The process's Spark session, started on first use (raises :class:`SparkUnavailable` when
    it cannot start: a missing Java, a master that does not answer)."""
    with _LOCK:
        if _SESSION:
            return _SESSION[0]
    config = current_config()
    with _LOCK:
        if _SESSION:
            return _SESSION[0]
        _SESSION.append(_start(config))
        return _SESSION[0]


def session_started() -> bool:
    return bool(_SESSION)


def _start(config: SparkConfig) -> Any:
    if config.is_local:
        # Workers must be this interpreter: it has streamdi, numba and pyarrow installed.
        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    try:
        from pyspark.sql import SparkSession

        partitions = config.partitions or config.cores()
        builder = (
            SparkSession.builder.master(config.master)
            .appName("streamdi-engine")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.memory", config.driver_memory)
            .config("spark.sql.shuffle.partitions", str(partitions))
            .config("spark.default.parallelism", str(partitions))
            .config("spark.python.worker.reuse", "true")
        )
        if config.is_local:
            # One machine: no network to save, so no compression of the partitions' work.
            builder = (
                builder.config("spark.driver.host", "127.0.0.1")
                .config("spark.driver.bindAddress", "127.0.0.1")
                .config("spark.broadcast.compress", "false")
            )
        for key, value in config.conf:
            builder = builder.config(key, value)
        session = builder.getOrCreate()
        session.sparkContext.setLogLevel("ERROR")
        logging.getLogger("py4j").setLevel(logging.WARNING)  # its INFO lines outlive our logs
    except Exception as exc:  # py4j, Java missing, master unreachable
        raise SparkUnavailable(
            f"cannot start a Spark session on {config.master!r}: {type(exc).__name__}: {exc}"
        ) from exc
    logger.info("spark session started master=%s partitions=%s", config.master, partitions)
    atexit.register(_stop, session)
    return session


def stop_spark_session(timeout_s: float = 30.0) -> bool:
    """Stop the process's Spark session and end the driver's JVM (pyspark's gateway process, GBs
    resident after a large job), when a run needs Spark no more: a TPC-DI run whose engine is not
    the ``spark`` executor stops it after the historical load. A later :func:`spark_session`
    starts a new one. Returns whether a session was running."""
    with _LOCK:
        if not _SESSION:
            return False
        session = _SESSION.pop()
    from pyspark import SparkContext

    _stop(session)
    # pyspark keeps the gateway (and its JVM) for the life of the process and has no public
    # call to end it: shut the gateway down, forget it so that a new session launches another,
    # and close the JVM's stdin, on whose end of file it exits (PythonGatewayServer)
    with SparkContext._lock:  # noqa: SLF001 - see above
        gateway = SparkContext._gateway  # noqa: SLF001
        SparkContext._gateway = None  # noqa: SLF001
        SparkContext._jvm = None  # noqa: SLF001
    if gateway is None:
        return True
    process = getattr(gateway, "proc", None)
    try:
        gateway.shutdown()
    except Exception:  # the JVM may be gone already
        logger.debug("spark gateway shutdown failed", exc_info=True)
    if process is not None:
        if process.stdin is not None:
            process.stdin.close()
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:  # still up: end it
            process.kill()
            process.wait(timeout=timeout_s)
    logger.info("spark session stopped, its JVM ended")
    return True


def _stop(session: Any) -> None:
    try:
        session.stop()
    except Exception:  # the JVM may already be gone at exit
        logger.debug("spark session stop failed", exc_info=True)
