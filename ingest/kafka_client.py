"""Talking to a Kafka cluster: where it answers, its log's identity, and the client settings.

:class:`BrokerHandle` names the broker and its *log*: the identity of the message log behind the
offsets. Staging remembers the log its offsets belong to, so offsets of another log are never used.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ingest.exceptions import BrokerUnavailable
from streamdi.settings import KafkaSettings

#: The shortest bootstrap an attempt of :func:`wait_until_answering` is given (ms), however little
#: of its time is left: enough for one round trip to a broker that answers.
MIN_ATTEMPT_MS = 500


@dataclass(frozen=True)
class BrokerHandle:
    """Where the broker answers, and the identity of its message log."""

    bootstrap_servers: str
    log_id: str
    embedded: bool


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def client_config(kafka: KafkaSettings, bootstrap_servers: str) -> dict[str, Any]:
    """kafka-python settings shared by producers, consumers and admin clients."""
    config: dict[str, Any] = {
        "bootstrap_servers": bootstrap_servers.split(","),
        "client_id": kafka.client_id,
        "security_protocol": kafka.security_protocol,
    }
    if kafka.sasl_mechanism:
        config["sasl_mechanism"] = kafka.sasl_mechanism
        config["sasl_plain_username"] = kafka.sasl_username
        if kafka.sasl_password is not None:
            config["sasl_plain_password"] = kafka.sasl_password.get_secret_value()
    if kafka.security_protocol in ("SSL", "SASL_SSL"):
        config["ssl_check_hostname"] = kafka.ssl_check_hostname
    for option in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
        path = getattr(kafka, option)
        if path is not None:
            config[option] = str(path)
    if kafka.ssl_password is not None:
        config["ssl_password"] = kafka.ssl_password.get_secret_value()
    return config


def wait_until_answering(
    bootstrap_servers: str, timeout_s: float = 30.0, *, kafka: KafkaSettings | None = None
) -> None:
    """Block until a Kafka ApiVersions/Metadata round trip succeeds, or raise
    :class:`BrokerUnavailable` once ``timeout_s`` has passed (each attempt's bootstrap is bounded
    by the time left: kafka-python's own bootstrap wait, 30 s, would otherwise hold a broker that
    does not answer for three times a 10 s timeout). ``kafka`` gives the client security settings
    (TLS, SASL) of an external cluster."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while (left := deadline - time.monotonic()) > 0:
        try:
            config = (
                client_config(kafka, bootstrap_servers)
                if kafka is not None
                else {"bootstrap_servers": bootstrap_servers.split(",")}
            )
            admin = KafkaAdminClient(
                **config,
                request_timeout_ms=2000,
                bootstrap_timeout_ms=max(MIN_ATTEMPT_MS, int(left * 1000)),
            )
            try:
                admin.list_topics()
                return
            finally:
                admin.close()
        except (KafkaError, OSError, ValueError) as exc:
            last = exc
            time.sleep(0.1)
    raise BrokerUnavailable(
        f"the Kafka broker at {bootstrap_servers} did not answer within {timeout_s:.0f} s: {last}"
    )


def ensure_topics(kafka: KafkaSettings, bootstrap: str, topics: dict[str, int]) -> None:
    """Create the topics that do not exist yet with the given partition counts.

    Topics are created explicitly because a broker may auto-create a topic on first use with
    a partition count of its own choosing; a stream gets the partitions its binding asks for (one
    by default; several are merged by event time, :mod:`ingest.merging`)."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import KafkaError, TopicAlreadyExistsError

    admin = KafkaAdminClient(**client_config(kafka, bootstrap))
    try:
        existing = set(admin.list_topics())
        missing = [NewTopic(t, n, 1) for t, n in topics.items() if t not in existing]
        if missing:
            try:
                admin.create_topics(missing)
            except TopicAlreadyExistsError:
                pass
            except KafkaError as exc:
                raise BrokerUnavailable(f"cannot create topics {list(topics)}: {exc}") from exc
    finally:
        admin.close()


def group_offsets(kafka: KafkaSettings, bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    """The offsets consumer group ``group`` last committed, per ``(topic, partition)`` (empty when
    it committed none). streamdi's pipelines commit theirs after staging did, for monitoring
    (:meth:`ingest.consumer.RecordConsumer.commit_for_monitoring`), so they never pass staging's."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    admin = KafkaAdminClient(**client_config(kafka, bootstrap))
    try:
        committed = admin.list_group_offsets({group: None}).get(group, {})
    except KafkaError as exc:
        raise BrokerUnavailable(f"cannot read the offsets of group {group!r}: {exc}") from exc
    finally:
        admin.close()
    return {
        (tp.topic, tp.partition): int(meta.offset)
        for tp, meta in committed.items()
        if meta.offset is not None and meta.offset >= 0
    }


def delete_topics(kafka: KafkaSettings, bootstrap: str, prefix: str) -> list[str]:
    """Delete every topic whose name starts with ``prefix`` (a replay's own topics, once it is
    done); the names deleted."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError, UnknownTopicOrPartitionError

    admin = KafkaAdminClient(**client_config(kafka, bootstrap))
    try:
        doomed = sorted(t for t in admin.list_topics() if t.startswith(prefix))
        if doomed:
            admin.delete_topics(doomed)
        return doomed
    except UnknownTopicOrPartitionError:
        return []
    except KafkaError as exc:
        raise BrokerUnavailable(f"cannot delete the topics {prefix}*: {exc}") from exc
    finally:
        admin.close()


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, dead but not yet reaped by its parent, does
    not)."""
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc: the signal check is all there is
    return stat.rpartition(")")[2].split()[0] != "Z"


def process_start_ticks(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks after boot (``/proc/<pid>/stat`` field 22):
    the same pid with another start is another process. None without ``/proc`` or the process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()
    return int(fields[19]) if len(fields) > 19 else None
