"""How a dead letter is shown and re-offered: a stored JSON object is the event (a replay by id
re-offers it unchanged, with its event time and position); anything else is shown as its stored
payload and refused for a replay by id, with a reason that points to fixing it."""

from __future__ import annotations

import base64
import json
from typing import Any

from etl_dataflows.testing import ledger_dataflow
from ingest.deadletters import replay_entries
from runtime.runspec import bind
from staging.dead_letters import dead_letter_view, replay_as_stored
from streamdi.settings import load_settings


def _row(payload: str, encoding: str | None, **more: Any) -> dict[str, Any]:
    row = {
        "id": 7,
        "batch_id": 3,
        "stream": "txns",
        "step": "ingest",
        "topic": "ledger.txns",
        "partition": 0,
        "offset": 12,
        "pos": 4,
        "ts": 2**62,
        "reason": "event time out of range",
        "replayed_in": None,
        "payload": payload,
        "encoding": encoding,
        "payload_bytes": len(payload),
    }
    row.update(more)
    return row


def test_a_json_event_is_shown_and_replayed_unchanged() -> None:
    event = {"kind": "deposit", "src": 1, "_ts": 2**62}
    row = _row(json.dumps(event), "json")
    view = dead_letter_view(row)
    assert view["event"] == event and view["payload"] is None and view["encoding"] == "json"
    entry, why = replay_as_stored(row)
    assert why is None
    assert entry == {"id": 7, "stream": "txns", "event": event}


def test_raw_data_is_shown_as_stored_and_refused_for_a_replay_by_id() -> None:
    raw = base64.b64encode(b"\xff\x00arrow").decode()
    for row in (
        _row(raw, "base64"),
        _row("open|x|y", "utf8"),
        _row("[1, 2]", "json"),  # JSON, but not an object
        _row("b'\\xff'", None),  # layout 1: a repr
        _row('{"key": NaN}', "json"),  # Python's JSON, not standard JSON
    ):
        view = dead_letter_view(row)
        assert view["event"] is None and view["payload"] == row["payload"]
        entry, why = replay_as_stored(row)
        assert entry is None and why is not None and "entry" in why
    assert dead_letter_view(_row("b'x'", None))["encoding"] == "legacy"
    legacy_json = dead_letter_view(_row('{"kind": "deposit"}', None))
    assert legacy_json["event"] == {"kind": "deposit"}


def test_replay_entries_without_an_event_object_are_refused_before_any_broker() -> None:
    spec = bind(ledger_dataflow())
    sent, refused = replay_entries(
        spec.stream_topics(),
        load_settings().kafka,
        "127.0.0.1:1",  # nothing listens: no entry may reach a producer
        [(1, {"id": 7, "stream": "txns", "event": None, "payload": "b64"}), (2, {"stream": "x"})],
    )
    assert sent == 0
    assert refused[0][0] == 1 and "JSON object" in refused[0][1]
    assert refused[1] == (2, "unknown stream 'x'")
