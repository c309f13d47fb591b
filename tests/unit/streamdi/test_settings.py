from __future__ import annotations

from typing import get_args

import pytest

from etl_dataflows.executors import executor_names
from streamdi.errors import ConfigurationError, TerminalError
from streamdi.settings import ExecutorName, load_settings, masked_settings


def test_defaults_need_no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KAFKA__BOOTSTRAP_SERVERS", raising=False)
    settings = load_settings()
    assert settings.kafka.bootstrap_servers is None
    assert settings.engine.executor == "local"
    assert settings.staging_path == settings.streamdi.state_dir / "staging.duckdb"


def test_nested_environment_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA__BOOTSTRAP_SERVERS", "broker-1:9092, broker-2:9093")
    monkeypatch.setenv("POSTGRES__DSN", "postgresql://u:secret@db/warehouse")
    monkeypatch.setenv("ENGINE__BATCH_SIZE", "2048")
    settings = load_settings()
    assert settings.kafka.bootstrap_servers == "broker-1:9092,broker-2:9093"
    assert settings.engine.batch_size == 2048
    assert settings.postgres.dsn is not None
    assert settings.postgres.dsn.get_secret_value() == "postgresql://u:secret@db/warehouse"


def test_explicit_arguments_beat_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGINE__BATCH_SIZE", "2048")
    assert load_settings(engine={"batch_size": 7}).engine.batch_size == 7


def test_secrets_are_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POSTGRES__DSN", "postgresql://u:hunter2@db/warehouse")
    monkeypatch.setenv("API__TOKEN", "t0ken")
    shown = repr(masked_settings(load_settings()))
    assert "hunter2" not in shown and "t0ken" not in shown
    assert "**********" in shown


def test_bad_values_name_the_setting_and_the_expectation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA__BOOTSTRAP_SERVERS", "no-port-here")
    monkeypatch.setenv("ENGINE__EXECUTOR", "warp-drive")
    monkeypatch.setenv("API__PORT", "99999")
    with pytest.raises(ConfigurationError) as caught:
        load_settings()
    names = [name for name, _ in caught.value.problems]
    assert names == ["KAFKA__BOOTSTRAP_SERVERS", "ENGINE__EXECUTOR", "API__PORT"]
    message = str(caught.value)
    assert "host:port" in message and "'local'" in message and "65535" in message
    assert isinstance(caught.value, TerminalError)


def test_the_executor_setting_takes_every_name_the_engine_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert get_args(ExecutorName) == executor_names()
    monkeypatch.setenv("ENGINE__EXECUTOR", "local:waves")
    assert load_settings().engine.executor == "local:waves"
    monkeypatch.setenv("ENGINE__EXECUTOR", "local:bogus")
    with pytest.raises(ConfigurationError, match="ENGINE__EXECUTOR") as caught:
        load_settings()
    assert "'local:sequential'" in str(caught.value)


def test_spark_master_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARK__MASTER", "yarn")
    with pytest.raises(ConfigurationError, match="SPARK__MASTER"):
        load_settings()
