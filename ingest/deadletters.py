"""Showing and re-offering dead letters.

A dead letter keeps what came in full (:mod:`staging.layout`): ``payload`` in ``encoding`` —
``json`` (the event as given), ``utf8`` (text that is not an event: a file's line, a record that
is not JSON), ``base64`` (bytes that are not text: an Arrow payload, an undecodable line), or null
for dead letters staged before the encoding was kept (``legacy``: a Python repr or a text that
may have been cut). :func:`dead_letter_view` is how the API and the CLI show one: ``event`` is the
stored event when it is a JSON object (what a replay by id re-offers unchanged), else null and
``payload`` holds the stored form to fix by hand.

Re-offering: each entry becomes a single-event record on its stream's topic, marked with the dead
letter's id, so the batch that applies it also marks the dead letter as replayed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ingest.broker import client_config, ensure_topics
from ingest.exceptions import BrokerUnavailable
from ingest.records import REPLAY_OF, STREAM
from ingest.runspec import RunSpec
from streamdi.settings import KafkaSettings


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def stored_event(row: Mapping[str, Any]) -> dict[str, Any] | None:
    """The dead letter's event when its payload is a JSON object (standard JSON: ``NaN`` and
    ``Infinity``, which Python's parser takes, make it raw text to fix), else None."""
    payload = row.get("payload")
    if row.get("encoding") not in (None, "json") or not isinstance(payload, str):
        return None
    try:
        parsed = json.loads(payload, parse_constant=_not_json)
    except (ValueError, RecursionError):
        return None
    return parsed if isinstance(parsed, dict) else None


def dead_letter_view(row: Mapping[str, Any]) -> dict[str, Any]:
    """How a staged dead letter is shown (API and ``streamdi deadletters list --json``): where
    it came from, why, and the original (see the module docstring)."""
    event = stored_event(row)
    return {
        "id": row["id"],
        "batch_id": row["batch_id"],
        "stream": row["stream"],
        "step": row["step"],
        "topic": row["topic"],
        "partition": row["partition"],
        "offset": row["offset"],
        "pos": row["pos"],
        "ts": row["ts"],
        "reason": row["reason"],
        "replayed_in": row.get("replayed_in"),
        "encoding": row.get("encoding") or "legacy",
        "payload_bytes": row.get("payload_bytes"),
        "event": event,
        "payload": None if event is not None else row.get("payload"),
    }


def replay_as_stored(row: Mapping[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """The replay entry that re-offers a dead letter's stored event exactly as stored (its
    ``_ts`` when it has one; nothing added), or None and why it cannot be."""
    event = stored_event(row)
    if event is None:
        encoding = row.get("encoding") or "legacy"
        return None, (
            f"dead letter {row['id']} stores {encoding} data, not a JSON object event: fix it "
            "and re-offer it as an entry (id, stream and the event as a JSON object)"
        )
    return {"id": row["id"], "stream": row["stream"], "event": event}, None


def replay_file(
    spec: RunSpec, kafka: KafkaSettings, bootstrap: str, path: Path
) -> tuple[int, list[tuple[int, str]]]:
    """Produce every fixed event of ``path`` (JSON lines: ``id``, ``stream``, ``event`` object with
    the stream's fields and optionally ``_ts``/``_pos``, as ``streamdi deadletters list --json``
    writes them). Returns the number sent and the refused lines with the reason."""
    entries: list[tuple[int, Any]] = []
    refused: list[tuple[int, str]] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entries.append((number, json.loads(line)))
        except ValueError as exc:
            refused.append((number, f"not JSON: {exc}"))
    sent, more = replay_entries(spec, kafka, bootstrap, entries)
    return sent, sorted(refused + more)


def replay_entries(
    spec: RunSpec, kafka: KafkaSettings, bootstrap: str, entries: list[tuple[int, Any]]
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
        if stream not in spec.flow.sources:
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
        outgoing.append((spec.topic(stream), json.dumps(event).encode(), headers))
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
