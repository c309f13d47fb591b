from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli.commands import EXIT_OK, EXIT_USAGE
from cli.main import main


def test_help_lists_the_subcommands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert "demo" in out and "config" in out


def test_no_command_prints_help_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == EXIT_USAGE
    assert "usage: streamdi" in capsys.readouterr().out


def test_demo_prints_a_report_and_writes_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "demo.json"
    code = main(
        ["demo", "--keys", "50", "--batch-size", "200", "--batches", "2", "--json", str(out)]
    )
    assert code == EXIT_OK
    text = capsys.readouterr().out
    assert "transactions      400" in text
    report = json.loads(out.read_text())
    assert report["transactions"] == 400
    assert report["committed"] + report["aborted"] == 400
    assert report["executor"] == "local"


def test_bad_configuration_fails_at_start(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ENGINE__BATCH_SIZE", "zero")
    assert main(["demo"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "ENGINE__BATCH_SIZE" in err and "integer" in err


def test_config_show_masks_secrets(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("POSTGRES__DSN", "postgresql://u:hunter2@db/w")
    assert main(["config", "show"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "POSTGRES__DSN=**********" in out
    assert "hunter2" not in out
