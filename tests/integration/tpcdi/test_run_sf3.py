"""``streamdi tpcdi run`` on the real DIGen SF=3 data set (slow: about two minutes).

The data set is found as in :mod:`tests.integration.tpcdi.test_digen_sf3` (``TPCDI__DIGEN_DATA``
or ``../shared/tpcdi``, an archive unpacked once into the cache, never into the repository). The
run must pass every audit check, and the warehouse must hold the row counts of the answer keys
(``reference/tpcdi.md`` section 2.5, after Batch3).
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from streamdi.settings import load_settings
from tests.integration.tpcdi.test_run import SCHEMA, run_cli
from tpcdi.datasets import locate_digen

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.kafka]

#: Rows after Batch3 (section 2.5: the derived checks of Appendix A and the static tables).
COUNTS = {
    "dimtrade": 391_406,
    "factmarkethistory": 1_286_344,
    "factholdings": 362_768,
    "factwatches": 724_068,  # WH_ACTIVE summed: every watch placed, removed ones included
    "financial": 98_576,
    "dimbroker": 4_293,
    "dimdate": 25_933,
    "dimtime": 86_400,
    "industry": 102,
    "statustype": 6,
    "taxrate": 320,
    "tradetype": 5,
}


def test_the_sf3_run_passes_the_audit_with_digens_counts(tmp_path: Path) -> None:
    settings = load_settings()
    data = locate_digen(settings.tpcdi)
    if data is None:
        pytest.skip("no DIGen data set (TPCDI__DIGEN_DATA or ../shared/tpcdi)")
    work = tmp_path / "work"
    log = tmp_path / "run.log"
    code = run_cli(
        ["tpcdi", "run", "--data", str(data), "--workdir", str(work), "--no-progress",
         "--json", str(tmp_path / "run.json")],
        tmp_path / "state",
        settings.tpcdi.cache_dir,
        log,
        timeout=1200,
    )  # fmt: skip
    report = json.loads((tmp_path / "run.json").read_text())
    failed = [(c["name"], c["detail"]) for c in report["audit"]["checks"] if not c["ok"]]
    assert failed == []
    assert code == 0, log.read_text()[-3000:]
    dw = duckdb.connect(str(work / "warehouse.duckdb"), read_only=True)
    dw.execute(f"SET search_path = '{SCHEMA}'")
    found = {t: dw.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in COUNTS}  # type: ignore[index]
    assert found == COUNTS
    assert dw.execute("SELECT count(*) FROM dimcompany").fetchone()[0] >= 1_500  # type: ignore[index]
    assert dw.execute("SELECT count(*) FROM dimsecurity").fetchone()[0] >= 2_400  # type: ignore[index]
