"""How a staged dead letter is shown and what a replay by id re-offers.

A dead letter keeps what came in full (:mod:`staging.layout`): ``payload`` in ``encoding`` —
``json`` (the event as given), ``utf8`` (text that is not an event: a file's line, a record that
is not JSON), ``base64`` (bytes that are not text: an Arrow payload, an undecodable line), or null
for dead letters staged before the encoding was kept (``legacy``: a Python repr or a text that
may have been cut). :func:`dead_letter_view` is how the API and the CLI show one: ``event`` is the
stored event when it is a JSON object (what a replay by id re-offers unchanged), else null and
``payload`` holds the stored form to fix by hand. Re-offering through Kafka is
:mod:`ingest.deadletters`'.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


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
