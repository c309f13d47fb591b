"""Requests known to stop the service under test, held back by the fuzz run until fixed."""

from __future__ import annotations

from typing import Any

#: Requests known to stop the service (the pipeline fails, ``streamdi serve`` exits), reported
#: and pinned by strict xfail tests in ``tests/integration/security/test_http_attacks.py``. The
#: run does not send them (it would end there); it counts them. Remove an entry once it is fixed.
KNOWN_CRASHES = {
    "push-nested-value": "POST /streams/{stream}/events with an event value that is a list or an "
    "object: the collector fails ('expected text, got list<...>') and the pipeline stops",
    "replay-to-stream": "POST /deadletters/replay re-offering an event to a real stream (by id, "
    "or an entry) that does not parse: the pipeline stops (KeyError on the stream)",
}


def known_crash(case: Any, streams: set[str]) -> str | None:
    """The :data:`KNOWN_CRASHES` key ``case`` would trigger, or None."""
    label = case.operation.label
    body = case.body if isinstance(case.body, dict) else {}
    if label == "POST /streams/{stream}/events":
        events = body.get("events")
        if isinstance(events, list) and any(
            isinstance(event, dict) and any(isinstance(v, list | dict) for v in event.values())
            for event in events
        ):
            return "push-nested-value"
    if label == "POST /deadletters/replay":
        entries = body.get("entries")
        if body.get("ids") or (
            isinstance(entries, list)
            and any(isinstance(e, dict) and str(e.get("stream")) in streams for e in entries)
        ):
            return "replay-to-stream"
    return None
