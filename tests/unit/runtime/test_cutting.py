"""The cut rules: a pure function of the assembler's state and the clock, first rule first."""

from __future__ import annotations

from collections import deque

import pytest

from runtime.cutting import CutRules, PendingBatch, cut_reason, fill
from tests.unit.runtime.harness import StreamWriter, pair_dataflow

RULES = CutRules(batch_size=100, timeout_s=0.5)


def _pending(
    events: int, *, punctuated: bool = False, arrived_at: float | None = 10.0
) -> PendingBatch:
    return PendingBatch(events > 0, events, punctuated, arrived_at if events else None)


@pytest.mark.parametrize(
    ("batch", "polled_empty", "paused", "now", "reason"),
    [
        (_pending(0), True, True, 99.0, None),  # nothing pending: never cut
        (_pending(100), False, False, 10.0, "full"),
        (_pending(250), True, True, 99.0, "full"),  # full comes first
        (_pending(5, punctuated=True), True, False, 10.0, "punctuated"),
        (_pending(5), True, False, 10.0, "idle"),
        (_pending(5), False, True, 10.0, "paused"),
        (_pending(5), False, False, 10.5, "timeout"),
        (_pending(5), False, False, 10.49, None),  # not old enough yet
        (_pending(5, arrived_at=None), False, False, 99.0, None),
    ],
)
def test_a_pending_batch_is_cut_by_the_first_rule_that_holds(
    batch: PendingBatch, polled_empty: bool, paused: bool, now: float, reason: str | None
) -> None:
    assert cut_reason(batch, RULES, polled_empty=polled_empty, paused=paused, now=now) == reason


def test_fill_stops_at_a_full_batch_and_keeps_the_rest_buffered() -> None:
    from ingest.assembler import BatchAssembler

    flow = pair_dataflow()
    assembler = BatchAssembler(
        flow,
        {"pair.a": ["a"]},
        progress={},
        offsets={},
        max_record_bytes=10**6,
        allowed_lateness_ms=None,
    )
    writer = StreamWriter()
    buffered = deque(writer.records("a", [1, 2, 3]) + writer.records("a", [4, 5, 6]))
    added: dict[tuple[str, int], int] = {}
    fill(assembler, buffered, added, batch_size=3)
    assert assembler.pending_events == 3 and len(buffered) == 1
    assert added == {("pair.a", 0): 0}
    assert (
        cut_reason(
            PendingBatch.of(assembler), CutRules(3, 60.0), polled_empty=False, paused=False, now=0.0
        )
        == "full"
    )
