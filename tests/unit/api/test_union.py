"""Union answers over staging and the DuckDB warehouse: every plan answers exactly the state at
its watermark (SCD type 2 closings and deletes of warehouse rows included), pinned watermarks,
pages of one answer, limits, and the fences around user SQL."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from api.exceptions import (
    QueryFailed,
    QueryRejected,
    QueryTimeout,
    ResultTooLarge,
    UnknownTarget,
    WatermarkNotReached,
    WatermarkUnavailable,
)
from api.models import QueryBody
from api.sandbox import UnionInput
from tests.unit.api.harness import (
    ShopStage,
    answer_rows,
    ask,
    check_answer,
    shop_service,
    shop_settings,
)
from warehouse.exceptions import WarehouseQueryFailed

TABLES = ("customers", "accounts", "prices", "activity")


@pytest.fixture
def split_shop(tmp_path: Path) -> ShopStage:
    """Batches 1..6 merged into the warehouse, 7..9 loaded but unmerged, 10..12 only staged."""
    stage = ShopStage(tmp_path / "staging.duckdb")
    settings = shop_settings(tmp_path)
    service, migrator = shop_service(stage, settings)
    stage.stage_range(1, 6)
    migrator.migrate(via="push", merge="force")
    stage.stage_range(7, 9)
    migrator.migrate(via="push", merge="never")
    stage.stage_range(10, 12)
    service.close()
    migrator.close()
    return stage


def test_every_plan_answers_the_state_at_its_watermark(split_shop: ShopStage, tmp_path: Path):
    stage = split_shop
    service, migrator = shop_service(stage, shop_settings(tmp_path))
    # the staged batches close warehouse versions and delete warehouse rows: the union must
    # let them win (otherwise this test would not exercise newest-version-wins)
    changes = stage.store.query(
        "SELECT count(*) FILTER (WHERE op = 'delete') AS deletes, count(*) AS upserts "
        "FROM delta_log.accounts WHERE batch_id > 9"
    ).to_pylist()[0]
    assert changes["deletes"] > 0
    closings = stage.store.query(
        "SELECT count(*) AS n FROM delta_log.customers WHERE batch_id > 9 AND NOT is_current "
        "AND _valid_from <= 9 * 43200000000"
    ).to_pylist()[0]
    assert closings["n"] > 0
    for table in TABLES:
        page = ask(service, table, include_staged=False)
        assert (page["plan"], page["watermark"]) == ("warehouse", 9)
        check_answer(stage, service, table, page)
    for table in TABLES:
        page = ask(service, table, plan="island")
        assert (page["plan"], page["watermark"], page["warehouse_watermark"]) == ("island", 12, 9)
        assert page["staged_rows"] > 0
        check_answer(stage, service, table, page)
    for table in TABLES:
        page = ask(service, table, plan="auto")
        assert page["requested_plan"] == "auto" and page["decision"]["rule"] == "crossover"
        check_answer(stage, service, table, page)
    page = ask(service, "accounts", plan="migrate")
    assert page["plan"] == "migrate" and page["watermark"] == 12
    check_answer(stage, service, "accounts", page)
    for table in TABLES:  # after the push the warehouse alone is at 12 too
        page = ask(service, table, include_staged=False)
        assert page["watermark"] == 12
        check_answer(stage, service, table, page)
    service.close()
    migrator.close()


def test_a_pinned_watermark_answers_exactly_there(split_shop: ShopStage, tmp_path: Path):
    stage = split_shop
    service, migrator = shop_service(stage, shop_settings(tmp_path))
    for pin in (6, 8, 10, 12):  # merged, in the unmerged deltas, staged, newest
        for table in TABLES:
            page = ask(service, table, plan="island", watermark=pin)
            assert page["watermark"] == pin
            check_answer(stage, service, table, page)
    page = ask(service, "customers", include_staged=False, watermark=8)
    assert page["watermark"] == 8
    check_answer(stage, service, "customers", page)
    with pytest.raises(WatermarkNotReached):
        ask(service, "accounts", watermark=13)
    with pytest.raises(WatermarkNotReached):
        ask(service, "accounts", include_staged=False, watermark=11)
    migrator.migrate(via="push", merge="force")  # the warehouse merges through 12
    with pytest.raises(WatermarkUnavailable) as gone:
        ask(service, "accounts", plan="island", watermark=8)
    assert gone.value.code == "watermark_unavailable" and gone.value.status == 409
    service.close()
    migrator.close()


def test_pages_of_one_answer_stay_consistent_while_data_moves(
    split_shop: ShopStage, tmp_path: Path
):
    stage = split_shop
    service, migrator = shop_service(stage, shop_settings(tmp_path))
    first = service.query(
        QueryBody(sql="SELECT * FROM customers", plan="island", page_size=25)
    ).model_dump()
    assert first["offset"] == 0 and len(first["rows"]) == 25 and first["next_offset"] == 25
    watermark = first["watermark"]
    # the data moves on: more batches, a push, a merge
    stage.stage_range(13, 14)
    migrator.migrate(via="push", merge="force")
    pages = [first]
    while pages[-1]["next_offset"] is not None:
        pages.append(service.page(first["answer_id"], pages[-1]["next_offset"], 25).model_dump())
    assert {p["watermark"] for p in pages} == {watermark}
    assert sum(len(p["rows"]) for p in pages) == first["total_rows"]
    check_answer(stage, service, "customers", first)
    fresh = ask(service, "customers")
    assert fresh["watermark"] == 14
    check_answer(stage, service, "customers", fresh)
    service.close()
    migrator.close()


def test_limits_on_rows_and_time(split_shop: ShopStage, tmp_path: Path):
    stage = split_shop
    settings = shop_settings(tmp_path, max_rows=10, max_union_rows=20, query_timeout_s=0.3)
    service, migrator = shop_service(stage, settings)
    page = ask(service, "activity", include_staged=False)
    assert page["truncated"] and page["total_rows"] == 10
    with pytest.raises(ResultTooLarge) as large:
        ask(service, "activity", plan="island")
    assert large.value.code == "result_too_large"
    # (WITH RECURSIVE is refused: its rows are unbounded) a cross join runs long enough
    slow = (
        "SELECT sum(a.balance + b.balance + c.balance + d.balance + e.balance) "
        "FROM accounts a, accounts b, accounts c, accounts d, accounts e"
    )
    with pytest.raises(QueryTimeout):
        service.query(QueryBody(sql=slow, include_staged=False))
    with pytest.raises(QueryFailed) as failed:
        service.query(QueryBody(sql="SELECT no_such_column FROM accounts", include_staged=False))
    assert failed.value.code == "query_failed"
    with pytest.raises(QueryRejected):
        service.query(QueryBody(sql="SELECT * FROM read_csv('/etc/passwd')"))
    service.close()
    migrator.close()


def test_user_sql_runs_where_files_are_out_of_reach(split_shop: ShopStage, tmp_path: Path):
    """Behind the parser: the island and the DuckDB warehouse refuse file access themselves."""
    stage = split_shop
    service, migrator = shop_service(stage, shop_settings(tmp_path))
    accounts = stage.store.load_state().tables["accounts"]
    item = UnionInput(
        "accounts",
        "state",
        ("aid",),
        tuple(accounts.column_names),
        accounts.slice(0, 0),
        accounts.slice(0, 0)
        .add_column(0, "op", pa.array([], pa.string()))
        .add_column(0, "batch_id", pa.array([], pa.int64())),
    )
    for sql in (
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT * FROM read_text('/etc/hostname')",
        "SELECT * FROM glob('/etc/*')",
    ):
        with pytest.raises(QueryFailed) as refused:
            service.sandbox.run([item], sql, timeout_s=5, max_bytes=1 << 20)
        assert "disabled" in refused.value.reason or "Permission" in refused.value.reason
    ask(service, "accounts", include_staged=False)  # a read locks the warehouse instance down
    reader = service.readers["duckdb"]
    with reader.snapshot(timeout_s=5) as warehouse, pytest.raises(WarehouseQueryFailed) as denied:
        warehouse.query("SELECT * FROM read_csv('/etc/passwd')")
    assert "disabled" in str(denied.value) or "Permission" in str(denied.value)
    # and the migration still loads into that instance (Arrow registration is not external)
    report = migrator.migrate(via="push", merge="force")
    assert report.targets["duckdb"].error is None and report.targets["duckdb"].watermark == 12
    check_answer(stage, service, "accounts", ask(service, "accounts", include_staged=False))
    service.close()
    migrator.close()


def test_filters_are_pushed_to_the_warehouse_and_kept_exact(split_shop: ShopStage, tmp_path: Path):
    stage = split_shop
    service, migrator = shop_service(stage, shop_settings(tmp_path))
    sql = "SELECT aid, balance FROM accounts WHERE balance > 100 AND active"
    island = service.query(QueryBody(sql=sql, plan="island")).model_dump()
    exact = service.query(QueryBody(sql=sql, plan="migrate")).model_dump()
    assert island["watermark"] == exact["watermark"] == 12
    assert answer_rows(service, island) == answer_rows(service, exact)
    assert island["total_rows"] > 0
    service.close()
    migrator.close()


def test_without_a_warehouse_staging_answers_alone(tmp_path: Path) -> None:
    stage = ShopStage(tmp_path / "staging.duckdb")
    stage.stage_range(1, 4)
    from api.service import QueryService
    from streamdi.settings import load_settings

    settings = load_settings(streamdi={"state_dir": str(tmp_path)})
    service = QueryService(stage.store, settings)
    try:
        for table in TABLES:
            page = ask(service, table, plan="migrate")
            assert (page["plan"], page["target"], page["watermark"]) == ("staging", None, 4)
            check_answer(stage, service, table, page)
        with pytest.raises(UnknownTarget) as none:
            ask(service, "accounts", include_staged=False)
        assert none.value.code == "no_target"
        with pytest.raises(UnknownTarget) as unknown:
            ask(service, "accounts", target="duckdb")
        assert unknown.value.code == "unknown_target"
    finally:
        service.close()


def test_a_sink_retraction_the_warehouse_has_not_loaded_hides_its_rows(tmp_path: Path) -> None:
    """A reprocess's batch replaces a sink's rows of earlier batches (staging.retractions): the
    union leaves the replaced rows out of the warehouse's side until the warehouse loads it, and
    the warehouse alone answers the same once it has."""
    from collections import Counter

    from runtime.reprocess import cut_over_commit
    from staging.layout import output_columns
    from staging.retractions import SinkRetraction

    stage = ShopStage(tmp_path / "staging.duckdb")
    service, migrator = shop_service(stage, shop_settings(tmp_path))
    try:
        stage.stage_range(1, 6)
        migrator.migrate(via="push", merge="force")
        columns = list(output_columns(stage.flow, "activity"))
        again = [row for row in stage.truth[6]["activity"].elements() if row[0] == 2]
        assert again and len(again) < sum(stage.truth[6]["activity"].values())
        rows = pa.Table.from_pylist([dict(zip(columns, r[1:], strict=True)) for r in again])
        retraction = SinkRetraction("activity", 2, 6, "shadow-1")
        stage.store.commit([cut_over_commit(7, {}, {}, {"activity": rows}, [retraction])])
        at = list(service.planner.tables["activity"].columns).index("batch_id")

        def batches(page: dict[str, object]) -> Counter[int]:
            return Counter(row[at] for row in answer_rows(service, page).elements())

        page = ask(service, "activity", plan="island")
        assert (page["watermark"], page["warehouse_watermark"]) == (7, 6)
        assert batches(page) == Counter({1: batches(page)[1], 7: len(again)})
        assert batches(page)[1] > 0
        island = batches(page)
        migrator.migrate(via="push", merge="never")
        page = ask(service, "activity", include_staged=False)
        assert (page["plan"], page["watermark"]) == ("warehouse", 7)
        assert batches(page) == island
    finally:
        service.close()
        migrator.close()
