"""Stopping the process's Spark session ends the driver's JVM (its memory goes back to the
system: a TPC-DI run stops Spark after the historical load, issue 22), and a later session
starts afresh."""

from __future__ import annotations

import psutil
import pytest

from etl_dataflows.executors.spark.session import (
    session_started,
    spark_session,
    stop_spark_session,
)

pytestmark = pytest.mark.spark


def _jvms() -> list[psutil.Process]:
    return [
        p
        for p in psutil.Process().children(recursive=True)
        if p.is_running() and p.status() != psutil.STATUS_ZOMBIE and "java" in p.name()
    ]


def test_stopping_the_session_ends_its_jvm_and_a_new_one_starts() -> None:
    assert spark_session().range(10).count() == 10
    jvms = _jvms()
    assert jvms, "a Spark session runs in a JVM child process"
    assert stop_spark_session()
    assert not session_started()
    gone, alive = psutil.wait_procs(jvms, timeout=30)
    assert not alive and len(gone) == len(jvms)
    assert not stop_spark_session()  # nothing to stop
    assert spark_session().range(5).count() == 5
    assert _jvms()
