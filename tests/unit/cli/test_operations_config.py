"""Configuration for operators: masked secrets in ``config show`` (text and JSON), a bad value
in every section stops ``streamdi`` at start naming the setting and what it expects, typos of
setting names are refused, and TLS/SASL options reach kafka-python and libpq."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli.commands import EXIT_OK, EXIT_USAGE
from cli.main import main
from streamdi.environment import required_settings, setting_names, unknown_settings
from streamdi.settings import StreamdiSettings, load_settings

SECRETS = {
    "POSTGRES__DSN": "postgresql://u:pg-secret@db:5432/w",
    "API__TOKEN": "api-secret",
    "KAFKA__SECURITY_PROTOCOL": "SASL_SSL",
    "KAFKA__SASL_MECHANISM": "SCRAM-SHA-512",
    "KAFKA__SASL_USERNAME": "svc",
    "KAFKA__SASL_PASSWORD": "sasl-secret",
    "KAFKA__SSL_PASSWORD": "key-secret",
}


def test_config_show_masks_every_secret_as_text_and_json(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    assert main(["config", "show"]) == EXIT_OK
    text = capsys.readouterr().out
    assert main(["config", "show", "--json"]) == EXIT_OK
    data = json.loads(capsys.readouterr().out)
    for secret in ("pg-secret", "api-secret", "sasl-secret", "key-secret"):
        assert secret not in text and secret not in json.dumps(data)
    assert "KAFKA__SASL_PASSWORD=**********" in text
    assert data["kafka"]["sasl_password"] == "**********"
    assert data["postgres"]["dsn"] == "**********"
    assert data["kafka"]["sasl_username"] == "svc"
    # every setting is printed, by its environment name
    printed = {line.split("=", 1)[0] for line in text.splitlines()}
    assert printed == set(setting_names())


#: One bad value per section, and what the message must say is expected.
BAD_VALUES = {
    "STREAMDI__LOG_LEVEL": ("LOUD", "'DEBUG', 'INFO', 'WARNING' or 'ERROR'"),
    "KAFKA__BOOTSTRAP_SERVERS": ("kafka", "expected host:port"),
    "INGEST__BATCH_EVENTS": ("0", "greater than or equal to 1"),
    "POSTGRES__SSLMODE": ("sometimes", "'verify-full'"),
    "MIGRATION__TARGETS": ("oracle", "comma-separated list of ('postgres', 'duckdb')"),
    "STAGING__RECENT_CACHE_MB": ("-1", "greater than or equal to 0"),
    "ENGINE__MEMORY_BUDGET": ("lots", "a size in bytes such as 1073741824, 1GiB or 512MB"),
    "SPARK__MASTER": ("yarn", "expected local, local[N], local[*] or spark://host:port"),
    "API__PORT": ("70000", "less than or equal to 65535"),
}


def test_the_bad_values_cover_every_section_with_a_constrained_setting() -> None:
    sections = {name.split("__")[0] for name in setting_names()}
    # TPCDI__* are paths only: any text is a path
    assert {name.split("__")[0] for name in BAD_VALUES} == sections - {"TPCDI"}


@pytest.mark.parametrize("name", sorted(BAD_VALUES))
def test_a_bad_value_stops_streamdi_at_start_naming_the_setting(
    name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    value, expected = BAD_VALUES[name]
    monkeypatch.setenv(name, value)
    assert main(["config", "show"]) == EXIT_USAGE
    err = capsys.readouterr().err
    line = next((x for x in err.splitlines() if x.strip().startswith(f"{name}:")), None)
    assert line is not None, err
    assert expected in line and repr(value) in line, line


def test_a_bad_secret_is_named_but_never_repeated(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KAFKA__SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("KAFKA__SASL_PASSWORD", "hunter2")
    assert main(["config", "show"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "KAFKA__SASL_MECHANISM" in err and "KAFKA__SASL_USERNAME" in err
    assert "hunter2" not in err


def test_a_misspelt_setting_is_refused_with_a_suggestion(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MIGRATION__TARGET", "postgres")
    assert main(["config", "show"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "MIGRATION__TARGET:" in err and "did you mean MIGRATION__TARGETS?" in err


def test_unknown_settings_ignore_other_programs_variables() -> None:
    environ = {"PATH": "/bin", "STREAMDI_SWITCH_INTERVAL_S": "1", "FOO__BAR": "x"}
    assert unknown_settings(environ) == []
    assert [n for n, _ in unknown_settings({"spark__masters": "x"})] == ["spark__masters"]


def test_no_setting_is_required_so_the_embedded_run_needs_no_configuration() -> None:
    assert required_settings() == frozenset()
    assert "KAFKA__SSL_CERTFILE" in setting_names() and "POSTGRES__SSLKEY" in setting_names()


# -- TLS and SASL pass through ----------------------------------------------------------------------


def test_kafka_tls_and_sasl_reach_the_kafka_python_client_config(tmp_path: Path) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer

    from ingest.broker import client_config

    settings = load_settings(
        kafka={
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "PLAIN",
            "sasl_username": "svc",
            "sasl_password": "pw",
            "ssl_cafile": tmp_path / "ca.pem",
            "ssl_certfile": tmp_path / "client.pem",
            "ssl_keyfile": tmp_path / "client.key",
            "ssl_password": "keypw",
            "ssl_check_hostname": False,
        }
    )
    config = client_config(settings.kafka, "k1:9093,k2:9093")
    assert config == {
        "bootstrap_servers": ["k1:9093", "k2:9093"],
        "client_id": "streamdi",
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "svc",
        "sasl_plain_password": "pw",
        "ssl_cafile": str(tmp_path / "ca.pem"),
        "ssl_certfile": str(tmp_path / "client.pem"),
        "ssl_keyfile": str(tmp_path / "client.key"),
        "ssl_password": "keypw",
        "ssl_check_hostname": False,
    }
    # every key is an option of each kafka-python client (a misspelt one would be ignored)
    for client in (KafkaConsumer, KafkaProducer, KafkaAdminClient):
        assert set(config) <= set(client.DEFAULT_CONFIG), client


def test_postgres_tls_options_reach_libpq(tmp_path: Path) -> None:
    from migration.migrator import postgres_connection

    settings = load_settings(
        postgres={
            "dsn": "postgresql://u:p@db:5432/w",
            "sslmode": "verify-full",
            "sslrootcert": tmp_path / "root.crt",
            "sslcert": tmp_path / "client.crt",
            "sslkey": tmp_path / "client.key",
        }
    )
    dsn, args = postgres_connection(settings)
    assert dsn == "postgresql://u:p@db:5432/w"
    assert args == {
        "sslmode": "verify-full",
        "sslrootcert": str(tmp_path / "root.crt"),
        "sslcert": str(tmp_path / "client.crt"),
        "sslkey": str(tmp_path / "client.key"),
    }
    # libpq's own parser takes every one of them as a connection option (it refuses unknown ones)
    from psycopg2.extensions import make_dsn, parse_dsn

    parsed = parse_dsn(make_dsn(dsn, **args))
    assert {k: parsed[k] for k in args} == args
    with pytest.raises(Exception, match="invalid connection option"):
        parse_dsn(make_dsn(dsn, sslkeyfile="x"))


def test_sasl_without_its_credentials_is_a_configuration_error() -> None:
    from streamdi.errors import ConfigurationError

    with pytest.raises(ConfigurationError) as bad:
        load_settings(kafka={"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN"})
    assert "KAFKA__SASL_USERNAME" in str(bad.value) and "KAFKA__SASL_PASSWORD" in str(bad.value)
    with pytest.raises(ConfigurationError):
        load_settings(kafka={"sasl_mechanism": "PLAIN"})
    assert isinstance(load_settings(kafka={"sasl_mechanism": ""}), StreamdiSettings)
