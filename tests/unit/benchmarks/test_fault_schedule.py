"""The fault campaign's pure parts: the schedule is a function of its seed (what a regression
test replays), covers every kind before repeating one, keeps faults apart and off the reprocess
offer; the input is a function of its seed, with its input faults; the row comparison finds a
missing, an extra or a changed row and ignores only the volatile columns."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest

from benchmarks.faults import compare
from benchmarks.faults.campaign import CampaignOptions
from benchmarks.faults.injector import Injector, RunHandles
from benchmarks.faults.kinds import (
    COUNTED_KINDS,
    COUNTED_TAIL,
    FAULT_KINDS,
    SPACING,
    schedule,
)
from benchmarks.faults.ledger import BASE_US, CLOCK_JUMPS, input_faults, ledger_offers


def test_a_schedule_is_its_seed() -> None:
    first = schedule(7, 40, 600, skip=frozenset({300}))
    assert first == schedule(7, 40, 600, skip=frozenset({300}))
    assert first != schedule(8, 40, 600, skip=frozenset({300}))
    kinds = [f.kind for f in first]
    assert set(kinds[: len(FAULT_KINDS)]) == set(FAULT_KINDS), "every kind before a repeat"
    offers = [f.at_offer for f in first]
    assert offers == sorted(offers) and min(b - a for a, b in itertools.pairwise(offers)) >= SPACING
    assert all(abs(o - 300) >= SPACING for o in offers)
    assert all(10 <= o < 590 for o in offers)
    assert all(f.point for f in first if f.kind.endswith("_point"))
    assert [f.index for f in first] == list(range(40))
    for seed in range(20):  # points counted in commits that follow are never at the very end
        late = [f for f in schedule(seed, 12, 150) if f.at_offer > 150 - COUNTED_TAIL]
        assert not [f for f in late if f.kind in COUNTED_KINDS], seed


def test_a_schedule_that_does_not_fit_is_refused() -> None:
    with pytest.raises(ValueError, match="need more than"):
        schedule(1, 50, 100)
    assert schedule(1, 0, 100) == []


def test_the_quick_campaign_lands_every_kind() -> None:
    quick = CampaignOptions.quick_defaults()
    assert quick.faults >= 10 and quick.faults >= len(FAULT_KINDS)
    drawn = schedule(quick.seed, quick.faults, quick.offers, quick.kinds)
    assert {f.kind for f in drawn} == set(FAULT_KINDS)
    assert "--quick" in quick.command() and "--seed 1" in quick.command()


def test_the_input_is_its_seed_with_its_input_faults() -> None:
    offers = ledger_offers(3, 120, 50)
    assert offers == ledger_offers(3, 120, 50)
    assert [o.first_pos for o in offers] == [i * 50 for i in range(120)]
    faults = input_faults(offers)
    assert sum(faults.values()) == 7 and faults.get("malformed") == 3
    for offer in offers:
        shift = CLOCK_JUMPS.get(offer.note or "", 0)
        for j, event in enumerate(offer.events):
            assert event["_ts"] == BASE_US + (offer.first_pos + j + 1) * 1_000 + shift
        if offer.note == "malformed":
            assert any(isinstance(e["amount"], str) for e in offer.events)
    assert sum(1 for o in offers if o.note == "ahead_20s") <= 2


def _store(path: Path, rows: list[tuple[int, str]], committed_at: str) -> None:
    con = duckdb.connect(str(path))
    con.execute("CREATE SCHEMA streamdi")
    con.execute(
        "CREATE TABLE streamdi.batches (batch_id BIGINT, status VARCHAR, committed_at TIMESTAMP)"
    )
    con.executemany(
        "INSERT INTO streamdi.batches VALUES (?, ?, ?)", [(*r, committed_at) for r in rows]
    )
    con.execute("CREATE TABLE streamdi.segments (file VARCHAR)")
    con.execute(f"INSERT INTO streamdi.segments VALUES ('{committed_at}')")
    con.close()


def test_the_comparison_finds_every_difference_but_volatile_columns(tmp_path: Path) -> None:
    rows = [(1, "committed"), (2, "committed"), (3, "committed")]
    _store(tmp_path / "a.duckdb", rows, "2026-01-01 00:00:00")
    _store(tmp_path / "b.duckdb", list(reversed(rows)), "2026-06-01 12:00:00")
    reference = compare.staging_snapshot(tmp_path / "a.duckdb")
    assert "staging:streamdi.segments" not in reference
    assert reference["staging:streamdi.batches"].columns == ["batch_id", "status"]
    same = compare.staging_snapshot(tmp_path / "b.duckdb")
    assert compare.compare(reference, same) == [], "order and commit times are not differences"
    _store(
        tmp_path / "c.duckdb",
        [(1, "committed"), (2, "failed"), (4, "committed")],
        "2027-01-01 00:00:00",
    )
    [difference] = compare.compare(reference, compare.staging_snapshot(tmp_path / "c.duckdb"))
    assert (difference.relation, difference.missing, difference.extra) == (
        "staging:streamdi.batches",
        2,
        2,
    )
    assert difference.missing_examples == [[2, "committed"], [3, "committed"]]
    assert difference.extra_examples == [[2, "failed"], [4, "committed"]]
    [lacking] = compare.compare(reference, {})
    assert lacking.note == "missing in this run"


def test_the_input_never_passes_a_reprocess_or_an_armed_point() -> None:
    """A reprocess runs with exactly the offers before it (a campaign that let one more offer
    through before it shifted every batch id after it by one); a crash point armed ahead by the
    fault before it must not see its batch come early; a crash point gets the offers its batch
    needs, one counted in checkpoints or migration rounds a long lead (the campaign once held
    one at a later point's offer: it was never reached); other milestones may be passed."""
    from benchmarks.faults.kinds import Fault
    from benchmarks.faults.run import COUNTED_LEAD, LEAD, fault_gates, milestone_gates

    kill = Fault(0, 20, "broker_kill")
    commit = Fault(1, 50, "commit_point", point="commit-ledger", after=2)
    checkpoint = Fault(2, 60, "checkpoint_point", point="checkpoint-written", after=1)
    items = [(20, kill), (40, None), (50, commit), (60, checkpoint)]
    gates, hard = milestone_gates(items, 99)
    assert gates == [20 + LEAD, 39, 50, 60, 99]
    assert hard == [39, 39, 99, 99, 99]  # not even while the first fault is in hand
    # the kill before the commit point arms it ahead: the input stops at its offer
    assert fault_gates(kill, commit, 50, 99, 45) == (50, 50)
    # the commit point itself gets its batch, even when the input ran ahead of it
    assert fault_gates(commit, checkpoint, 60, 99, 55) == (60, 60)
    assert fault_gates(commit, checkpoint, 60, 99, 70) == (73, 70)
    # a counted point runs on, and does not arm the next point ahead (so no cap)
    assert fault_gates(checkpoint, commit, 70, 200, 61) == (70 + COUNTED_LEAD, 70)
    assert fault_gates(checkpoint, None, 70, 75, 61) == (75, 70)  # a reprocess at 76


def test_a_counted_point_leaves_input_for_the_batch_point_after_it() -> None:
    """The quick TPC-DI campaign (seed 1): a migration point let the input run 60 offers ahead,
    to the end of the input, and the commit point after it was armed past the last batch
    (``execute:146`` of 145), so it never landed. The input now stops short of the end by the
    following point's ``after``."""
    from benchmarks.faults.kinds import Fault
    from benchmarks.faults.run import fault_gates

    counted = Fault(7, 85, "migration_point", point="migrate-copy-postgres", after=1)
    following = Fault(8, 98, "commit_point", point="execute", after=2)
    during, after = fault_gates(counted, following, 98, 144, 86)
    assert during <= 144 - following.after - 1 and after <= during
    alone, _ = fault_gates(counted, None, 98, 144, 86)
    assert alone == 144  # with nothing after it, it may run to the end


def test_a_late_batch_point_followed_by_another_still_gets_its_batch() -> None:
    """The full TPC-DI campaign (seed 1, SF 1): after a counted point let the input run ahead,
    a collector point due at offer 160 came with the input at 174, and the commit point after it
    capped the input at its own due offer: ``collect-flushed:177`` waited 90 s for offers the
    gate held back (seven points of the first 60 faults missed so)."""
    from benchmarks.faults.kinds import Fault
    from benchmarks.faults.run import fault_gates

    late = Fault(27, 160, "collector_point", point="collect-flushed", after=2)
    following = Fault(28, 166, "commit_point", point="commit-outputs", after=2)
    during, _ = fault_gates(late, following, 166, 265, 174)
    assert during >= 174 + late.after + 1
    on_time, _ = fault_gates(late, following, 166, 265, 158)
    assert on_time == 166  # not late: the input stops at the following point's due offer


def test_a_migrate_kill_lets_input_in_and_arms_no_point_ahead() -> None:
    """The full TPC-DI campaign (seed 1, SF 1), fault 19: ``migrate_kill`` at ``copy:postgres``
    with the commit point ``execute:164`` after it armed ahead, so the input stood at that
    point's offer; both warehouses held every staged batch when serve was killed, ``streamdi
    migrate push`` had nothing to copy and its point was never reached (6 of 9 such kills missed
    in an earlier campaign). Now the kill lets a few offers in and the point after it is armed
    at its own turn."""
    from benchmarks.faults.injector import arms_ahead
    from benchmarks.faults.kinds import Fault
    from benchmarks.faults.run import MIGRATE_LEAD, fault_gates

    kill = Fault(19, 157, "migrate_kill", point="copy:postgres")
    following = Fault(20, 161, "commit_point", point="execute", after=2)
    assert not arms_ahead(kill, following)
    during, _ = fault_gates(kill, following, 161, 265, 161)
    assert during == 161 + MIGRATE_LEAD  # the input goes on past the following's offer
    assert arms_ahead(Fault(19, 157, "postgres_kill"), following)
    assert fault_gates(Fault(19, 157, "postgres_kill"), following, 161, 265, 161)[0] == 161


def test_a_counted_point_gets_its_lead_step_by_step() -> None:
    """The full TPC-DI campaign (seed 1, SF 1): counted points one after the other let the input
    run their 60-offer leads to the end of the input, so the ones after them never saw another
    migration round or checkpoint; holding the lead back instead stalled a point whose input had
    already run past it. Now the lead comes a few offers at a time, as long as the point waits."""
    from benchmarks.faults.ledger import Offer, Pusher
    from benchmarks.faults.run import COUNTED_STEP, counted_steps

    start, step = counted_steps(454, 479, 532)
    assert start == 479 + COUNTED_STEP  # past the input already there: no stall, a small step
    pusher = Pusher(0, [Offer(i, i, []) for i in range(533)], 1.0)
    pusher.set_gate(start)
    for _ in range(3):
        assert step(pusher)  # the input is at 0 here: offers are left to give
    assert pusher.gate == start + 3 * COUNTED_STEP
    for _ in range(30):
        step(pusher)
    assert pusher.gate == 532  # never past the point's own limit
    pusher.acked.extend([None] * 533)  # type: ignore[list-item]  # every offer taken
    assert not step(pusher)  # nothing left: the injector gives the point up
    assert counted_steps(454, 440, 514)[0] == 454  # on time: up to the next milestone at once


def test_a_batch_point_is_placed_after_the_offer_the_run_held_the_input_at() -> None:
    """The input moved on between the run's gates and the point's arming (collect-flushed:470
    placed two offers past the gate the input was held at): the run anchors the point."""
    from benchmarks.faults.kinds import Fault

    injector = offline_injector(lambda: 130)
    point = Fault(80, 100, "collector_point", point="collect-flushed", after=2)
    assert injector.crash_spec(point) == "collect-flushed:133"  # after the input now
    injector.anchor = (80, 120)
    assert injector.crash_spec(point) == "collect-flushed:123"  # after the offer held at
    injector.anchor = (81, 120)
    assert injector.crash_spec(point) == "collect-flushed:133"  # another fault's anchor


def test_a_batch_point_stays_within_the_input_and_is_given_up_once_passed() -> None:
    """The full TPC-DI campaign (seed 1, SF 1, offers of 25), fault 92: after counted points the
    input had ended, and ``commit-ledger:534`` (of 533 batches) waited 90 s for a batch that
    never came. A point is now placed at the last offer at most, and given up as soon as its
    offer was acknowledged (a collector point) or its batch committed (a commit point)."""
    from benchmarks.faults.kinds import Fault

    state = {"next": 533, "watermark": 533}
    injector = offline_injector(lambda: state["next"], 532, lambda: state["watermark"])
    commit = Fault(92, 485, "commit_point", point="commit-ledger", after=2)
    assert injector.crash_spec(commit) == "commit-ledger:533"  # not 535: the last batch
    injector.pending, injector.pending_spec = commit, injector.crash_spec(commit)
    assert not injector.reachable(commit)  # batch 533 is committed: it will not come again
    state["watermark"] = 531
    assert injector.reachable(commit)
    collector = Fault(93, 500, "collector_point", point="collect-sent", after=1)
    state["next"] = 520
    injector.pending, injector.pending_spec = collector, injector.crash_spec(collector)
    assert injector.pending_spec == "collect-sent:522" and injector.reachable(collector)
    state["next"] = 522  # offer 521 (logical batch 522) acknowledged
    assert not injector.reachable(collector)


def offline_injector(
    next_offer: Callable[[], int],
    last_offer: int | None = None,
    watermark: Callable[[], int] = lambda: 0,
) -> Injector:
    """An injector with no process to reach: for placing and judging crash points. One offer
    is one batch (batch id = offer + 1)."""
    handles = RunHandles(
        None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        None,
        Path("."),
        "spec",
        {},
        Path("log"),
        lambda offer: offer + 1,
        next_offer,
        lambda timeout_s: True,
        last_offer,
        watermark,
    )
    return Injector(handles)
