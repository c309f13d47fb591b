"""The quick fault campaign of the TPC-DI workload (``streamdi bench faults --workload tpcdi
--quick``): the incremental updates of a generated SF 0.1 data set (Batch2, Batch3) pushed over
HTTP into a real ``streamdi serve`` with both warehouses, the phases' bookkeeping by ``streamdi
tpcdi phase`` between serve's runs, once without faults and once under twelve real faults of
every kind plus a ``phase_kill`` at each phase end. Staging, both warehouses and each
warehouse's audit must equal the reference's, every audit check OK.

Marked ``slow`` (not in the default suite): the historical load on Spark that both runs start
from takes a minute or two on our two cores by itself, and the two runs as long again; the
default suite's budget has no room for it (the ledger's quick campaign there covers every fault
kind on every commit protocol). ``make test-all`` runs it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.faults.campaign import CampaignOptions
from tests.integration.durability.helpers import passing_campaign

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.kafka, pytest.mark.postgres]


def test_quick_tpcdi_fault_campaign_changes_no_row_and_every_audit_check_is_ok(
    tmp_path: Path,
) -> None:
    options = CampaignOptions.quick_defaults(
        "tpcdi", workdir=tmp_path / "runs", cache_dir=tmp_path / "cache"
    )
    data = passing_campaign(options, tmp_path)
    assert data["workload"] == "tpcdi"
    assert data["faults"]["by_kind"]["phase_kill"]["scheduled"] == 2
    assert set(data["audits"]) == {"duckdb", "postgres"}
    assert all(a["fail"] == 0 and a["ok"] > 100 for a in data["audits"].values()), data["audits"]
    relations = data["compared"]["per_relation"]
    assert relations["audit:duckdb.checks"] == relations["audit:postgres.checks"] > 100
    assert relations["postgres:tpcdi.dimtrade"] > 0 and relations["duckdb:tpcdi.dimtrade"] > 0
