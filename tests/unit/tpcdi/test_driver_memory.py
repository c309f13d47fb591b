"""The TPC-DI run sizes Spark's driver memory from the data set's scale factor."""

from __future__ import annotations

from streamdi.settings import load_settings
from tpcdi.run.job import with_driver_memory_for


def test_the_driver_memory_grows_with_the_scale_factor() -> None:
    settings = load_settings()
    assert with_driver_memory_for(settings, 0.1).spark.driver_memory == "2g"
    assert with_driver_memory_for(settings, 3).spark.driver_memory == "2g"
    assert with_driver_memory_for(settings, 10).spark.driver_memory == "6g"
    assert with_driver_memory_for(settings, 30).spark.driver_memory == "18g"
    assert with_driver_memory_for(settings, None).spark.driver_memory == "2g"


def test_a_configured_driver_memory_is_kept() -> None:
    settings = load_settings(spark={"driver_memory": "3g"})
    assert with_driver_memory_for(settings, 10).spark.driver_memory == "3g"
