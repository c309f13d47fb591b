"""The TPC-DI workload of the fault campaign, its pure parts: the input is each batch's changes
stream in order, cut into offers that never span two batches, numbered from 0 across both; the
offers travel as Arrow IPC streams; the comparison leaves out only DImessages' wall clock and its
visibility rows; the audit compares every check's verdict, and the numbers of the checks that are
not about time; the options and the command line of a TPC-DI campaign."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from benchmarks.faults import compare
from benchmarks.faults.campaign import CampaignOptions
from benchmarks.faults.kinds import (
    BATCH_KINDS,
    BATCH_TAIL,
    COUNTED_KINDS,
    COUNTED_TAIL,
    SPACING,
    schedule,
)
from benchmarks.faults.tpcdi_workload import (
    RULES,
    TIMED_CHECKS,
    audit_relations,
    tpcdi_offers,
)
from tpcdi.generator import generate
from tpcdi.incremental.changes import ChangesSource


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tpcdi-faults") / "data"
    generate(out, 0.02, seed=3, progress=False)
    return out


def test_the_offers_are_both_batches_in_stream_order(data: Path) -> None:
    workload = tpcdi_offers(data, 7)
    offers = workload.offers
    assert [o.index for o in offers] == list(range(len(offers)))
    assert workload.first_offer[2] == 0 and 0 < workload.first_offer[3] < len(offers)
    positions = 0
    for offer in offers:
        assert isinstance(offer.events, pa.Table)
        assert offer.first_pos == positions and 0 < offer.events.num_rows <= 7
        assert "_pos" not in offer.events.column_names and "_ts" in offer.events.column_names
        batches = set(offer.events.column("batchid").to_pylist())
        assert batches == {workload.batch_of_offer(offer.index)}, "an offer spans two batches"
        assert offer.note == f"Batch{batches.pop()}"
        positions += offer.events.num_rows
    for batch in (2, 3):
        expected = sum(
            c.events.num_rows for c in ChangesSource(data / f"Batch{batch}", batch).read()
        )
        got = sum(len(o.events) for o in offers if o.note == f"Batch{batch}")
        assert got == expected
    assert workload.rejects == 0
    again = tpcdi_offers(data, 7)
    assert all(o.events == p.events for o, p in zip(offers, again.offers, strict=True))
    body, kind = offers[0].body()
    assert kind == "application/vnd.apache.arrow.stream"
    assert pa.ipc.open_stream(body).read_all().equals(offers[0].events)


def test_no_fault_lands_next_to_the_end_of_a_phase(data: Path) -> None:
    """Nor a point counted in commits in the offers before it, nor a point at a batch just
    before it: the input halts at a phase end until the faults before it recovered, so such a
    point would never be reached (the first quick TPC-DI campaign's ``checkpoint-written:1``,
    12 offers before Batch3)."""
    workload = tpcdi_offers(data, 2)
    boundary = workload.first_offer[3]
    offers = len(workload.offers)
    for seed in range(30):
        faults = schedule(seed, 12, offers, skip=frozenset({boundary}), stops=frozenset({boundary}))
        assert all(abs(f.at_offer - boundary) >= SPACING for f in faults)
        for f in faults:
            end = boundary if f.at_offer < boundary else offers
            if f.kind in COUNTED_KINDS:
                assert f.at_offer <= end - COUNTED_TAIL, (seed, f)
            if f.kind in BATCH_KINDS:  # the SF 1 campaign's commit-commit:269 (the stop at 266)
                assert f.at_offer <= end - BATCH_TAIL, (seed, f)


def test_the_comparison_leaves_out_the_wall_clock_and_visibility_rows(tmp_path: Path) -> None:
    def warehouse(path: Path, stamp: str, visibility: int) -> None:
        con = duckdb.connect(str(path))
        con.execute("CREATE SCHEMA tpcdi")
        con.execute(
            "CREATE TABLE tpcdi.dimessages (messagedateandtime TIMESTAMP, batchid INT, "
            "messagesource VARCHAR, messagetext VARCHAR, messagetype VARCHAR, messagedata VARCHAR)"
        )
        con.execute(
            "INSERT INTO tpcdi.dimessages VALUES (?, 2, 'Phase Complete Record', "
            "'Batch Complete', 'PCR', NULL), (?, 2, 'DimTrade', 'Row count', 'Visibility_2', ?)",
            [stamp, stamp, str(visibility)],
        )
        con.close()

    warehouse(tmp_path / "a.duckdb", "2026-01-01 10:00:00", 10)
    warehouse(tmp_path / "b.duckdb", "2026-01-01 10:05:00", 12)
    a = compare.duckdb_warehouse_snapshot(tmp_path / "a.duckdb", "tpcdi", RULES)
    b = compare.duckdb_warehouse_snapshot(tmp_path / "b.duckdb", "tpcdi", RULES)
    assert not compare.compare(a, b)
    assert a["duckdb:tpcdi.dimessages"].columns[0] == "batchid"
    assert len(a["duckdb:tpcdi.dimessages"].rows) == 1
    plain_a = compare.duckdb_warehouse_snapshot(tmp_path / "a.duckdb", "tpcdi")
    plain_b = compare.duckdb_warehouse_snapshot(tmp_path / "b.duckdb", "tpcdi")
    assert compare.compare(plain_a, plain_b), "without the rules the clocks differ"


def test_the_audits_compare_verdicts_and_numbers_but_not_times() -> None:
    def audit(detail: str, when: str, ok: bool = True) -> dict[str, dict[str, Any]]:
        checks = [
            {"name": "DimTrade row counts", "ok": ok, "detail": detail},
            {"name": "Data visibility schedule", "ok": True, "detail": when},
        ]
        return {"duckdb": {"checks": checks}}

    assert "Data visibility schedule" in TIMED_CHECKS
    same = audit_relations(audit("391 rows", "first Visibility_1 3.1 s after CT1"))
    later = audit_relations(audit("391 rows", "first Visibility_1 9.8 s after CT1"))
    assert not compare.compare(same, later)
    assert compare.compare(same, audit_relations(audit("390 rows", "3.1 s")))
    assert compare.compare(same, audit_relations(audit("391 rows", "3.1 s", ok=False)))


def test_a_tpcdi_campaign_and_its_command() -> None:
    quick = CampaignOptions.quick_defaults("tpcdi")
    assert (quick.workload, quick.sf, quick.faults, quick.offer_size) == ("tpcdi", 0.1, 12, 9)
    assert quick.command() == (
        "streamdi bench faults --workload tpcdi --quick --seed 1 --faults 12 --sf 0.1 "
        "--offer-size 9 --rate 10"
    )
    full = CampaignOptions.defaults("tpcdi", seed=3)
    assert (full.sf, full.faults, full.offer_size, full.seed) == (1.0, 100, 20, 3)
    ledger = CampaignOptions.defaults()
    assert ledger.workload == "ledger" and ledger.command().endswith("--reprocess")
