"""Re-offering dead letters through Kafka.

How a staged dead letter is shown, and what a replay by id re-offers, is
:mod:`staging.dead_letters`. Re-offering: each entry becomes a single-event record on its stream's
topic, marked with the dead letter's id, so the batch that applies it also marks the dead letter
as replayed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ingest.broker import client_config, ensure_topics
from ingest.exceptions import BrokerUnavailable
from ingest.records import REPLAY_OF, STREAM
from streamdi.settings import KafkaSettings


def replay_file(
    topics: Mapping[str, str], kafka: KafkaSettings, bootstrap: str, path: Path
) -> tuple[int, list[tuple[int, str]]]:
    """Produce every fixed event of ``path`` (JSON lines: ``id``, ``stream``, ``event`` object with
    the stream's fields and optionally ``_ts``/``_pos``, as ``streamdi deadletters list --json``
    writes them) to their topics: ``topics`` maps every stream of the dataflow to its topic
    (:meth:`runtime.RunSpec.stream_topics`). Returns the number sent and the refused lines with
    the reason."""
    entries: list[tuple[int, Any]] = []
    refused: list[tuple[int, str]] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entries.append((number, json.loads(line)))
        except ValueError as exc:
            refused.append((number, f"not JSON: {exc}"))
    sent, more = replay_entries(topics, kafka, bootstrap, entries)
    return sent, sorted(refused + more)


def replay_entries(
    topics: Mapping[str, str],
    kafka: KafkaSettings,
    bootstrap: str,
    entries: list[tuple[int, Any]],
) -> tuple[int, list[tuple[int, str]]]:
    """Produce the fixed events of ``entries`` (``(number, entry)`` pairs, each entry as in
    :func:`replay_file`); returns the number sent and the refused numbers with the reason."""
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    outgoing: list[tuple[str, bytes, list[tuple[str, bytes]]]] = []
    refused: list[tuple[int, str]] = []
    for number, entry in entries:
        stream = entry.get("stream") if isinstance(entry, dict) else None
        event = entry.get("event") if isinstance(entry, dict) else None
        if not isinstance(stream, str) or stream not in topics:
            refused.append((number, f"unknown stream {stream!r}"))
            continue
        if not isinstance(event, dict):
            refused.append(
                (
                    number,
                    "no event as a JSON object: the stored form is raw data (its payload); put "
                    "the fixed event as a JSON object in 'event'",
                )
            )
            continue
        event = dict(event)
        if "_ts" not in event and isinstance(entry.get("ts"), int):
            event["_ts"] = entry["ts"]
        if "_pos" not in event and isinstance(entry.get("pos"), int):
            event["_pos"] = entry["pos"]
        headers = [(STREAM, str(stream).encode())]
        if isinstance(entry.get("id"), int):
            headers.append((REPLAY_OF, str(entry["id"]).encode()))
        outgoing.append((topics[stream], json.dumps(event).encode(), headers))
    if outgoing:
        ensure_topics(kafka, bootstrap, {t: 1 for t, _, _ in outgoing})
        producer = KafkaProducer(**client_config(kafka, bootstrap), acks="all", retries=10)
        try:
            for topic, value, headers in outgoing:
                producer.send(topic, value=value, headers=headers, partition=0)
            producer.flush(timeout=60)
        except KafkaError as exc:
            raise BrokerUnavailable(f"re-offering dead letters failed: {exc}") from exc
        finally:
            producer.close(timeout=30)
    return len(outgoing), refused
