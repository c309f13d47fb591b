"""The audit, the batch validation and the metric on a real PostgreSQL (embedded server): the
correct tiny warehouse passes every check, and the defects whose SQL differs most between the
dialects (regular expressions, intervals, window functions, string functions, numeric
arithmetic, parameters) fail exactly their checks. ``-m slow`` runs every defect."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy

from tests.unit.tpcdi.audit.defects import DEFECTS, Defect
from tests.unit.tpcdi.audit.test_validation import FINAL
from tests.unit.tpcdi.audit.tiny_dw import build
from tpcdi.audit.checks import ALL_CHECKS, format_audit, run_audit
from tpcdi.audit.connection import WarehouseConnection
from tpcdi.audit.metric import metric_from_warehouse
from tpcdi.audit.validation import write_batch_validation

pytestmark = pytest.mark.postgres

DIALECT_SENSITIVE = {
    "overlapping_versions",
    "two_current_rows",
    "missing_pcr",
    "trade_outside_its_batch_window",
    "dangling_fact_key",
    "fifty_two_week_low_too_old",
    "fifty_two_week_high_wrong_day",
    "yield_wrong",
    "no_earnings_alerts_missing",
    "phone_country_code_without_area",
    "nameplate_out_of_order",
    "prospect_update_date_not_a_batch_date",
    "validation_row_missing",
    "visibility_count_decreased",
    "customer_local_tax_rate_wrong",
    "sp_rating_alert_for_a_rated_company",
    "quarter_start_date_wrong",
    "eps_and_diluted_eps_swapped_with_margin",
    "two_cash_rows_for_an_account_day",
}
assert DIALECT_SENSITIVE <= {d.id for d in DEFECTS}


def test_every_check_is_ok_on_a_correct_warehouse(pg: WarehouseConnection, tmp_path: Path) -> None:
    build(pg, tmp_path / "keys")
    result = run_audit(pg)
    assert result.fail == 0, format_audit(result, only_failures=True)
    assert result.ok == len(ALL_CHECKS)
    rows = {(r.source, r.text): r.count for r in write_batch_validation(pg, 4)}
    assert rows == FINAL
    metric = metric_from_warehouse(pg, rh=3600, ri1=1800, ri2=3600)
    assert (metric.eh, metric.ei1, metric.ei2, metric.tpc_di_rps) == (10.0, 10.0, 10.0, 18)


def _check(pg: WarehouseConnection, tmp_path: Path, defect: Defect) -> None:
    build(pg, tmp_path / "keys", mutate=defect.mutate)
    result = run_audit(pg)
    failing = {c.name for c in result.checks if not c.ok}
    assert failing == set(defect.fails), format_audit(result, only_failures=True)
    details = {c.name: c.detail for c in result.checks}
    for name, numbers in defect.details:
        assert numbers in details[name], details[name]


@pytest.mark.parametrize(
    "defect", [d for d in DEFECTS if d.id in DIALECT_SENSITIVE], ids=lambda d: d.id
)
def test_a_defect_fails_exactly_its_checks(
    pg: WarehouseConnection, tmp_path: Path, defect: Defect
) -> None:
    _check(pg, tmp_path, defect)


@pytest.mark.slow
@pytest.mark.parametrize(
    "defect", [d for d in DEFECTS if d.id not in DIALECT_SENSITIVE], ids=lambda d: d.id
)
def test_every_other_defect(pg: WarehouseConnection, tmp_path: Path, defect: Defect) -> None:
    _check(pg, tmp_path, defect)


def test_a_check_that_cannot_run_fails_alone_and_the_transaction_survives(
    pg: WarehouseConnection, tmp_path: Path
) -> None:
    build(pg, tmp_path / "keys")
    pg.execute("ALTER TABLE {financial} RENAME COLUMN fi_qtr TO fi_quarter")
    result = run_audit(pg)
    failed = {c.name: c.detail for c in result.checks if not c.ok}
    assert failed, "renaming a column must break the checks that read it"
    assert all(d.startswith("query failed: postgres:") for d in failed.values()), failed
    assert "Financial FI_QTR" in failed and "fi_qtr" in failed["Financial FI_QTR"]
    assert not pg.raw.closed
    assert pg.scalar("SELECT count(*) FROM {dimbroker}") == 2  # the transaction still works


def test_a_sqlalchemy_connection_is_accepted(postgres_dsn: str, tmp_path: Path) -> None:
    engine = sqlalchemy.create_engine(
        postgres_dsn.replace("postgresql://", "postgresql+psycopg2://")
    )
    try:
        with engine.connect() as sa_conn:
            conn = WarehouseConnection.postgres(sa_conn, schema="dw_sqlalchemy")
            build(conn, tmp_path / "keys")
            result = run_audit(conn)
            assert result.fail == 0, format_audit(result, only_failures=True)
            conn.execute('DROP SCHEMA "dw_sqlalchemy" CASCADE')
            conn.commit()
        from_engine = WarehouseConnection.postgres(engine)
        assert from_engine.scalar("SELECT 1") == 1
        from_engine.close()
    finally:
        engine.dispose()
