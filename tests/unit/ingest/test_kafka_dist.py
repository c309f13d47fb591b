"""The embedded broker's jars: the pinned list, a fetch from a repository, refusals that say what
to do. A ``file://`` repository laid out like Maven Central stands in for the network (urllib
fetches it the same way); the jars in it are the real ones from the cache the install filled."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ingest.exceptions import KafkaJarsUnavailable
from ingest.kafka_dist import KAFKA_VERSION, PinnedJar, default_cache, kafka_jars, pinned_jars
from streamdi.settings import KafkaSettings


def _repository(tmp_path: Path, jars: list[PinnedJar], *, corrupt: str | None = None) -> str:
    """A Maven-layout folder holding ``jars`` (copied from the installed cache)."""
    cache = default_cache()
    root = tmp_path / "repo"
    for jar in jars:
        url_path = jar.url(str(root))
        target = Path(url_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        if jar.artifact == corrupt:
            target.write_bytes(b"not the jar")
        else:
            shutil.copyfile(cache / jar.file_name, target)
    return f"file://{root}"


@pytest.fixture(scope="module")
def installed() -> Path:
    """The cache ``make test`` filled (``streamdi broker --fetch-only``)."""
    return kafka_jars(KafkaSettings())


def test_the_pinned_list_names_the_broker_and_a_log_binding() -> None:
    jars = pinned_jars()
    names = {(j.group, j.artifact) for j in jars}
    assert ("org.apache.kafka", "kafka_2.13") in names
    assert ("org.apache.logging.log4j", "log4j-slf4j-impl") in names
    assert {j.version for j in jars if j.group == "org.apache.kafka"} == {KAFKA_VERSION}
    assert all(len(j.sha256) == 64 for j in jars)
    assert len({j.file_name for j in jars}) == len(jars)  # one folder holds them all


def test_a_fetch_checks_every_digest_and_marks_the_folder_complete(
    installed: Path, tmp_path: Path
) -> None:
    jars = pinned_jars()
    settings = KafkaSettings(maven_repository=_repository(tmp_path, jars))
    folder = kafka_jars(settings, cache=tmp_path / "cache")
    assert (folder / "complete").is_file()
    assert sorted(p.name for p in folder.glob("*.jar")) == sorted(j.file_name for j in jars)
    assert not list(folder.glob("*.part"))
    # complete: a second call does not fetch (the repository is gone)
    shutil.rmtree(tmp_path / "repo")
    assert kafka_jars(settings, cache=tmp_path / "cache") == folder


def test_a_jar_with_another_digest_is_refused_and_not_kept(installed: Path, tmp_path: Path) -> None:
    jars = pinned_jars()
    settings = KafkaSettings(maven_repository=_repository(tmp_path, jars, corrupt="kafka-raft"))
    with pytest.raises(KafkaJarsUnavailable, match="did not have the pinned SHA-256") as caught:
        kafka_jars(settings, cache=tmp_path / "cache")
    assert "KAFKA__EMBEDDED_JARS" in str(caught.value)
    assert not (tmp_path / "cache" / "complete").exists()
    assert not list((tmp_path / "cache").glob("kafka-raft*"))


def test_an_unreachable_repository_says_what_to_set_instead(tmp_path: Path) -> None:
    settings = KafkaSettings(maven_repository="http://127.0.0.1:9/maven2")
    with pytest.raises(KafkaJarsUnavailable) as caught:
        kafka_jars(settings, cache=tmp_path / "cache")
    message = str(caught.value)
    assert "127.0.0.1:9" in message
    assert "KAFKA__BOOTSTRAP_SERVERS" in message and "KAFKA__EMBEDDED_JARS" in message


def test_a_jar_folder_is_used_as_it_is_and_checked(installed: Path, tmp_path: Path) -> None:
    assert kafka_jars(KafkaSettings(embedded_jars=installed)) == installed
    with pytest.raises(KafkaJarsUnavailable, match=f"holds no kafka_2.13-{KAFKA_VERSION}.jar"):
        kafka_jars(KafkaSettings(embedded_jars=tmp_path))
