"""The quick fault campaign (``streamdi bench faults --quick``) in the default suite: the ledger
workload pushed over HTTP into a real ``streamdi serve`` (its own Kafka, PostgreSQL and DuckDB
warehouses), run once without faults and once under twelve real faults — every kind of
:mod:`benchmarks.faults.kinds` at least once: ``kill -9`` of serve at random moments and inside
the staging commit, the collector, a checkpoint and a migration round; of ``streamdi migrate``;
of Kafka and of PostgreSQL; PostgreSQL stopped and frozen; staging's disk full. Every relation
of staging and both warehouses must equal the reference row for row, and nothing else may go
wrong (a recovery that never comes, a serve that does not exit 0 on SIGTERM, an orphan).

The full campaign (``streamdi bench faults``: 100 faults, a reprocess killed half-way) is a
benchmark; docs/guarantees.md has its figures."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.faults.campaign import CampaignOptions
from benchmarks.faults.kinds import FAULT_KINDS
from tests.integration.durability.helpers import passing_campaign

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]


def test_quick_fault_campaign_changes_no_row(tmp_path: Path) -> None:
    data = passing_campaign(CampaignOptions.quick_defaults(workdir=tmp_path / "runs"), tmp_path)
    landed = {k for k, e in data["faults"]["by_kind"].items() if e["landed"]}
    assert len(landed) >= len(FAULT_KINDS) - 1, f"kinds that landed: {sorted(landed)}"
    assert data["compared"]["relations"] >= 40 and data["compared"]["rows"] > 10_000
    assert data["recovery"]["count"] >= 10
