"""The embedded broker's class archive is named after its JVM and class path, and a broker's JVM
is told to map it only when it exists (tests/integration/ingest/test_embedded_kafka.py starts a
broker with it)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ingest.class_archive import archive_options, archive_path


def test_the_archive_is_named_after_its_jvm_and_class_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    java = tmp_path / "java"
    java.write_bytes(b"a jvm")
    first = archive_path(str(java), "/jars/*")
    assert first.parent == tmp_path / "cache" / "streamdi"
    assert first.name.startswith("kafka-") and first.suffix == ".jsa"
    assert archive_path(str(java), "/jars/*") == first
    assert archive_path(str(java), "/other/*") != first  # other jars
    os.utime(java, ns=(0, 10**9))
    assert archive_path(str(java), "/jars/*") != first  # Java upgraded in place
    link = tmp_path / "java-link"
    link.symlink_to(java)
    assert archive_path(str(link), "/jars/*") == archive_path(str(java), "/jars/*")


def test_a_jvm_maps_the_archive_only_when_it_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    java = tmp_path / "java"
    java.write_bytes(b"a jvm")
    assert archive_options(str(java), "/jars/*") == []
    archive = archive_path(str(java), "/jars/*")
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"classes")
    assert archive_options(str(java), "/jars/*") == [f"-XX:SharedArchiveFile={archive}"]
