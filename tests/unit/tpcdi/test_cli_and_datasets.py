"""``streamdi tpcdi generate|check`` and locating (and unpacking once) a DIGen data set."""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path

import pytest

from cli.commands import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from cli.main import main
from streamdi.settings import TpcdiSettings
from tpcdi.datasets import locate_digen
from tpcdi.exceptions import SourceNotFound


def test_generate_then_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "staging"
    code = main(
        [
            "tpcdi",
            "generate",
            "--sf",
            "0.02",
            "--out",
            str(out),
            "--seed",
            "3",
            "--no-progress",
            "--json",
            str(tmp_path / "summary.json"),
        ]
    )
    assert code == EXIT_OK
    assert "records to" in capsys.readouterr().out
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["sf"] == 0.02 and summary["total_records"] > 0
    assert summary["files"]["Batch1/Trade.txt"] > 0
    assert main(["tpcdi", "check", str(out)]) == EXIT_OK
    text = capsys.readouterr().out
    assert (
        "0 rejected lines" in text
        and "answer keys: 0 differ" in text
        and "data rules: 0 broken" in text
    )


def test_check_reports_a_wrong_answer_key_and_a_bad_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "staging"
    assert (
        main(["tpcdi", "generate", "--sf", "0.02", "--out", str(out), "--no-progress"]) == EXIT_OK
    )
    audit = out / "Batch2" / "Trade_audit.csv"
    audit.write_text(
        audit.read_text()
        .replace("T_Records,", "T_Records,1")
        .replace("T_Records,1", "T_Records,9", 1)
    )
    with open(out / "Batch2" / "WatchHistory.txt", "ab") as handle:
        handle.write(b"I|x|y\r\n")
    capsys.readouterr()
    assert main(["tpcdi", "check", str(out)]) == EXIT_FAILED
    text = capsys.readouterr().out
    assert "1 rejected lines" in text and "WatchHistory.txt:" in text
    assert "DimTrade batch 2 T_Records" in text


def test_generate_refuses_a_non_empty_directory_and_a_bad_scale(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("x")
    assert main(["tpcdi", "generate", "--sf", "1", "--out", str(tmp_path)]) == EXIT_USAGE
    assert main(["tpcdi", "generate", "--sf", "-1", "--out", str(tmp_path / "new")]) == EXIT_USAGE


def test_locate_an_unpacked_directory_an_archive_and_nothing(tmp_path: Path) -> None:
    staging = tmp_path / "set"
    (staging / "Batch1").mkdir(parents=True)
    (staging / "Batch1" / "BatchDate.txt").write_bytes(b"2017-07-07\r\n")
    assert locate_digen(TpcdiSettings(digen_data=staging, cache_dir=tmp_path / "cache")) == staging
    archive = tmp_path / "store" / "digen-tiny.tar.xz"
    archive.parent.mkdir()
    with tarfile.open(archive, "w:xz") as tar:
        tar.add(staging / "Batch1", arcname="Batch1")
    settings = TpcdiSettings(digen_data=archive.parent, cache_dir=tmp_path / "cache")
    root = locate_digen(settings)
    assert (
        root is not None and (root / "Batch1" / "BatchDate.txt").read_bytes() == b"2017-07-07\r\n"
    )
    marker = next((tmp_path / "cache").glob("*/.unpacked"))
    before = marker.stat().st_mtime_ns
    assert locate_digen(TpcdiSettings(digen_data=archive, cache_dir=tmp_path / "cache")) == root
    assert marker.stat().st_mtime_ns == before  # unpacked once, reused
    with pytest.raises(SourceNotFound):
        locate_digen(TpcdiSettings(digen_data=tmp_path / "missing"))


def test_an_archive_that_changed_is_unpacked_again_and_its_old_copy_deleted(
    tmp_path: Path,
) -> None:
    """A shared archive touched by a sync left one more 270 MB copy in the cache per touch."""
    staging = tmp_path / "set"
    (staging / "Batch1").mkdir(parents=True)
    (staging / "Batch1" / "BatchDate.txt").write_bytes(b"2017-07-07\r\n")
    archive = tmp_path / "store" / "digen-tiny.tar.xz"
    archive.parent.mkdir()
    with tarfile.open(archive, "w:xz") as tar:
        tar.add(staging / "Batch1", arcname="Batch1")
    cache = tmp_path / "cache"
    other = cache / "digen-tiny-10-20-30"  # not a copy of this archive: kept
    other.mkdir(parents=True)
    first = locate_digen(TpcdiSettings(digen_data=archive, cache_dir=cache))
    assert first is not None
    stamp = archive.stat().st_mtime_ns + 5_000_000_000
    os.utime(archive, ns=(stamp, stamp))
    second = locate_digen(TpcdiSettings(digen_data=archive, cache_dir=cache))
    assert second is not None and second != first
    assert (second / "Batch1" / "BatchDate.txt").read_bytes() == b"2017-07-07\r\n"
    assert not first.exists()
    assert sorted(p.name for p in cache.iterdir() if p.is_dir()) == sorted(
        [second.name, other.name]
    )


def test_no_data_set_at_the_default_location_means_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tpcdi.datasets.default_digen_location", lambda: tmp_path / "absent")
    assert locate_digen(TpcdiSettings(cache_dir=tmp_path / "cache")) is None
