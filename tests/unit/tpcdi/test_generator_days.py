"""The generator's daily feed (``days=N``): Batch2..Batch<N+1>, one day each, every day with the
incremental files of the specification, its answer keys exact for what was written (recounted
from the files), the data rules kept across the whole feed, deterministic per seed."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from tpcdi.exceptions import GeneratorError, SourceNotFound
from tpcdi.generator import GenerationReport, generate
from tpcdi.generator.scale import MAX_DAYS, Calendar
from tpcdi.readers import batch_sources, read_batch_date, read_file, staging_batches
from tpcdi.verify import answer_keys, recount, rule_violations

DAYS = 10


@pytest.fixture(scope="module")
def feed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, GenerationReport]:
    out = tmp_path_factory.mktemp("tpcdi-days") / "feed"
    return out, generate(out, 0.1, seed=4, days=DAYS)


def test_a_feed_has_one_batch_per_day_after_batch1(feed: tuple[Path, GenerationReport]) -> None:
    root, report = feed
    assert staging_batches(root) == list(range(1, DAYS + 2))
    assert report.days == DAYS and report.as_dict()["days"] == DAYS
    for batch in range(2, DAYS + 2):
        folder = root / f"Batch{batch}"
        data_files = {p.name for p in folder.iterdir() if not p.name.endswith("_audit.csv")}
        assert data_files == {s.name for s in batch_sources(batch)}
        assert read_batch_date(folder / "BatchDate.txt") == datetime.date(2017, 7, 6) + (
            datetime.timedelta(days=batch)
        )
        assert (root / f"Batch{batch}_audit.csv").is_file()
    generator = read_file(root / "Generator_audit.csv").table.to_pylist()
    days = next(r for r in generator if r["Attribute"] == "NUMBER_OF_INCREMENTAL_BATCHES")
    assert days["DValue"] == DAYS


def test_every_day_answer_keys_recount_from_the_files(
    feed: tuple[Path, GenerationReport],
) -> None:
    root, _ = feed
    recounted, keys = recount(root), answer_keys(root)
    assert {k: (keys.get(k), v) for k, v in recounted.items() if keys.get(k) != v} == {}
    # the recount covers every day, not DIGen's two
    assert {b for _, b, _ in recounted} == set(range(1, DAYS + 2))
    for batch in range(2, DAYS + 2):
        for dataset, attribute in (
            ("DimCustomer", "C_NEW"),
            ("DimCustomer", "C_UPDCUST"),
            ("DimCustomer", "C_INACT"),
            ("DimAccount", "CA_ADDACCT"),
            ("DimAccount", "CA_UPDACCT"),
            ("DimAccount", "CA_CLOSEACCT"),
            ("DimTrade", "T_NEW"),
            ("FactHoldings", "HH_RECORDS"),
            ("DimTradeHistory", "CT_Records"),
            ("FactWatches", "WH_ACTIVE"),
            ("FactMarketHistory", "DM_RECORDS"),
            ("Prospect", "P_NEW"),
        ):
            assert keys[(dataset, batch, attribute)] > 0, (dataset, batch, attribute)


def test_the_feed_keeps_the_data_rules_across_days(feed: tuple[Path, GenerationReport]) -> None:
    assert rule_violations(feed[0]) == {}


def test_each_day_has_a_market_row_per_security_on_the_day_before_its_date(
    feed: tuple[Path, GenerationReport],
) -> None:
    root, _ = feed
    securities: set[str] | None = None
    for batch in range(2, DAYS + 2):
        market = read_file(root / f"Batch{batch}" / "DailyMarket.txt").table
        batch_date = read_batch_date(root / f"Batch{batch}" / "BatchDate.txt")
        assert set(market["DM_DATE"].to_pylist()) == {batch_date - datetime.timedelta(days=1)}
        symbols = market["DM_S_SYMB"].to_pylist()
        assert len(symbols) == len(set(symbols))
        securities = set(symbols) if securities is None else securities
        assert set(symbols) == securities  # every active security, every day


def test_sequence_numbers_grow_across_days(feed: tuple[Path, GenerationReport]) -> None:
    root, _ = feed
    for name in ("Trade.txt", "Customer.txt", "Account.txt", "WatchHistory.txt"):
        last = -1
        for batch in range(2, DAYS + 2):
            dsn = read_file(root / f"Batch{batch}" / name).table["CDC_DSN"].to_pylist()
            assert dsn == sorted(dsn) and dsn[0] > last, (name, batch)
            last = dsn[-1]


def test_a_feed_is_deterministic_per_seed(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    generate(first, 0.02, seed=9, days=4)
    generate(second, 0.02, seed=9, days=4)
    files = sorted(p.relative_to(first) for p in first.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(second) for p in second.rglob("*") if p.is_file())
    assert any(str(f).startswith("Batch5/") for f in files)
    for name in files:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


def test_days_outside_the_calendar_are_refused(tmp_path: Path) -> None:
    with pytest.raises(GeneratorError, match="days must be within"):
        generate(tmp_path, 0.1, days=0)
    with pytest.raises(GeneratorError, match="days must be within"):
        Calendar(MAX_DAYS + 1)
    assert Calendar(MAX_DAYS).date(MAX_DAYS + 1) == datetime.date(2020, 12, 31)


def test_a_staging_area_with_a_gap_is_named(tmp_path: Path) -> None:
    for name in ("Batch1", "Batch2", "Batch4"):
        (tmp_path / name).mkdir()
    with pytest.raises(SourceNotFound, match="Batch3"):
        staging_batches(tmp_path)
