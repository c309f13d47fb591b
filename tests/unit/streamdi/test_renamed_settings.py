"""The two knobs that were read outside the settings tree are settings now: the tree knows them by
their new names, the engine and the service read them from it, and a run that still sets an old
name stops with a message naming the new one instead of ignoring it."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.commands import EXIT_OK, EXIT_USAGE
from cli.main import main
from etl_dataflows.executors.local.kernels import cache_dir
from streamdi.environment import renamed_settings, setting_names, unknown_settings
from streamdi.settings import load_settings


def test_the_knobs_are_settings_with_their_old_defaults() -> None:
    assert {"ENGINE__KERNEL_CACHE", "API__SWITCH_INTERVAL_S"} <= setting_names()
    settings = load_settings()
    assert settings.engine.kernel_cache is None
    assert settings.api.switch_interval_s == 0.001


def test_the_kernel_cache_is_where_the_setting_says(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ENGINE__KERNEL_CACHE", str(tmp_path / "kernels"))
    assert cache_dir() == tmp_path / "kernels"
    assert (tmp_path / "kernels").is_dir()


def test_old_names_are_refused_with_the_new_name(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    environ = {"STREAMDI_KERNEL_CACHE": "/x", "STREAMDI_SWITCH_INTERVAL_S": "1", "PATH": "/bin"}
    assert [name for name, _ in renamed_settings(environ)] == [
        "STREAMDI_KERNEL_CACHE",
        "STREAMDI_SWITCH_INTERVAL_S",
    ]
    assert unknown_settings({"ENGINE__KERNEL_CACHE": "/x", "API__SWITCH_INTERVAL_S": "1"}) == []
    monkeypatch.setenv("STREAMDI__STATE_DIR", str(tmp_path))
    assert main(["config", "show"]) == EXIT_OK
    capsys.readouterr()
    monkeypatch.setenv("STREAMDI_KERNEL_CACHE", str(tmp_path))
    assert main(["config", "show"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "STREAMDI_KERNEL_CACHE: renamed: set ENGINE__KERNEL_CACHE instead" in err
