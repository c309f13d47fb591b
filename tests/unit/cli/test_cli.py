from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cli.commands import EXIT_OK, EXIT_USAGE
from cli.main import build_parser, command_word, main

REPO = Path(__file__).resolve().parents[3]


def test_help_lists_the_subcommands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert "demo" in out and "config" in out


def test_only_bench_imports_the_benchmarks() -> None:
    """A command other than ``bench`` does not import the benchmarks' modules (FastAPI among
    what they pull in): every ``streamdi run`` would pay ~0.4 s of CPU for them. Checked in a
    fresh interpreter (this one has imported them all)."""
    probe = (
        "import sys\n"
        "from cli.main import build_parser, command_word\n"
        "build_parser(command_word(sys.argv[1:]))\n"
        "print(sorted(m for m in sys.modules if m.startswith(('benchmarks.', 'fastapi'))))\n"
    )

    def loaded(*argv: str) -> list[str]:
        done = subprocess.run(
            [sys.executable, "-c", probe, *argv],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        )
        found: list[str] = json.loads(done.stdout.strip().replace("'", '"'))
        return found

    assert loaded("-q", "run", "app:spec") == ["benchmarks.cli"]
    assert "benchmarks.faults" in loaded("-q", "bench", "faults")
    assert command_word(["-v", "serve", "--port", "1"]) == "serve"
    assert command_word(["--help"]) is None


def test_bench_help_lists_every_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["bench", "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert "faults" in out and "tpcdi" in out
    # another command's parser still has `bench`, without its benchmarks
    assert "bench" in build_parser("run").format_help()


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
