"""The query service reads a warehouse that is being bootstrapped only once it caught up: until
then queries go to a target that holds everything (exact answers), and naming the bootstrapping
one is refused as unavailable for now."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from api.exceptions import TargetUnreachable
from api.service import QueryService
from migration.bootstrap import BootstrapMethod
from migration.migrator import Migrator
from migration.schema import WarehouseLayout
from migration.targets.duckdb_file import DuckDBTarget
from staging.handoff import StagedDeltas
from tests.unit.api.harness import ShopStage, ask, check_answer, shop_settings

TABLES = ("customers", "accounts", "prices", "activity")


#: Where the background bootstrap is held while the service is asked, per method (``auto``:
#: the file path, both warehouses being DuckDB files of one layout).
HOLD_AT = {"rows": "bootstrap-table", "auto": "bootstrap-file-rewrite"}


@pytest.mark.parametrize("method", ["auto", "rows"])
def test_queries_read_a_bootstrapped_target_only_once_it_caught_up(
    tmp_path: Path, method: BootstrapMethod
) -> None:
    stage = ShopStage(tmp_path / "staging.duckdb")
    layout = WarehouseLayout(stage.flow)
    settings = shop_settings(tmp_path)
    stage.stage_range(1, 8)
    first = Migrator(
        StagedDeltas(stage.store),
        {"duckdb": DuckDBTarget(layout, tmp_path / "warehouse.duckdb")},
        settings.migration,
    )
    first.migrate(merge="force")
    first.wait_for_release()
    first.close()
    stage.stage_range(9, 12)

    inside, go_on = threading.Event(), threading.Event()

    def hold(phase: str, target: str) -> None:
        if phase == HOLD_AT[method] and not go_on.is_set():
            inside.set()
            assert go_on.wait(30)

    # "late" comes first: the service would read it by default, were it readable
    targets = {
        "late": DuckDBTarget(layout, tmp_path / "late.duckdb"),
        "duckdb": DuckDBTarget(layout, tmp_path / "warehouse.duckdb"),
    }
    migrator = Migrator(
        StagedDeltas(stage.store),
        targets,
        settings.migration,
        hook=hold,
        bootstrap="background",
        bootstrap_method=method,
    )
    service = QueryService(stage.store, settings, migrator=migrator)
    try:
        # before any round: the service learns from the target itself that it holds nothing
        assert service.planner.target(None) == "duckdb"
        started = migrator.migrate(merge="never")
        assert inside.wait(30)
        assert service.planner.target(None) == "duckdb"
        for table in TABLES:
            page = ask(service, table)
            assert page["target"] == "duckdb"
            check_answer(stage, service, table, page)
        with pytest.raises(TargetUnreachable) as refused:  # (a query naming it asks this)
            service.planner.target("late")
        assert refused.value.code == "target_unavailable"
        assert refused.value.detail["bootstrapping"] is True
        assert service.migration_status().targets["late"].readable is False

        go_on.set()
        assert migrator.bootstraps.wait("late", 60)
        stage.stage_range(13, 13)
        migrator.migrate(merge="never")  # loads batch 13: caught up
        assert service.planner.target(None) == "late"
        status = service.migration_status().targets["late"]
        assert status.readable is True
        assert status.bootstrap is not None and status.bootstrap.state == "caught_up"
        boot = started.targets["late"].bootstrap  # (the live progress of the background run)
        assert boot is not None and boot.method == ("file" if method == "auto" else "rows")
        for table in TABLES:
            for plan in ("island", "migrate"):
                page = ask(service, table, plan=plan)
                assert page["target"] == "late"
                check_answer(stage, service, table, page)
    finally:
        go_on.set()
        service.close()
        migrator.close()
        stage.store.close()
