"""The query service on a real PostgreSQL: answers stay exact while staging and migration run
(both warehouses), and user SQL that got past the parser still cannot read files, write, or run
long: the reader role, the read-only transaction and the statement timeout refuse it."""

from __future__ import annotations

from pathlib import Path

import pytest

from api.exceptions import QueryTimeout
from api.models import QueryBody
from streamdi.settings import load_settings
from tests.integration.migration.conftest import PostgresServer
from tests.unit.api.harness import ShopStage, ask, check_answer, shop_service
from tests.unit.api.test_consistency import run_consistency
from warehouse.exceptions import WarehouseQueryFailed, WarehouseQueryTimeout

pytestmark = pytest.mark.postgres

TABLES = ("customers", "accounts", "prices", "activity")


def _settings(tmp: Path, dsn: str, **api: object):  # type: ignore[no-untyped-def]
    return load_settings(
        streamdi={"state_dir": str(tmp)},
        postgres={"dsn": dsn},
        migration={"targets": "postgres,duckdb", "max_batches_per_load": 4},
        api=api,
    )


def test_answers_stay_exact_on_both_warehouses_while_data_moves(
    pg_server: PostgresServer, tmp_path: Path
) -> None:
    stage = ShopStage(tmp_path / "staging.duckdb", events=80)
    service, migrator = shop_service(stage, _settings(tmp_path, pg_server.database()))
    try:
        checked = run_consistency(
            stage, service, migrator, batches=30, targets=["postgres", "duckdb"]
        )
        for table in TABLES:  # and at the end, each warehouse on its own
            for target in ("postgres", "duckdb"):
                check_answer(stage, service, table, ask(service, table, target=target))
    finally:
        service.close()
        migrator.close()
    assert checked["island"] > 0 and checked["migrate"] > 0 and checked["warehouse"] > 0


def test_user_sql_past_the_parser_is_still_fenced_in(
    pg_server: PostgresServer, tmp_path: Path
) -> None:
    stage = ShopStage(tmp_path / "staging.duckdb")
    stage.stage_range(1, 3)
    settings = _settings(tmp_path, pg_server.database(), query_timeout_s=0.5)
    service, migrator = shop_service(stage, settings)
    try:
        migrator.migrate(via="push", merge="force")
        page = ask(service, "accounts", target="postgres", include_staged=False)
        check_answer(stage, service, "accounts", page)
        reader = service.readers["postgres"]
        refused = {
            "SELECT pg_read_file('/etc/passwd')": "permission denied",
            "SELECT * FROM pg_ls_dir('.') AS d": "permission denied",
            "SELECT lo_import('/etc/passwd')": "",
            'WITH gone AS (DELETE FROM "shop"."accounts" RETURNING 1) SELECT count(*) FROM gone': "",
            'SELECT * FROM "shop"."accounts" FOR UPDATE': "",
            "SELECT nextval('no_such_sequence')": "",
        }
        for sql, reason in refused.items():
            with (
                reader.snapshot(timeout_s=5) as warehouse,
                pytest.raises(WarehouseQueryFailed) as denied,
            ):
                warehouse.query(sql)
            assert reason in str(denied.value)
        with reader.snapshot(timeout_s=0.3) as warehouse, pytest.raises(WarehouseQueryTimeout):
            warehouse.query("SELECT pg_sleep(5)")
        # a session setting a query managed to change does not outlive its snapshot
        with reader.snapshot(timeout_s=5) as warehouse:
            warehouse.query(
                "SELECT set_config('statement_timeout', '0', false), "
                "set_config('default_transaction_read_only', 'off', false)"
            )
        for _ in range(3):  # every pooled connection
            with reader.snapshot(timeout_s=0.3) as warehouse, pytest.raises(WarehouseQueryTimeout):
                warehouse.query("SELECT pg_sleep(5)")
        # a slow query through the service: the statement timeout, reported as query_timeout
        slow = (
            "SELECT sum(a.balance + b.balance + c.balance + d.balance + e.balance) "
            "FROM accounts a, accounts b, accounts c, accounts d, accounts e"
        )
        with pytest.raises(QueryTimeout):
            service.query(QueryBody(sql=slow, target="postgres", include_staged=False))
        # and the reader still works afterwards (the pool dropped nothing it needs)
        check_answer(stage, service, "customers", ask(service, "customers", target="postgres"))
    finally:
        service.close()
        migrator.close()
