"""The readers on real DIGen output (SF=3), and the generator compared with it.

The data set is found through ``TPCDI__DIGEN_DATA`` or the repository's ``../shared/tpcdi`` (an
archive there is unpacked once into ``TPCDI__CACHE_DIR``); the tests skip when neither exists, as
on a fresh clone elsewhere. About half a minute in all.
"""

from __future__ import annotations

import datetime
from pathlib import Path

import pyarrow.compute as pc
import pytest

from streamdi.settings import load_settings
from tpcdi.datasets import locate_digen
from tpcdi.generator import generate
from tpcdi.readers import BatchData, read_batch, read_batch_date
from tpcdi.verify import answer_keys, mismatches, rule_violations

# Clause 2 file facts of DIGen 1.1.0 at SF=3 (reference/tpcdi.md section 2.4).
ROWS = {
    1: {
        "CashTransaction.txt": 361_856,
        "DailyMarket.txt": 1_282_768,
        "Date.txt": 25_933,
        "HR.csv": 15_000,
        "HoldingHistory.txt": 362_342,
        "Industry.txt": 102,
        "Prospect.csv": 14_982,
        "StatusType.txt": 6,
        "TaxRate.txt": 320,
        "Time.txt": 86_400,
        "TradeHistory.txt": 982_180,
        "Trade.txt": 390_978,
        "TradeType.txt": 5,
        "WatchHistory.txt": 900_042,
        "BatchDate.txt": 1,
    },
    2: {
        "Account.txt": 30,
        "CashTransaction.txt": 199,
        "Customer.txt": 15,
        "DailyMarket.txt": 1_788,
        "HoldingHistory.txt": 218,
        "Prospect.csv": 14_982,
        "Trade.txt": 570,
        "WatchHistory.txt": 2_098,
    },
    3: {"Trade.txt": 546, "CashTransaction.txt": 188, "HoldingHistory.txt": 208},
}
ACTIONS = {
    "NEW": 4_728,
    "ADDACCT": 4_280,
    "UPDACCT": 2_568,
    "UPDCUST": 1_284,
    "CLOSEACCT": 1_284,
    "INACT": 428,
}
FINWIRE = {"CMP": 1_500, "SEC": 2_400, "FIN": 98_576}


@pytest.fixture(scope="module")
def digen() -> Path:
    root = locate_digen(load_settings().tpcdi)
    if root is None:
        pytest.skip("no DIGen data set (TPCDI__DIGEN_DATA or ../shared/tpcdi)")
    return root


@pytest.fixture(scope="module")
def digen_batches(digen: Path) -> dict[int, BatchData]:
    return {b: read_batch(digen / f"Batch{b}") for b in (1, 2, 3)}


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory, digen: Path) -> dict[int, BatchData]:
    out = tmp_path_factory.mktemp("generated") / "sf3"
    generate(out, 3, seed=2024)
    return {b: read_batch(out / f"Batch{b}") for b in (1, 2, 3)}


def test_every_digen_file_reads_without_rejects_to_the_known_counts(
    digen: Path, digen_batches: dict[int, BatchData]
) -> None:
    for batch, data in digen_batches.items():
        assert data.rejects.num_rows == 0, data.rejects.slice(0, 5).to_pylist()
        for name, rows in ROWS[batch].items():
            assert data.files[name].num_rows == rows, (batch, name)
        assert read_batch_date(digen / f"Batch{batch}" / "BatchDate.txt") == datetime.date(
            2017, 7, 6 + batch
        )
    actions = digen_batches[1].files["CustomerMgmt.xml"].table
    per_action = actions.group_by(["action_seq", "ActionType"]).aggregate([])
    tally = pc.value_counts(per_action["ActionType"])
    counts = dict(
        zip(tally.field("values").to_pylist(), tally.field("counts").to_pylist(), strict=True)
    )
    assert counts == ACTIONS
    finwire = digen_batches[1].finwire
    assert finwire is not None
    assert {k: t.num_rows for k, t in finwire.tables.items()} == FINWIRE
    assert finwire.rejects.num_rows == 0


def test_digen_values_are_typed_as_the_spec_says(digen_batches: dict[int, BatchData]) -> None:
    trade = digen_batches[1].files["Trade.txt"].table
    first = trade.slice(0, 1).to_pylist()[0]
    assert first["T_DTS"] == datetime.datetime(2012, 7, 7, 0, 2, 34)
    assert first["T_ST_ID"] == "CMPT" and first["T_TT_ID"] == "TMB" and first["T_IS_CASH"] is False
    assert first["T_TRADE_PRICE"] == pytest.approx(10.02) and first["T_TAX"] == pytest.approx(
        1611.19
    )
    pending = trade.filter(pc.equal(trade["T_ST_ID"], "PNDG"))
    assert pending["T_TRADE_PRICE"].null_count == pending.num_rows
    update = digen_batches[2].files["Trade.txt"].table.slice(0, 1).to_pylist()[0]
    assert (update["CDC_FLAG"], update["CDC_DSN"], update["T_ID"]) == ("U", 1488405, 372101)
    customers = digen_batches[2].files["Customer.txt"].table
    assert customers.num_columns == 33 and set(customers["C_ST_ID"].to_pylist()) == {"ACTV", "INAC"}


def test_digen_answer_keys_match_a_recount_of_its_files(digen: Path) -> None:
    assert mismatches(digen) == {}
    keys = answer_keys(digen)
    assert keys[("DimTrade", 1, "T_NEW")] == 390_978
    assert keys[("DimTrade", 1, "T_CanceledTrades")] == 22_780
    assert keys[("DimCustomer", 1, "C_TIER_INV")] == 251
    assert keys[("FactWatches", 1, "WH_ACTIVE")] == 720_710


def test_digen_data_keeps_the_rules_the_generator_keeps(digen: Path) -> None:
    assert rule_violations(digen) == {}


def test_generated_sf3_parses_to_digens_schemas(
    digen_batches: dict[int, BatchData], generated: dict[int, BatchData]
) -> None:
    for batch in (1, 2, 3):
        ours, theirs = generated[batch], digen_batches[batch]
        assert ours.rejects.num_rows == 0
        assert set(ours.files) == set(theirs.files)
        for name in theirs.files:
            assert ours.files[name].table.schema == theirs.files[name].table.schema, (batch, name)
    assert generated[1].finwire is not None and digen_batches[1].finwire is not None
    for kind, table in digen_batches[1].finwire.tables.items():
        assert generated[1].finwire.tables[kind].schema == table.schema


def test_generated_sf3_volumes_are_close_to_digens(
    digen_batches: dict[int, BatchData], generated: dict[int, BatchData]
) -> None:
    for batch, tolerance in ((1, 0.15), (2, 0.35), (3, 0.35)):
        for name, result in digen_batches[batch].files.items():
            theirs, ours = result.num_rows, generated[batch].files[name].num_rows
            assert abs(ours - theirs) <= tolerance * theirs, (batch, name, ours, theirs)
    ours_fw, theirs_fw = generated[1].finwire, digen_batches[1].finwire
    assert ours_fw is not None and theirs_fw is not None
    for kind, table in theirs_fw.tables.items():
        assert abs(ours_fw.tables[kind].num_rows - table.num_rows) <= 0.1 * table.num_rows, kind
