"""The embedded broker's class archive: Kafka's classes as the JVM loaded them at a start, saved
once, so that every later start maps them from one file instead of loading and verifying them
from the jars (Java's application class-data sharing, AppCDS). Measured at load 12 on two cores:
the JVM's CPU until the broker answers, 3.6-3.9 s without the archive and 2.5-2.9 s with it.

The archive belongs to one JVM and one class path: its name carries a digest of both (the java
binary's real path, size and modification time; the class path), so a Java upgrade or other jars
lead to a new archive, never to a mismatched one. It lives beside the jar cache
(``~/.cache/streamdi/kafka-<version>-classes-<digest>.jsa``, about 50 MB).

:func:`build_class_archive` makes it (``streamdi broker --fetch-only``, which ``make run`` and
``make test`` run before anything else):

1. Start a broker on a scratch folder with ``-XX:ArchiveClassesAtExit=<part>``.
2. Once it answers, stop it (SIGTERM); the JVM writes the archive into the part file as it exits.
3. Only after a clean exit: copy the part beside the cache under a name of this process, then
   rename it into place (atomic: a broker starting meanwhile sees no archive or the whole one).

The archive is an optimisation only: a broker starts as before without it, and a JVM that cannot
map it (the JVM checks the jars' sizes and times itself) warns in ``broker.out`` and loads the
jars.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
from pathlib import Path

from ingest.kafka_dist import KAFKA_VERSION, class_path, default_cache, kafka_jars
from streamdi.settings import KafkaSettings

logger = logging.getLogger(__name__)

#: Exit codes of a broker that stopped cleanly (143: Kafka's exit on SIGTERM).
CLEAN_EXITS = (0, 143)
#: How long the broker that writes the archive may take to stop (it writes ~50 MB as it exits).
DUMP_GRACE_S = 180.0


def archive_path(java: str, classpath: str) -> Path:
    """Where the archive of the JVM ``java`` and ``classpath`` is (whether or not it exists)."""
    real = Path(java).resolve()
    stat = real.stat()
    key = f"{real}\0{stat.st_size}\0{stat.st_mtime_ns}\0{classpath}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return default_cache().parent / f"kafka-{KAFKA_VERSION}-classes-{digest}.jsa"


def archive_options(java: str, classpath: str) -> list[str]:
    """The JVM option that maps the archive of ``java`` and ``classpath``; none while there is
    no archive."""
    archive = archive_path(java, classpath)
    return [f"-XX:SharedArchiveFile={archive}"] if archive.is_file() else []


def build_class_archive(kafka: KafkaSettings | None = None) -> Path | None:
    """Steps 1-3 of the module docstring unless the archive exists; its path, or None when it
    could not be made (no Java, a broker that did not stop cleanly, a cache folder that cannot
    be written: logged, nothing else changes). A broker that does not start raises
    :class:`~ingest.exceptions.BrokerStartFailed` as any start does."""
    kafka = kafka or KafkaSettings()
    java = shutil.which("java")
    if java is None:
        return None
    archive = archive_path(java, class_path(kafka_jars(kafka)))
    if archive.is_file():
        return archive
    try:
        return _build(archive, kafka)
    except OSError as exc:  # a cache folder that cannot be written: brokers start without it
        logger.warning("the embedded Kafka's class archive %s was not written: %s", archive, exc)
        return None


def _build(archive: Path, kafka: KafkaSettings) -> Path | None:
    from ingest.embedded_kafka import EmbeddedKafka

    with tempfile.TemporaryDirectory(prefix="streamdi-classes-") as scratch:
        part = Path(scratch) / "classes.jsa"
        # 1.
        broker = EmbeddedKafka(Path(scratch), kafka)
        broker.jvm_options = [f"-XX:ArchiveClassesAtExit={part}"]
        try:
            broker.start()
        finally:
            # 2.
            broker.stop(grace_s=DUMP_GRACE_S)
        # 3.
        if broker.exit_code not in CLEAN_EXITS or not part.is_file():
            logger.warning(
                "the embedded Kafka's class archive was not written (exit %s); brokers start "
                "without it",
                broker.exit_code,
            )
            return None
        archive.parent.mkdir(parents=True, exist_ok=True)
        mine = archive.with_name(f"{archive.name}.{os.getpid()}")
        shutil.copyfile(part, mine)
        mine.replace(archive)
    logger.info("embedded Kafka class archive written path=%s", archive)
    return archive
