"""``streamdi tpcdi run`` end to end on a tiny generated daily feed, into DuckDB and PostgreSQL.

One real run (a child process: the generator writing Batch1 and ten daily incremental batches,
the historical load on Spark local mode, the ten days through the embedded broker, the engine,
staging and migration, an audit after every third day and the audit after the last) and then the
warehouse it left is checked directly:

* the run's report: every audit check OK (after the last day and at the sampled days), the JSON
  keys the issues name, per-day freshness per warehouse and where the time went, the charts, its
  copy in the workdir for `--serve`, and a service on the run's workdir showing it
  (``/console/report``, and the console's Run report page in headless Chromium where it is
  installed);
* the generalized audit fails when a later day's data is wrong (a copy of the warehouse with one
  defect in day 6 and one in day 4), naming the batch;
* the DW invariants of clause 4.4.1 (one current version per key, versions that neither overlap
  nor leave gaps, no same-day versions, unique surrogate keys) and every fact key resolving;
* the incremental updates against an independent oracle: the same rules computed straight from
  the files of every day with DuckDB SQL (running cash balances, the trades' final state and
  batch, the accounts' current versions);
* the run upgrades its incremental dataflow before the second day (``--upgrade-between``:
  DimCustomer gains ``displayname``, a new sink ``customer_changes``), so everything above also
  holds across an upgrade over live state, and the new column and sink are checked directly.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import httpx
import pytest

from ingest.broker import free_port
from tests.integration.conftest import REPO
from tests.integration.console.browser import browser_missing, chromium

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.postgres]

SF = 0.1
DAYS = 10
AUDIT_EVERY = 3
SCHEMA = "tpcdi"
#: Batch2 .. Batch<DAYS + 1>
INCREMENTAL = tuple(range(2, DAYS + 2))


def run_cli(args: list[str], state: Path, cache: Path, log: Path, timeout: float = 600) -> int:
    """``streamdi`` as a child process with its state and the data cache under the test's
    directories; returns the exit code (the output goes to ``log``)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("KAFKA__", "STAGING__", "MIGRATION__", "STREAMDI__", "TPCDI__"))
    }
    env.update(
        STREAMDI__STATE_DIR=str(state),
        STREAMDI__LOG_LEVEL="WARNING",
        TPCDI__CACHE_DIR=str(cache),
        PYTHONPATH=str(REPO),
    )
    with log.open("wb") as out:
        return subprocess.run(
            [sys.executable, "-m", "cli.main", *args],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            check=False,
        ).returncode


class Run:
    """What one run left: its JSON report, chart, warehouse file and data set."""

    def __init__(self, root: Path, code: int, log: Path) -> None:
        self.root = root
        self.code = code
        self.log = log
        self.report: dict[str, Any] = json.loads((root / "run.json").read_text())
        self.chart = root / "run.png"
        self.days_chart = root / "run-days.png"
        self.warehouse = root / "work" / "warehouse.duckdb"
        self.data = Path(self.report["run"]["data_dir"])

    def connect(self) -> duckdb.DuckDBPyConnection:
        con = duckdb.connect(str(self.warehouse), read_only=True)
        con.execute(f"SET search_path = '{SCHEMA}'")
        return con


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    root = tmp_path_factory.mktemp("tpcdi-run")
    log = root / "run.log"
    code = run_cli(
        ["tpcdi", "run", "--sf", str(SF), "--target", "both", "--workdir", str(root / "work"),
         "--json", str(root / "run.json"), "--png", str(root / "run.png"), "--no-progress",
         "--upgrade-between", "--days", str(DAYS), "--audit-every", str(AUDIT_EVERY)],
        root / "state",
        root / "cache",
        log,
    )  # fmt: skip
    assert (root / "run.json").exists(), log.read_text()[-4000:]
    yield Run(root, code, log)


def test_the_run_passes_every_audit_check_and_reports_its_figures(run: Run) -> None:
    report = run.report
    audit = report["audit"]
    failed = [c for c in audit["checks"] if not c["ok"]]
    assert failed == [], failed
    assert audit["fail"] == 0 and audit["ok"] == len(audit["checks"]) >= 180
    assert report["run"]["audits"]["postgres"] == {"ok": audit["ok"], "fail": 0, "failed": []}
    assert run.code == 0, run.log.read_text()[-4000:]
    for name in ("historical", "incremental1", "incremental2"):
        phase = report["phases"][name]
        assert phase["seconds"] > 0 and phase["rows"] > 0, (name, phase)
    for name in ("incremental1", "incremental2"):
        assert 0 < report["phases"][name]["freshness_s"] < report["phases"][name]["seconds"] + 1
    assert isinstance(report["tpc_di_rps"], int) and report["tpc_di_rps"] > 0
    assert report["peak_mem_mb"] > 100  # the process tree, the Spark JVM included
    assert run.chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_run_saves_its_report_in_the_workdir_for_serve(run: Run) -> None:
    """``--serve`` (now or in a later invocation) shows this file at ``GET /console/report``."""
    saved = json.loads((run.root / "work" / "report.json").read_text())
    assert saved == run.report


def test_every_day_is_measured_and_the_sampled_audits_pass(run: Run) -> None:
    feed = run.report["feed"]
    summary, per_day = feed["summary"], feed["per_day"]
    assert summary["days"] == DAYS and per_day["batch_id"] == list(INCREMENTAL)
    assert summary["events"] == sum(per_day["events"]) > DAYS * 100
    for target in ("duckdb", "postgres"):
        fresh = per_day["freshness_s"][target]
        assert len(fresh) == DAYS and all(0 < f < 120 for f in fresh), fresh
        q = summary["freshness_s"][target]
        assert 0 < q["p50"] <= q["p99"] <= q["max"] == pytest.approx(max(fresh), abs=0.002)
        assert summary["spent_s"][f"load.{target}"] > 0
        assert summary["spent_s"][f"merge.{target}"] > 0
    for where in ("engine", "staging.commit", "kafka.poll", "run.collect", "run.validation"):
        assert summary["spent_s"][where] > 0, where
    assert summary["events_per_s"] > 0 and summary["rss_mb_max"] > 100
    # the staging file and the engine state grow with the days
    assert per_day["state_rows"][-1] > per_day["state_rows"][0] > 0
    assert per_day["staging_bytes"][-1] > 0
    # audited after days 3, 6, 9 (batches 4, 7, 10) in both warehouses, every check OK
    assert summary["audited_days"] == [3, 6, 9] and summary["audits_passed"]
    for batch in ("4", "7", "10"):
        assert set(feed["audits"][batch]) == {"duckdb", "postgres"}
        assert all(a["fail"] == 0 and a["ok"] >= 180 for a in feed["audits"][batch].values())
    # every day is a phase of its own, with its PCR
    assert [run.report["run"]["phases"][f"incremental{d}"]["batch_id"] for d in (1, DAYS)] == [
        2,
        DAYS + 1,
    ]
    assert run.days_chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_audit_of_the_feed_fails_on_a_wrong_later_day(run: Run, tmp_path: Path) -> None:
    """The generalized audit checks every day, not DIGen's two: one FactMarketHistory row of
    day 6 (batch 7) removed and one account version of day 4 (batch 5) effective outside its
    day fail exactly the checks guarding them, naming the batch."""
    from tpcdi.audit.checks import run_audit
    from tpcdi.audit.connection import WarehouseConnection

    copy = tmp_path / "warehouse.duckdb"
    shutil.copy(run.warehouse, copy)
    con = duckdb.connect(str(copy))
    con.execute(f"SET search_path = '{SCHEMA}'")
    con.execute(
        "DELETE FROM factmarkethistory WHERE rowid = (SELECT min(rowid) FROM factmarkethistory "
        "WHERE batchid = 7)"
    )
    con.execute(
        "UPDATE dimaccount SET effectivedate = effectivedate - INTERVAL 3 DAY "
        "WHERE sk_accountid = (SELECT min(sk_accountid) FROM dimaccount WHERE batchid = 5)"
    )
    con.close()
    conn = WarehouseConnection.duckdb(str(copy), schema=SCHEMA)
    try:
        result = run_audit(conn)
    finally:
        conn.close()
    failed = {c.name: c.detail for c in result.checks if not c.ok}
    assert "FactMarketHistory rows per batch" in failed, failed
    assert "batch 7:" in failed["FactMarketHistory rows per batch"]
    assert "batch 5:" in failed["DimAccount EffectiveDate window"]
    assert len(result.checks) == run.report["audit"]["ok"]


def test_the_upgrade_between_the_updates_filled_the_new_column_and_sink(run: Run) -> None:
    upgrade = run.report["run"]["upgrade"]
    kinds = {(c["kind"], c["subject"]) for c in upgrade["staging"]["plan"]["changes"]}
    assert ("column_added", "dimcustomer.displayname") in kinds
    assert ("sink_added", "customer_changes") in kinds
    assert set(upgrade["targets"]) == {"duckdb", "postgres"}
    con = run.connect()
    total, named, right = con.execute(
        "SELECT count(*), count(displayname), "
        "count(*) FILTER (WHERE displayname = firstname || ' ' || lastname) FROM dimcustomer"
    ).fetchone()  # type: ignore[misc]
    # every version: the stored ones by the fill, the later ones by apply_customer
    assert total > 0 and named == right == total
    changed = con.execute("SELECT count(*) FROM dimcustomer WHERE batchid = 3").fetchone()
    assert changed is not None and changed[0] > 0
    # the new sink delivers the batches after the switch only, in both warehouses
    rows = con.execute("SELECT count(*) FROM customer_changes").fetchone()
    assert rows is not None and rows[0] > 0
    assert run.report["run"]["table_rows"]["postgres"].get("customer_changes") in (None, rows[0])
    versions = con.execute(
        "SELECT version, count(*) FROM streamdi_migration.ledger GROUP BY 1 ORDER BY 1"
    ).fetchall()
    assert len(versions) == 2 and versions[-1][0] == upgrade["staging"]["version"]


def test_both_warehouses_hold_the_same_tables(run: Run) -> None:
    counts = run.report["run"]["table_rows"]
    assert set(counts) == {"duckdb", "postgres"}
    assert counts["duckdb"]["dimtrade"] > 0
    assert counts["postgres"] == counts["duckdb"]


#: SCD type 2 tables: (table, natural key, surrogate key).
HISTORY = (
    ("dimcustomer", "customerid", "sk_customerid"),
    ("dimaccount", "accountid", "sk_accountid"),
    ("dimsecurity", "symbol", "sk_securityid"),
    ("dimcompany", "companyid", "sk_companyid"),
    ("dimbroker", "brokerid", "sk_brokerid"),
)


@pytest.mark.parametrize(("table", "key", "surrogate"), HISTORY)
def test_history_tables_keep_the_scd2_invariants(
    run: Run, table: str, key: str, surrogate: str
) -> None:
    con = run.connect()
    rows = con.execute(f"SELECT count(*) FROM {table}").fetchone()
    assert rows is not None and rows[0] > 0
    checks = {
        "keys without exactly one current version": f"""
            SELECT count(*) FROM (SELECT {key} FROM {table} GROUP BY {key}
            HAVING count(*) FILTER (WHERE iscurrent) <> 1)""",
        "current versions not open-ended": f"""
            SELECT count(*) FROM {table}
            WHERE iscurrent <> (enddate = DATE '9999-12-31')""",
        "same-day or reversed versions": f"""
            SELECT count(*) FROM {table} WHERE effectivedate >= enddate""",
        "versions that overlap or leave a gap": f"""
            SELECT count(*) FROM (SELECT enddate, lead(effectivedate) OVER
              (PARTITION BY {key} ORDER BY effectivedate) AS next FROM {table})
            WHERE next IS NOT NULL AND next <> enddate""",
        "repeated surrogate keys": f"""
            SELECT count(*) - count(DISTINCT {surrogate}) FROM {table}""",
    }
    found = {name: con.execute(sql).fetchone()[0] for name, sql in checks.items()}  # type: ignore[index]
    assert found == dict.fromkeys(checks, 0)


#: (fact table, its key column, the dimension, the dimension's key column)
FACT_KEYS = (
    ("dimtrade", "sk_accountid", "dimaccount", "sk_accountid"),
    ("dimtrade", "sk_securityid", "dimsecurity", "sk_securityid"),
    ("dimtrade", "sk_customerid", "dimcustomer", "sk_customerid"),
    ("dimtrade", "sk_companyid", "dimcompany", "sk_companyid"),
    ("dimtrade", "sk_createdateid", "dimdate", "sk_dateid"),
    ("factcashbalances", "sk_accountid", "dimaccount", "sk_accountid"),
    ("factcashbalances", "sk_dateid", "dimdate", "sk_dateid"),
    ("factholdings", "sk_accountid", "dimaccount", "sk_accountid"),
    ("factholdings", "sk_securityid", "dimsecurity", "sk_securityid"),
    ("factholdings", "currenttradeid", "dimtrade", "tradeid"),
    ("factmarkethistory", "sk_securityid", "dimsecurity", "sk_securityid"),
    ("factmarkethistory", "sk_dateid", "dimdate", "sk_dateid"),
    ("factwatches", "sk_customerid", "dimcustomer", "sk_customerid"),
    ("factwatches", "sk_securityid", "dimsecurity", "sk_securityid"),
    ("dimaccount", "sk_customerid", "dimcustomer", "sk_customerid"),
    ("dimaccount", "sk_brokerid", "dimbroker", "sk_brokerid"),
    ("dimsecurity", "sk_companyid", "dimcompany", "sk_companyid"),
)


def test_every_fact_key_resolves(run: Run) -> None:
    con = run.connect()
    dangling = {}
    for fact, column, dimension, key in FACT_KEYS:
        total, missing = con.execute(
            f"SELECT count(*), count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM {dimension} d "
            f"WHERE d.{key} = f.{column})) FROM {fact} f"
        ).fetchone()  # type: ignore[misc]
        assert total > 0, fact
        dangling[f"{fact}.{column}"] = missing
    assert dangling == dict.fromkeys(dangling, 0)


def _batch_view(con: duckdb.DuckDBPyConnection, data: Path, name: str, columns: str) -> str:
    """A view over ``name`` of every incremental batch (pipe-delimited, no header) with a
    ``batch`` column; ``columns`` lists the file's columns."""
    view = name.split(".")[0].lower() + "_inc"
    names = [c.strip() for c in columns.split(",")]
    spec = "{" + ", ".join(f"'{c}': 'VARCHAR'" for c in names) + "}"
    parts = [
        f"SELECT {b} AS batch, * FROM read_csv('{data / f'Batch{b}' / name}', delim='|', "
        f"header=false, columns={spec}, quote='', escape='')"
        for b in INCREMENTAL
    ]
    con.execute(f"CREATE TEMP VIEW {view} AS {' UNION ALL '.join(parts)}")
    return view


def test_incremental_cash_balances_equal_a_running_sum_of_the_files(run: Run) -> None:
    """4.6.8: one row per account and batch date, its cash the previous balance plus the
    batch's transactions; computed here from the files and the Batch1 balances."""
    con = duckdb.connect()
    con.execute(f"ATTACH '{run.warehouse}' AS dw (READ_ONLY)")
    cash = _batch_view(
        con, run.data, "CashTransaction.txt", "cdc_flag, cdc_dsn, ca_id, dts, amt, name"
    )
    expected = con.execute(f"""
        WITH per_batch AS (
            SELECT batch, CAST(ca_id AS BIGINT) AS accountid, sum(CAST(amt AS DOUBLE)) AS amt
            FROM {cash} GROUP BY ALL
        ), before AS (
            SELECT accountid, cash FROM (
                SELECT accountid, cash, row_number() OVER
                    (PARTITION BY accountid ORDER BY sk_dateid DESC) AS newest
                FROM dw.{SCHEMA}.factcashbalances WHERE batchid = 1) WHERE newest = 1
        )
        SELECT p.batch, p.accountid, round(coalesce(b.cash, 0) + sum(p.amt) OVER
            (PARTITION BY p.accountid ORDER BY p.batch), 2) AS cash
        FROM per_batch p LEFT JOIN before b USING (accountid) ORDER BY 1, 2
    """).fetchall()
    got = con.execute(f"""
        SELECT batchid, accountid, round(cash, 2) FROM dw.{SCHEMA}.factcashbalances
        WHERE batchid > 1 ORDER BY 1, 2
    """).fetchall()
    assert len(expected) > 0
    assert got == expected


def test_incremental_trades_end_in_their_last_record(run: Run) -> None:
    """4.6.7: a trade's row holds its last record's status, type and prices, carries the batch
    of its last change, and is closed exactly when completed or canceled."""
    con = duckdb.connect()
    con.execute(f"ATTACH '{run.warehouse}' AS dw (READ_ONLY)")
    trade = _batch_view(
        con,
        run.data,
        "Trade.txt",
        "cdc_flag, cdc_dsn, t_id, t_dts, t_st_id, t_tt_id, t_is_cash, t_s_symb, t_qty, "
        "t_bid_price, t_ca_id, t_exec_name, t_trade_price, t_chrg, t_comm, t_tax",
    )
    rows = con.execute(f"""
        WITH last AS (
            SELECT * FROM (SELECT *, row_number() OVER (PARTITION BY t_id
                ORDER BY batch DESC, CAST(cdc_dsn AS BIGINT) DESC) AS n FROM {trade}) WHERE n = 1
        )
        SELECT count(*),
            count(*) FILTER (WHERE t.tradeid IS NULL),
            count(*) FILTER (WHERE t.status <> st.st_name OR t.type <> tt.tt_name
                OR t.batchid <> l.batch OR t.quantity <> CAST(l.t_qty AS BIGINT)
                OR (t.sk_closedateid IS NOT NULL) <> (l.t_st_id IN ('CMPT', 'CNCL'))
                OR t.sk_createdateid IS NULL)
        FROM last l
        LEFT JOIN dw.{SCHEMA}.dimtrade t ON t.tradeid = CAST(l.t_id AS BIGINT)
        LEFT JOIN dw.{SCHEMA}.statustype st ON st.st_id = l.t_st_id
        LEFT JOIN dw.{SCHEMA}.tradetype tt ON tt.tt_id = l.t_tt_id
    """).fetchone()
    assert rows is not None
    total, missing, wrong = rows
    assert total > 0
    assert (missing, wrong) == (0, 0)


def test_incremental_accounts_hold_their_last_record(run: Run) -> None:
    """4.6.1: the current version of every account in Account.txt has its last record's fields,
    the current broker and customer versions, and the batch of the change."""
    con = duckdb.connect()
    con.execute(f"ATTACH '{run.warehouse}' AS dw (READ_ONLY)")
    account = _batch_view(
        con, run.data, "Account.txt", "cdc_flag, cdc_dsn, ca_id, ca_b_id, ca_c_id, ca_name, "
        "ca_tax_st, ca_st_id"
    )  # fmt: skip
    rows = con.execute(f"""
        WITH last AS (
            SELECT * FROM (SELECT *, row_number() OVER (PARTITION BY ca_id
                ORDER BY batch DESC, CAST(cdc_dsn AS BIGINT) DESC) AS n FROM {account})
            WHERE n = 1
        )
        SELECT count(*),
            count(*) FILTER (WHERE a.accountid IS NULL),
            count(*) FILTER (WHERE a.accountdesc IS DISTINCT FROM l.ca_name
                OR a.taxstatus <> CAST(l.ca_tax_st AS BIGINT)
                OR a.batchid < l.batch
                OR b.brokerid <> CAST(l.ca_b_id AS BIGINT) OR NOT b.iscurrent
                OR c.customerid <> CAST(l.ca_c_id AS BIGINT) OR NOT c.iscurrent
                OR a.status <> CASE WHEN c.status = 'Inactive' THEN 'Inactive'
                                    ELSE st.st_name END)
        FROM last l
        LEFT JOIN dw.{SCHEMA}.dimaccount a
            ON a.accountid = CAST(l.ca_id AS BIGINT) AND a.iscurrent
        LEFT JOIN dw.{SCHEMA}.dimbroker b ON b.sk_brokerid = a.sk_brokerid
        LEFT JOIN dw.{SCHEMA}.dimcustomer c ON c.sk_customerid = a.sk_customerid
        LEFT JOIN dw.{SCHEMA}.statustype st ON st.st_id = l.ca_st_id
    """).fetchone()
    assert rows is not None
    total, missing, wrong = rows
    assert total > 0
    assert (missing, wrong) == (0, 0)


SERVE = """
import sys
from pathlib import Path

from streamdi.settings import load_settings
from tpcdi.run.serve import serve

sys.exit(serve(load_settings(), Path(sys.argv[1]), ("duckdb", "postgres"), version=2))
"""


def test_serving_the_run_shows_its_report(run: Run) -> None:
    """What ``--serve`` does after the run, as a later invocation on the run's workdir: the
    query service over its warehouse answers ``GET /console/report`` with the run's report.
    Last of the run's tests: the service opens (and may write) the run's files."""
    port = free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("KAFKA__", "STAGING__", "MIGRATION__", "STREAMDI__", "API__"))
    }
    env.update(
        STREAMDI__STATE_DIR=str(run.root / "state"),
        STREAMDI__LOG_LEVEL="WARNING",
        API__PORT=str(port),
        PYTHONPATH=str(REPO),
    )
    log = run.root / "serve.log"
    with log.open("wb") as out:
        child = subprocess.Popen(
            [sys.executable, "-c", SERVE, str(run.root / "work")],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            deadline = time.monotonic() + 180
            while True:
                assert child.poll() is None, log.read_text()[-4000:]
                assert time.monotonic() < deadline, log.read_text()[-4000:]
                try:
                    if client.get("/ready").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.3)
            answer = client.get("/console/report")
            assert answer.status_code == 200, answer.text
            assert answer.json() == run.report
        check_report_page(f"http://127.0.0.1:{port}", run.report)
    finally:
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(120)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def check_report_page(url: str, report: dict[str, Any]) -> None:
    """The console of the service at ``url`` links its Run report and shows TPC_DI_RPS, every
    phase and the audit's verdict, with no console error. Without a browser here (see
    tests/integration/console) it warns why it did not look, and the API check above stands."""
    missing = browser_missing()
    if missing is not None:
        warnings.warn(f"the console's Run report page was not checked: {missing}", stacklevel=2)
        return
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"{url}/")
        page.get_by_role("link", name="Run report").click()  # shown: the overview says a run
        rps = page.locator('[data-field="tpc-di-rps"]')
        rps.wait_for(timeout=30_000)
        assert rps.get_attribute("data-value") == str(report["tpc_di_rps"])
        shown = page.locator("main").inner_text()
        assert all(phase in shown for phase in report["phases"]), shown
        audit = report["audit"]
        assert f"{audit['ok']:,} OK, {audit['fail']:,} failed" in shown
        assert errors == []


@pytest.mark.slow
def test_the_run_on_the_spark_executor_passes_the_audit(tmp_path: Path) -> None:
    """The incremental updates on ``--executor spark`` (the same Spark session as the load)."""
    log = tmp_path / "run.log"
    code = run_cli(
        ["tpcdi", "run", "--sf", "0.02", "--executor", "spark", "--workdir", str(tmp_path / "w"),
         "--json", str(tmp_path / "run.json"), "--no-progress"],
        tmp_path / "state",
        tmp_path / "cache",
        log,
    )  # fmt: skip
    report = json.loads((tmp_path / "run.json").read_text())
    assert report["run"]["executor"] == "spark"
    assert [c["name"] for c in report["audit"]["checks"] if not c["ok"]] == []
    assert code == 0, log.read_text()[-3000:]


def warehouse_contents(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every table of a run's DuckDB warehouse, rows sorted; DImessages without its wall-clock
    time (the only column a run's timing decides)."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        names = [
            r[0]
            for r in con.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = ?",
                [SCHEMA],
            ).fetchall()
        ]
        out: dict[str, list[tuple[Any, ...]]] = {}
        for name in sorted(names):
            skip = " EXCLUDE (messagedateandtime)" if name == "dimessages" else ""
            out[name] = sorted(
                con.execute(f"SELECT *{skip} FROM {SCHEMA}.{name}").fetchall(), key=repr
            )
        return out
    finally:
        con.close()


@pytest.mark.slow
def test_the_spark_executor_leaves_the_warehouse_the_local_executor_leaves(
    tmp_path: Path,
) -> None:
    """Issue 10: the TPC-DI incremental dataflows on ``--executor spark`` end with every DW table
    (surrogate keys, SCD2 versions, facts, alerts) identical to a run on ``local``; the data set
    is generated once and shared by both runs."""
    cache = tmp_path / "cache"
    contents = {}
    for executor in ("local", "spark"):
        root = tmp_path / executor
        log = root / "run.log"
        root.mkdir()
        code = run_cli(
            ["tpcdi", "run", "--sf", "0.02", "--executor", executor, "--workdir",
             str(root / "w"), "--json", str(root / "run.json"), "--no-progress"],
            root / "state",
            cache,
            log,
        )  # fmt: skip
        assert code == 0, log.read_text()[-3000:]
        contents[executor] = warehouse_contents(root / "w" / "warehouse.duckdb")
    local, spark = contents["local"], contents["spark"]
    assert local.keys() == spark.keys()
    assert sum(len(rows) for rows in local.values()) > 10_000
    assert local["dimtrade"] and local["dimessages"]
    different = [name for name in local if local[name] != spark[name]]
    assert different == [], {name: (len(local[name]), len(spark[name])) for name in different}
