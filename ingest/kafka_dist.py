"""Apache Kafka's broker as jars: a pinned set, fetched once from Maven Central into a cache.

The embedded broker (:mod:`ingest.broker`) runs Apache Kafka :data:`KAFKA_VERSION` from plain jars
on the class path, so no distribution archive and no Maven are needed: ``kafka-<version>.jars``
beside this module lists every jar as ``group:artifact:version`` with its SHA-256.

:func:`kafka_jars` answers the folder that holds them:

1. ``KAFKA__EMBEDDED_JARS`` set: that folder, as it is (it must hold ``kafka_2.13-<version>.jar``).
2. Else the cache folder (``$XDG_CACHE_HOME/streamdi/kafka-<version>``, default
   ``~/.cache/streamdi/...``) when its ``complete`` marker exists.
3. Else fetch, under an exclusive lock on ``<cache>.lock`` (parallel starts fetch once): every jar
   not yet there is downloaded from ``KAFKA__MAVEN_REPOSITORY`` to ``<name>.part``, its SHA-256
   checked, and renamed into place; then the marker is written. A jar whose digest differs is
   refused (:class:`KafkaJarsUnavailable`), never used.

A machine that cannot fetch gets :class:`KafkaJarsUnavailable` with what to do instead.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ingest.exceptions import KafkaJarsUnavailable
from streamdi.settings import KafkaSettings

logger = logging.getLogger(__name__)

#: The Apache Kafka release the embedded broker runs (and docker-compose.yml deploys).
KAFKA_VERSION = "4.1.1"
#: The Scala build of Kafka's broker jar.
SCALA_VERSION = "2.13"
#: The broker's main class, and the one that formats a log directory.
KAFKA_MAIN = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"

_MARKER = "complete"
_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class PinnedJar:
    """One jar of the set: its Maven coordinates and the SHA-256 of its bytes."""

    group: str
    artifact: str
    version: str
    sha256: str

    @property
    def file_name(self) -> str:
        return f"{self.artifact}-{self.version}.jar"

    def url(self, repository: str) -> str:
        path = self.group.replace(".", "/")
        return f"{repository.rstrip('/')}/{path}/{self.artifact}/{self.version}/{self.file_name}"


def pinned_jars() -> list[PinnedJar]:
    """The jars of :data:`KAFKA_VERSION`, read from the list beside this module."""
    text = resources.files("ingest").joinpath(f"kafka-{KAFKA_VERSION}.jars").read_text()
    jars = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        coordinates, digest = line.split()
        group, artifact, version = coordinates.split(":")
        jars.append(PinnedJar(group, artifact, version, digest))
    return jars


def default_cache() -> Path:
    """Where fetched jars are kept: ``$XDG_CACHE_HOME/streamdi`` or ``~/.cache/streamdi``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "streamdi" / f"kafka-{KAFKA_VERSION}"


def _what_to_do(reason: str) -> str:
    return (
        f"the embedded Apache Kafka {KAFKA_VERSION} needs its jars, and {reason}. Either set "
        "KAFKA__BOOTSTRAP_SERVERS to a running Kafka (host:port), or set KAFKA__EMBEDDED_JARS to "
        "a folder holding the jars (on a machine that reaches Maven Central, `streamdi broker "
        "--fetch-only` puts them in its cache folder; copy that), or set KAFKA__MAVEN_REPOSITORY "
        "to a Maven mirror this machine reaches"
    )


def kafka_jars(kafka: KafkaSettings, cache: Path | None = None) -> Path:
    """The folder of Kafka's jars; see the module docstring for the order of the steps."""
    # 1.
    if kafka.embedded_jars is not None:
        folder = kafka.embedded_jars
        broker_jar = f"kafka_{SCALA_VERSION}-{KAFKA_VERSION}.jar"
        if not (folder / broker_jar).is_file():
            raise KafkaJarsUnavailable(
                _what_to_do(f"KAFKA__EMBEDDED_JARS={folder} holds no {broker_jar}")
            )
        return folder
    # 2.
    folder = cache or default_cache()
    if (folder / _MARKER).is_file():
        return folder
    # 3.
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        reason = f"its cache folder {folder} cannot be made: {exc}"
        raise KafkaJarsUnavailable(_what_to_do(reason)) from exc
    with (folder.parent / f"{folder.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / _MARKER).is_file():
            _fetch(pinned_jars(), folder, kafka.maven_repository)
    return folder


def _fetch(jars: list[PinnedJar], folder: Path, repository: str) -> None:
    started = time.monotonic()
    fetched = 0
    for jar in jars:
        target = folder / jar.file_name
        if target.is_file() and _sha256(target) == jar.sha256:
            continue
        part = target.with_name(target.name + ".part")
        url = jar.url(repository)
        try:
            with urllib.request.urlopen(url, timeout=_TIMEOUT_S) as answer, part.open("wb") as out:
                while block := answer.read(1 << 20):
                    out.write(block)
        except (urllib.error.URLError, OSError) as exc:
            part.unlink(missing_ok=True)
            raise KafkaJarsUnavailable(_what_to_do(f"{url} could not be fetched ({exc})")) from exc
        digest = _sha256(part)
        if digest != jar.sha256:
            part.unlink(missing_ok=True)
            raise KafkaJarsUnavailable(
                _what_to_do(f"{url} did not have the pinned SHA-256 (got {digest})")
            )
        part.replace(target)
        fetched += 1
    (folder / _MARKER).write_text(f"Apache Kafka {KAFKA_VERSION}: {len(jars)} jars\n")
    logger.info(
        "fetched %d of Apache Kafka %s's %d jars into %s in %.1f s",
        fetched,
        KAFKA_VERSION,
        len(jars),
        folder,
        time.monotonic() - started,
    )


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def class_path(folder: Path) -> str:
    """The JVM class path of every jar in ``folder``."""
    return str(folder / "*")
