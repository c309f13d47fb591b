"""The generator: layout, determinism, every reader round-trips its files, the answer keys are
exact for what it wrote, the data keeps the rules, volumes scale with the scale factor."""

from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc
import pytest

from tpcdi.exceptions import GeneratorError
from tpcdi.generator import GenerationReport, Scale, generate
from tpcdi.readers import batch_sources, read_batch, read_file, source_file
from tpcdi.verify import answer_keys, mismatches, recount, rule_violations

SMALL_SF = 0.1


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, GenerationReport]:
    out = tmp_path_factory.mktemp("tpcdi") / "sf"
    return out, generate(out, SMALL_SF, seed=11)


def test_layout_is_digens(small: tuple[Path, GenerationReport]) -> None:
    root, _ = small
    assert sorted(p.name for p in root.iterdir()) == [
        "Batch1",
        "Batch1_audit.csv",
        "Batch2",
        "Batch2_audit.csv",
        "Batch3",
        "Batch3_audit.csv",
        "Generator_audit.csv",
    ]
    for batch in (1, 2, 3):
        names = {p.name for p in (root / f"Batch{batch}").iterdir()}
        data_files = {
            n for n in names if not n.endswith("_audit.csv") and not n.startswith("FINWIRE")
        }
        assert data_files == {s.name for s in batch_sources(batch)}
        for name in data_files - {"BatchDate.txt"}:
            assert f"{name.split('.')[0]}_audit.csv" in names
    finwire = sorted(
        n for n in (p.name for p in (root / "Batch1").iterdir()) if n.startswith("FINWIRE")
    )
    assert finwire[0] == "FINWIRE1967Q1" and finwire[-1] == "FINWIRE2017Q3_audit.csv"
    assert len(finwire) == 2 * 203
    assert (root / "Batch1" / "Trade.txt").read_bytes().count(b"\r\n") > 0
    assert b"\n" not in (root / "Batch1" / "Trade.txt").read_bytes().replace(b"\r\n", b"")


def test_every_file_round_trips_through_its_reader(small: tuple[Path, GenerationReport]) -> None:
    root, report = small
    for batch in (1, 2, 3):
        data = read_batch(root / f"Batch{batch}")
        assert data.rejects.num_rows == 0, data.rejects.slice(0, 5).to_pylist()
        for name, result in data.files.items():
            assert (
                result.table.schema == source_file(name).schema(batch) or name == "CustomerMgmt.xml"
            )
            written = report.records[(batch, name)]
            if name == "CustomerMgmt.xml":  # one row per account of an action
                assert pc.count_distinct(result.table["action_seq"]).as_py() == written
            else:
                assert result.num_rows == written, name
        if data.finwire is not None:
            records = sum(t.num_rows for t in data.finwire.tables.values())
            assert records == sum(
                n for (b, f), n in report.records.items() if f.startswith("FINWIRE")
            )


def test_answer_keys_are_exact_for_what_was_written(small: tuple[Path, GenerationReport]) -> None:
    root, _ = small
    assert mismatches(root) == {}
    keys = answer_keys(root)
    recounted = recount(root)
    assert len(recounted) > 100 and set(recounted) <= set(keys)
    # counted in many small chunks (the trade history by type across chunks), the same
    assert recount(root, chunk_bytes=4096) == recounted
    # the keys the audit needs but a recount cannot derive are present
    for key in (
        ("DimCustomer", 1, "C_ID_HIST"),
        ("Prospect", 2, "P_C_MATCHING"),
        ("DimAccount", 3, "CA_ID_HIST"),
    ):
        assert key in keys


def test_the_data_keeps_the_rules(small: tuple[Path, GenerationReport]) -> None:
    assert rule_violations(small[0]) == {}


def test_incremental_batches_have_every_kind_of_change(
    small: tuple[Path, GenerationReport],
) -> None:
    root, _ = small
    keys = answer_keys(root)
    for batch in (2, 3):
        for dataset, attribute in (
            ("DimCustomer", "C_NEW"),
            ("DimCustomer", "C_UPDCUST"),
            ("DimCustomer", "C_INACT"),
            ("DimAccount", "CA_ADDACCT"),
            ("DimAccount", "CA_UPDACCT"),
            ("DimAccount", "CA_CLOSEACCT"),
            ("DimTrade", "T_NEW"),
            ("FactWatches", "WH_ACTIVE"),
            ("FactMarketHistory", "DM_RECORDS"),
        ):
            assert keys[(dataset, batch, attribute)] > 0, (dataset, batch, attribute)
        trades = read_file(root / f"Batch{batch}" / "Trade.txt").table
        assert set(trades.column("CDC_FLAG").to_pylist()) == {"I", "U"}


def test_same_seed_same_bytes_other_seed_other_data(tmp_path: Path) -> None:
    first, second, other = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    generate(first, 0.02, seed=5)
    generate(second, 0.02, seed=5)
    generate(other, 0.02, seed=6)
    files = sorted(p.relative_to(first) for p in first.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(second) for p in second.rglob("*") if p.is_file())
    for name in files:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    assert (first / "Batch1" / "Trade.txt").read_bytes() != (
        other / "Batch1" / "Trade.txt"
    ).read_bytes()


def test_volumes_scale_with_the_scale_factor(
    small: tuple[Path, GenerationReport], tmp_path: Path
) -> None:
    _, report = small
    double = generate(tmp_path / "double", 2 * SMALL_SF, seed=11)
    # (watches grow with customers x securities at tiny scale factors, see market.py)
    for name in ("Trade.txt", "TradeHistory.txt", "DailyMarket.txt", "HR.csv", "CustomerMgmt.xml"):
        ratio = double.records[(1, name)] / report.records[(1, name)]
        assert 1.8 < ratio < 2.2, (name, ratio)
    scale = Scale(3)
    assert (scale.cm_new, scale.cm_addacct, scale.cm_inact, scale.employees) == (
        4728,
        4280,
        428,
        15000,
    )


def test_bad_scale_factor_is_refused(tmp_path: Path) -> None:
    with pytest.raises(GeneratorError, match="scale factor must be > 0"):
        generate(tmp_path, 0)
